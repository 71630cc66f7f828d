"""A worked port of a small public benchmark: MiniQA, reading comprehension with unanswerable
questions (made up for this example, in the style of SQuAD 2.0 and of the QA evaluations that
score an answer by whether it contains a gold alias).

What a port keeps from the benchmark, and how:

- its rows and its own splits (``miniqa.jsonl``): a :class:`~ratchet.TaskPool` uses them as
  given (``dev`` is Ratchet's probe split). Its dev split holds no two-hop question, which
  ``ratchet check`` reports without failing;
- its scorer, imported from ``scoring.py`` beside this file (a ``file.py:attr`` reference puts
  this folder on ``sys.path``);
- its unanswerable questions, where answering nothing is right: ``noop_correct`` exempts them
  from the rule that doing nothing must never pass;
- its scorer's known hole: an answer that contains the gold alias among other words passes, so
  the red team's hedged, padded and huge answers get through. The port accepts those findings
  knowingly, with the reason (``accepted_findings``); ``ratchet check`` reports them as
  accepted and every ``ratchet improve`` summary on this env lists them.

    ratchet check examples/miniqa/env.py:env -n 6
    ratchet eval examples/miniqa/env.py:env --model local -n 6
"""

import json
from pathlib import Path

from scoring import correct

from ratchet import SimpleEnv, Task, TaskPool, TaskSpec, ToolCall, Verdict

ROWS = Path(__file__).with_name("miniqa.jsonl")
SPLITS = {"train": "train", "dev": "probe", "test": "test"}
SUBSTRING_RULE = (
    "MiniQA's published scorer passes any answer that contains a gold alias; the port keeps it"
)


def spec(row: dict) -> TaskSpec:
    """One row as a task: the context and question shown, the gold aliases hidden."""
    return TaskSpec(
        f"Context: {row['context']}\n\nQuestion: {row['question']}",
        {"context": row["context"], "question": row["question"], "answers": row["answers"]},
        family=f"{row['hops']}-hop" if row["answers"] else "unanswerable",
        difficulty=row["hops"],
        noop_correct=not row["answers"],
    )


def pool() -> TaskPool:
    """The benchmark's rows in its own splits."""
    splits: dict[str, list[TaskSpec]] = {split: [] for split in SPLITS.values()}
    for line in ROWS.read_text().splitlines():
        row = json.loads(line)
        splits[SPLITS[row["split"]]].append(spec(row))
    return TaskPool.from_splits(splits)


def verify(task: Task, world: None, answer: str | None) -> Verdict:
    """The benchmark's own scorer on the submitted answer."""
    if answer is None:
        return Verdict(0.0, False, "no answer was submitted")
    aliases = task.params["answers"]
    return Verdict.of(correct(answer, aliases), f"gold aliases: {aliases or 'none (no answer)'}")


def oracle(task: Task) -> list[ToolCall]:
    """The first gold alias, or the empty answer where the context holds none."""
    aliases = task.params["answers"]
    return [ToolCall("finish", {"answer": aliases[0] if aliases else ""})]


env = SimpleEnv(
    name="example/miniqa",
    description="Reading comprehension with unanswerable questions (a benchmark port).",
    sample=pool(),
    build=lambda task: None,
    tools=lambda world: [],
    verify=verify,
    oracle=oracle,
    policy="Answer with a short span of the context. If the context does not answer the "
    "question, call finish with an empty answer.",
    accepted_findings={
        f"red-team: {attack}": SUBSTRING_RULE
        for attack in ("hedged answer", "padded answer", "huge answer")
    },
)
