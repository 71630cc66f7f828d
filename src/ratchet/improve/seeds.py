"""The seed of every random stream of an improvement run, derived from the run's one seed.

Each kind of draw has its own stream so that no two kinds share samples: candidates and the
incumbent meet the same probe tasks with the same seeds (the gate pairs them), each round
explores and proposes afresh, and nothing a test episode does can reach a decision. The values
are part of a run's identity: changing one changes which tasks a seeded run draws. Callers name
the stream through the module: ``seeds.probe(config.seed)``.
"""

from __future__ import annotations

PROBE_OFFSET = 1_000
TEST_OFFSET = 2_000
LEVER_OFFSET = 3_000
# A prime stride keeps the streams of successive rounds (or branches) from meeting.
_STRIDE = 7919
_TURN_STRIDE = 31
_RESAMPLE_MODULUS = 2**62


def probe(run_seed: int) -> int:
    """The seed of the probe's task draw and episodes (the same every round)."""
    return run_seed + PROBE_OFFSET


def test(run_seed: int) -> int:
    """The seed of the test split's task draw and episodes."""
    return run_seed + TEST_OFFSET


def practice(run_seed: int, number: int) -> int:
    """The seed of round ``number``'s exploration episodes and its levers' own draws."""
    return run_seed + number


def lever_play(run_seed: int, number: int) -> int:
    """The seed of the episodes a lever plays while proposing in round ``number``."""
    return run_seed + LEVER_OFFSET + _STRIDE * number


def curriculum(run_seed: int, number: int) -> int:
    """The seed of the curriculum's choice of round ``number``'s training tasks."""
    return run_seed * _STRIDE + number


def resample(draw: int, turn: int, attempt: int) -> int:
    """The sampling seed of an exploration branch's ``attempt``-th resample at ``turn``."""
    return (draw * _STRIDE + turn * _TURN_STRIDE + attempt) % _RESAMPLE_MODULUS
