"""Where the wall time of one short ``ratchet improve`` on the embedded model goes.

Runs the improve loop (default: calc, one round, the rft lever, small samples) with timers
around the parts of a run, then prints each part's seconds and share of the run's wall time,
and the throughput of generation and training:

- phases, which do not overlap and cover the run: practice (exploring the round's training
  tasks), proposals (the levers, training included), the gate's probes (and retests), the test;
- work inside them, summed over threads (episodes run on threads beside the batched model
  calls, so these can overlap one another): generation, split into prefill (forward passes
  over more than one new token: prompts, and the prefix cache's shared prefixes), decode (the
  one-token forward passes),
  grammar masks (llguidance) and per-row sampling; env steps (tool calls, their sandbox runs
  included) and sandbox runs alone; training (the optimiser loop of the weight levers).

Run: ``python bench/run_profile.py [--env calc] [--out DIR]``. Measures; never asserts.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import transformers

import ratchet.engine.harness as harness
import ratchet.engine.models.constrain as constrain
import ratchet.engine.models.decoding as decoding
import ratchet.engine.models.local as local
import ratchet.engine.models.preference as preference
import ratchet.engine.models.training as training
from ratchet.engine.models import cached_backends
from ratchet.envs.registry import make_env
from ratchet.improve import practice
from ratchet.improve.config import ImproveConfig
from ratchet.improve.loop import improve
from ratchet.sandbox import Sandbox

seconds: dict[str, float] = defaultdict(float)
counts: dict[str, int] = defaultdict(int)
_lock = threading.Lock()
_state = threading.local()


def add(part: str, elapsed: float, count: int = 0) -> None:
    """Add ``elapsed`` seconds (and ``count`` items) to ``part``."""
    with _lock:
        seconds[part] += elapsed
        counts[part] += count


@contextmanager
def timed(part: str) -> Iterator[None]:
    """Time the block into ``part``."""
    started = time.perf_counter()
    try:
        yield
    finally:
        add(part, time.perf_counter() - started)


def wrap(owner: Any, name: str, part: str) -> None:
    """Time every call of ``owner.name`` into ``part``."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def timed_call(*args: Any, **kwargs: Any) -> Any:
        with timed(part):
            return original(*args, **kwargs)

    setattr(owner, name, timed_call)


def instrument() -> None:
    """Install the timers (phases, generation, env steps, sandbox, training)."""
    for name, part in (
        ("explore", "phase: practice"),
        ("probe", "phase: gate probes"),
        ("retest", "phase: gate probes"),
        ("test", "phase: test"),
    ):
        wrap(practice.Practice, name, part)
    original_proposal = practice.Practice.proposal

    def proposal(self: Any, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        propose = original_proposal(self, *args, **kwargs)

        def timed_propose(*inner: Any, **named: Any) -> Any:
            with timed("phase: proposals"):
                return propose(*inner, **named)

        return timed_propose

    practice.Practice.proposal = proposal  # type: ignore[method-assign]
    wrap(harness, "act", "env steps")
    wrap(Sandbox, "run", "sandbox runs")
    wrap(constrain.ToolCallConstraint, "__call__", "generation: grammar masks")
    wrap(decoding.RowSampler, "__call__", "generation: sampling")
    _instrument_generation()
    _instrument_training()


def _instrument_generation() -> None:
    original = local.LocalModel._generate

    def generate(self: Any, rows: Any, *args: Any, **kwargs: Any) -> Any:
        _state.generating = True
        started = time.perf_counter()
        try:
            completions = original(self, rows, *args, **kwargs)
        finally:
            _state.generating = False
        tokens = sum(c.completion_tokens for c in completions)
        add("generation", time.perf_counter() - started, tokens)
        counts["prompt tokens"] += sum(len(row) for row in rows)
        return completions

    local.LocalModel._generate = generate  # type: ignore[method-assign]
    forward = transformers.LlamaForCausalLM.forward

    def timed_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(_state, "generating", False):
            return forward(self, *args, **kwargs)  # training, or outside generation
        ids = kwargs.get("input_ids", args[0] if args else None)
        width = ids.shape[1] if ids is not None else 1
        with timed("generation: prefill" if width > 1 else "generation: decode"):
            return forward(self, *args, **kwargs)

    transformers.LlamaForCausalLM.forward = timed_forward  # type: ignore[method-assign]


def _instrument_training() -> None:
    for module in (training, preference):
        original = module.optimise

        def optimise(
            trainable: Any, loss: Any, settings: Any, *rest: Any, _inner: Any = original
        ) -> list[float]:
            started = time.perf_counter()
            losses: list[float] = _inner(trainable, loss, settings, *rest)
            add("training", time.perf_counter() - started, settings.steps)
            return losses

        module.optimise = optimise  # type: ignore[attr-defined]


def report(wall_s: float) -> None:
    """Print the table: seconds and share of wall time per part, then throughputs."""
    print(f"{'part':32s} {'seconds':>9s} {'share':>7s}")
    print(f"{'whole run (wall)':32s} {wall_s:9.1f} {100:6.1f}%")
    for part in sorted(seconds, key=lambda p: (not p.startswith("phase"), p)):
        print(f"{part:32s} {seconds[part]:9.1f} {100 * seconds[part] / wall_s:6.1f}%")
    generated, decode_s = counts["generation"], seconds["generation: decode"]
    if seconds["generation"]:
        print(
            f"generation: {generated} tokens, {generated / seconds['generation']:.1f} tokens/s "
            f"overall, {generated / max(decode_s, 1e-9):.1f} tokens/s of decode time, "
            f"{counts['prompt tokens']} prompt tokens"
        )
    if seconds["training"]:
        steps = counts["training"]
        print(f"training: {steps} optimiser steps, {steps / seconds['training']:.3f} steps/s")


def progress(line: str) -> None:
    """Show the run's own log lines, so a long profile shows where it is."""
    print(f"  [{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="calc")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--train-tasks", type=int, default=16)
    parser.add_argument("--probe-tasks", type=int, default=24)
    parser.add_argument("--test-tasks", type=int, default=16)
    parser.add_argument("--train-steps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="run directory (default: temp)")
    args = parser.parse_args()
    instrument()
    config = ImproveConfig(
        env=args.env,
        levers=("rft",),
        rounds=args.rounds,
        train_tasks=args.train_tasks,
        probe_tasks=args.probe_tasks,
        test_tasks=args.test_tasks,
        train_steps=args.train_steps,
        curve=False,
    )
    print(f"torch threads {torch.get_num_threads()}; {config.env}, {config.rounds} round(s)")
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch) / "run"
        started = time.perf_counter()
        improve(config, make_env(args.env), out, cached_backends(), log=progress)
        report(time.perf_counter() - started)


if __name__ == "__main__":
    main()
