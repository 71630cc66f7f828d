"""How alike an episode plays alone and in a batch, with the embedded model.

Every turn of an episode samples with its own seed, so alone or beside others it draws the
same random numbers. The replies still differ where the other rows' padding changes the bf16
rounding of the logits enough to move a draw. This plays 12 calc level-2 tasks once alone
(concurrency 1) and once all together (concurrency 12) and prints how many first replies and
whole episodes came out the same.

    python bench/batch_invariance.py
"""

from __future__ import annotations

from ratchet import make_env
from ratchet.core.agent import Agent
from ratchet.engine.models import make_model
from ratchet.engine.rollout import RolloutConfig, rollout

TASKS = 12


def main() -> None:
    calc = make_env("calc")
    model = make_model("local")
    tasks = calc.tasks("train", TASKS, seed=6, difficulty=2)

    def replies(concurrency: int) -> list[list[str]]:
        config = RolloutConfig(concurrency=concurrency, max_reply_tokens=48)
        played = rollout(calc, tasks, Agent(temperature=1.0), model, config, seed=4)
        return [[step.output for step in t.steps] for t in played]

    alone, together = replies(1), replies(TASKS)
    first = sum(a[:1] == b[:1] for a, b in zip(alone, together, strict=True))
    whole = sum(a == b for a, b in zip(alone, together, strict=True))
    print(
        f"alike alone and in a batch of {TASKS}: first reply {first}/{TASKS}, "
        f"whole episode {whole}/{TASKS}"
    )


if __name__ == "__main__":
    main()
