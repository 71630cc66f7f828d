"""The gate's power where a level has just opened, with and without the probe sized for it.

A round that opens level 2 probes levels 1 and 2 evenly; the incumbent passes none of level 2,
and a candidate that learned part of it gains only there. This plays such rounds by simulation
(:func:`ratchet.improve.gate_simulation.simulate`, shared seeds) at the run's own probe size and
at the size :func:`ratchet.improve.gate.probe_size` draws, for candidates that pass a share of
the new level, and prints the share of rounds that accept the better candidate. It also prints
the false-accept rate of whole runs at the grown size (candidates no better than the incumbent).

Usage: ``python bench/gate_power.py [--trials 300] [--probe-tasks 24] [--rounds 3]``
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from ratchet.improve.gate import GateConfig, probe_size, round_alpha
from ratchet.improve.gate_simulation import simulate


def main() -> None:
    """Print the power table and the false-accept rates."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--probe-tasks", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    config = GateConfig()
    alpha = round_alpha(config, args.rounds)
    per_round = replace(config, alpha=alpha)
    print(f"round alpha {alpha:.4f}; half the probe at a level just opened (shared seeds)")
    print("level-1 rates  levers  new-level rate  probe  power at probe  power at --probe-tasks")
    for base in ((0.5, 1.0), (0.9, 1.0)):
        for levers in (1, 2):
            incumbent_pass = sum(base) / 2 / 2
            size = probe_size(args.probe_tasks, config, alpha / levers, incumbent_pass)
            for rate in (0.2, 0.3, 0.5):
                powers = [
                    simulate(
                        per_round,
                        probe_tasks=tasks,
                        probe_k=1,
                        levers=levers,
                        rounds=1,
                        gain=rate,
                        base=base,
                        coupled=True,
                        opened=0.5,
                        trials=args.trials,
                    )
                    for tasks in (size, args.probe_tasks)
                ]
                print(
                    f"{base[0]:.1f}-{base[1]:.1f}       {levers}       {rate:.1f}"
                    f"             {size:<5}  {powers[0]:.2f}           {powers[1]:.2f}"
                )
    for coupled in (False, True):
        size = probe_size(args.probe_tasks, config, alpha / 2, 0.375)
        false_accepts = simulate(
            config,
            probe_tasks=size,
            probe_k=1,
            levers=2,
            rounds=args.rounds,
            base=(0.5, 1.0),
            coupled=coupled,
            opened=0.5,
            trials=args.trials,
        )
        print(
            f"false accepts per run ({args.rounds} rounds, 2 levers, {size} tasks, "
            f"{'shared' if coupled else 'own'} seeds): {false_accepts:.3f} (alpha {config.alpha})"
        )


if __name__ == "__main__":
    main()
