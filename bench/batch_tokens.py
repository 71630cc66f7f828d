"""Generation time on long prompts with and without the local backend's token budget, in one run.

``LocalModel`` splits a batch so that one ``generate()`` call holds at most
``max_batch_tokens`` token cells (rows x (longest prompt + reply)). This plays files level-2
tasks with the embedded model once, recording the batches of prompts the rollout sends, then
replays exactly those batches twice on a fresh key-value cache filled turn by turn as in a run:
without a budget (one ``generate()`` per batch) and with one. Prints seconds, prompt tokens per
second, how many ``generate()`` calls each replay made, the ratio, and how many replies came
out the same (a batch's make-up moves float rounding, which can turn a near tie).

    PYTHONPATH=src python bench/batch_tokens.py [--tasks 16] [--turns 4] [--budget 24576]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

from ratchet.core.agent import Agent
from ratchet.core.env import Env
from ratchet.core.task import Task
from ratchet.engine.harness import Budget
from ratchet.engine.models.base import Completion, Prompt, Sampling
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.envs.registry import load_env_reference

if TYPE_CHECKING:
    from ratchet.engine.models.local import LocalModel

REPLY_TOKENS = 64


def recorded_batches(
    model: LocalModel, env: Env, tasks: list[Task], turns: int
) -> list[list[Prompt]]:
    """Play ``tasks`` of ``env`` and return the prompt batches the rollout sent to the model."""
    complete = model.complete
    sent: list[list[Prompt]] = []

    def recording(prompts: Sequence[Prompt], sampling: Sampling) -> list[Completion]:
        sent.append(list(prompts))
        return complete(prompts, sampling)

    agent = Agent(model="local", max_turns=turns, temperature=0.0)
    config = RolloutConfig(len(tasks), REPLY_TOKENS, Budget(turns, 4096, 3600.0))
    with patch.object(model, "complete", recording):
        rollout(env, tasks, agent, model, config, seed=5)
    return sent


def replay(
    model: LocalModel, budget: int | None, batches: list[list[Prompt]]
) -> tuple[float, int, list[str]]:
    """Seconds, ``generate()`` calls and replies of completing ``batches`` under ``budget``."""
    model.max_batch_tokens = budget
    model.clear_kv_cache()
    generate, calls = model._generate, 0

    def counting(*args: Any) -> list[Completion]:
        nonlocal calls
        calls += 1
        return generate(*args)

    replies: list[str] = []
    with patch.object(model, "_generate", counting):
        started = time.perf_counter()
        for prompts in batches:
            done = model.complete(prompts, Sampling(temperature=0, max_tokens=REPLY_TOKENS))
            replies.extend(c.text for c in done)
        seconds = time.perf_counter() - started
    return seconds, calls, replies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=16, help="files level-2 tasks")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--budget", type=int, default=24_576, help="max_batch_tokens")
    args = parser.parse_args()
    from ratchet.engine.models.local import LocalModel

    files = load_env_reference("files")
    tasks = files.tasks("train", args.tasks, seed=3, difficulty=2)
    model = LocalModel(max_batch_size=len(tasks), max_batch_tokens=None)
    batches = recorded_batches(model, files, tasks, args.turns)
    lengths = [model.count_tokens(p) for batch in batches for p in batch]
    prompt_tokens, widest = sum(lengths), max(lengths)
    print(
        f"files d2, {len(tasks)} episodes of up to {args.turns} turns: {len(batches)} batches, "
        f"{prompt_tokens} prompt tokens (longest prompt {widest}), replies up to {REPLY_TOKENS}"
    )
    rows = {budget: replay(model, budget, batches) for budget in (None, args.budget)}
    print(f"{'budget':>8} {'seconds':>8} {'prompt tok/s':>13} {'generate calls':>15}")
    for budget, (seconds, calls, _) in rows.items():
        print(f"{budget or 'none':>8} {seconds:8.1f} {prompt_tokens / seconds:13.1f} {calls:15}")
    (plain_s, _, plain), (budget_s, _, split) = rows[None], rows[args.budget]
    same = sum(a == b for a, b in zip(plain, split, strict=True))
    print(f"ratio budget/none, prompt tokens per second: {plain_s / budget_s:.2f}")
    print(f"identical replies: {same}/{len(plain)}")


if __name__ == "__main__":
    main()
