"""Which tools a task names: the `drawn` strategy's rule against the oracles' plans.

Every second branch of the `drawn` strategy calls a tool drawn among those the task's
instruction names (:func:`ratchet.improve.explore.strategies.named_tools`). This draws
``--tasks`` training-split tasks a level from each built-in env and prints, for the rule by a
name's first word and the rule by any word of the name (each also taking the description's
first word), how often the oracle's first acting call is to a named tool, how many tools are
named, and the share of the plan's tools named. The oracle is read here only to score the
rules; exploration never reads it. No model runs.

Usage: ``python bench/tool_naming.py [--tasks 40] [--envs calc grid files shop code]``
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from ratchet.core.env import FINISH
from ratchet.envs.registry import load_env_reference
from ratchet.improve.explore.strategies import named_tools

Rule = Callable[[dict[str, str], str], set[str]]


def _first_word_rule(tools: dict[str, str], instruction: str) -> set[str]:
    """The rule before: a tool is named by the first word of its name or its description."""
    words = set(re.findall(r"[a-z]+", instruction.lower()))
    named = set()
    for name, description in tools.items():
        verbs = {name.lower().split("_")[0]}
        first = re.match(r"[A-Za-z]+", description.strip())
        if first is not None and first.group().lower() not in {"a", "an", "the"}:
            verbs.add(first.group().lower())
        if verbs & words:
            named.add(name)
    return named


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--envs", nargs="+", default=["calc", "grid", "files", "shop", "code"])
    args = parser.parse_args()
    rules: dict[str, Rule] = {
        "first word": _first_word_rule,
        "any word": lambda tools, instruction: set(named_tools(tools, instruction)),
    }
    print(f"{'env':6} {'level':>5} {'tools':>5}  " + "  ".join(f"{r:>28}" for r in rules))
    for name in args.envs:
        env = load_env_reference(name)
        for level in range(1, min(env.max_difficulty, 3) + 1):
            scores = {rule: [0, 0, 0.0] for rule in rules}
            count, tools = 0, {}
            for task in env.tasks("train", args.tasks, seed=0, difficulty=level):
                session = env.session(task)
                schemas = session.reset().tools
                session.close()
                functions = (s.get("function", s) for s in schemas)
                tools = {
                    str(f["name"]): str(f.get("description") or "")
                    for f in functions
                    if f["name"] != FINISH
                }
                plan = [call.name for call in env.oracle(task) if call.name != FINISH]
                if not plan:
                    continue
                count += 1
                for rule, score in scores.items():
                    named = rules[rule](tools, task.instruction)
                    score[0] += plan[0] in named
                    score[1] += len(named)
                    score[2] += len(set(plan) & named) / len(set(plan))
            cells = [
                f"first {s[0]:>2}/{count} named {s[1] / count:3.1f} plan {s[2] / count:.2f}"
                for s in scores.values()
            ]
            print(f"{name:6} {level:>5} {len(tools):>5}  " + "  ".join(f"{c:>28}" for c in cells))


if __name__ == "__main__":
    main()
