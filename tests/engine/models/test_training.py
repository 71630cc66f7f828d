from collections import Counter

from ratchet.engine.models.training import balanced_weights


def _share(patterns: list[str], weights: list[float], chosen: str) -> float:
    return sum(w for p, w in zip(patterns, weights, strict=True) if p == chosen) / sum(weights)


def test_patterns_of_one_length_are_drawn_equally_often() -> None:
    patterns = ["add,finish"] * 9 + ["multiply,finish"] * 3
    weights = balanced_weights(patterns)
    assert _share(patterns, weights, "add,finish") == 0.5
    assert _share(patterns, weights, "multiply,finish") == 0.5


def test_each_length_keeps_its_share_of_the_successes() -> None:
    # Ten one-operation successes and one two-operation success: the rare long pattern must
    # not be drawn as often as a whole length of common short ones.
    patterns = ["add,finish"] * 8 + ["multiply,finish"] * 2 + ["add,subtract,finish"]
    weights = balanced_weights(patterns)
    assert abs(_share(patterns, weights, "add,subtract,finish") - 1 / 11) < 1e-12
    assert abs(sum(weights) - len(patterns)) < 1e-9


def test_examples_of_one_pattern_weigh_the_same() -> None:
    patterns = ["a,finish", "b,finish", "a,finish", "a,b,finish", "a,c,finish", "a,c,finish"]
    weights = balanced_weights(patterns)
    by_pattern: dict[str, set[float]] = {}
    for pattern, weight in zip(patterns, weights, strict=True):
        by_pattern.setdefault(pattern, set()).add(weight)
    assert all(len(values) == 1 for values in by_pattern.values())
    assert Counter(patterns)["a,c,finish"] * by_pattern["a,c,finish"].pop() == 1.5
