"""What the gate gains by passing a round's alpha on, and whether the bound holds with it.

A round whose every tested candidate was significant spends no alpha and passes its share on
to the rounds left (:func:`ratchet.improve.gate.round_spent`). This plays whole 3-round runs by
simulation (:func:`ratchet.improve.gate_simulation.simulate_rounds`, 40 probe tasks, one
episode a task) with and without that rule, in four settings of the candidates' gains per
round, with own and shared sampling seeds, and prints the share of runs that accepted a
candidate no better than its incumbent and the share that accepted a better one in each round.

Usage: ``python bench/gate_passes_on.py [--trials 400]``
"""

from __future__ import annotations

import argparse

from ratchet.improve.gate import GateConfig
from ratchet.improve.gate_simulation import simulate_rounds

SETTINGS = (
    ("no candidate better", ((0.0, 0.0),) * 3, (0.1, 0.9)),
    ("round 1 both better, then none", ((0.5, 0.5), (0.0, 0.0), (0.0, 0.0)), (0.1, 0.5)),
    ("round 1 both better, then one +0.15", ((0.5, 0.5), (0.15, 0.0), (0.15, 0.0)), (0.1, 0.5)),
    ("round 1 one better, then one +0.15", ((0.5, 0.0), (0.15, 0.0), (0.15, 0.0)), (0.1, 0.5)),
)


def main() -> None:
    """Print, per setting, seeding and rule, the false-accept rate and accepts by round."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    args = parser.parse_args()
    print("setting                              seeds   passes on  false  better by round")
    for name, gains, base in SETTINGS:
        for coupled in (False, True):
            for passes_on in (False, True):
                run = simulate_rounds(
                    GateConfig(),
                    probe_tasks=40,
                    gains=gains,
                    base=base,
                    trials=args.trials,
                    coupled=coupled,
                    passes_on=passes_on,
                )
                by_round = " ".join(f"{share:.2f}" for share in run.accepts_by_round)
                seeds, rule = "shared" if coupled else "own", "yes" if passes_on else "no"
                print(f"{name:36s} {seeds:7s} {rule:10s} {run.false_accepts:.3f}  {by_round}")


if __name__ == "__main__":
    main()
