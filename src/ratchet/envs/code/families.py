"""Task families of the ``code`` env: a spec, a reference implementation and an input generator.

Each family is parameterised (rotate by ``k``, words longer than ``n``, ...); the reference is
Python source built from those parameters, so the oracle can write it and the verifier can
compute expected outputs from it.
"""

from __future__ import annotations

import itertools
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Params = dict[str, Any]
Args = list[Any]


@dataclass(frozen=True)
class Family:
    """One kind of function to implement.

    Attributes:
        name: Family name (recorded as the task's family).
        kind: ``expression``, ``string``, ``list``, ``dict``, ``number`` or ``algorithm``.
        names: Function names a task may ask for.
        signature: Parameter list and return annotation, e.g. ``"(items: list[int]) -> int"``.
        grid: Every parameter combination the family offers.
        spec: What the function must do, from the parameters.
        body: The reference function's body (indented), from the parameters.
        inputs: Draws one argument list.
        edge_inputs: Draws inputs the hidden tests add because ``inputs`` rarely produces
            them (balanced brackets, say), so a constant or trivial answer cannot pass.
    """

    name: str
    kind: str
    names: tuple[str, ...]
    signature: str
    grid: tuple[Params, ...]
    spec: Callable[[Params], str]
    body: Callable[[Params], str]
    inputs: Callable[[random.Random], Args]
    edge_inputs: Callable[[random.Random], Args] | None = None

    def reference(self, fn: str, params: Params) -> str:
        """Return the reference implementation's source."""
        return f"def {fn}{self.signature}:\n{self.body(params)}\n"


def _grid(**axes: Any) -> tuple[Params, ...]:
    keys = list(axes)
    return tuple(dict(zip(keys, combo, strict=True)) for combo in itertools.product(*axes.values()))


def _ints(rng: random.Random, low: int = -20, high: int = 40, size: int = 9) -> list[int]:
    return [rng.randint(low, high) for _ in range(rng.randint(0, size))]


def _text(rng: random.Random) -> str:
    words = ["".join(rng.choices("abcdefghijklmnoprstu", k=rng.randint(1, 9))) for _ in range(8)]
    return " ".join(rng.sample(words, rng.randint(0, 8)))


def _longer_than_any_k(rng: random.Random) -> Args:
    """A list longer than ``top_k``'s largest k (12), so that sorting it all is never right."""
    return [[rng.randint(-20, 40) for _ in range(rng.randint(13, 16))]]


def _brackets(rng: random.Random) -> Args:
    return ["".join(rng.choices("()[]{}<>ab", k=rng.randint(0, 10)))]


def _nested_brackets(rng: random.Random) -> Args:
    """A properly nested bracket string with stray letters, half the time with two swapped."""
    text = ""
    for _ in range(rng.randint(1, 5)):
        opening, closing = rng.choice(("()", "[]", "{}", "<>"))
        text = opening + text + closing if rng.random() < 0.5 else text + opening + closing
    chars = list(text)
    for _ in range(rng.randint(0, 2)):
        chars.insert(rng.randint(0, len(chars)), rng.choice("ab"))
    if rng.random() < 0.5:
        i, j = rng.randrange(len(chars)), rng.randrange(len(chars))
        chars[i], chars[j] = chars[j], chars[i]
    return ["".join(chars)]


def _runs(rng: random.Random) -> Args:
    return ["".join(rng.choice("aabbcd") * rng.randint(1, 4) for _ in range(rng.randint(0, 5)))]


def _mapping(rng: random.Random) -> Args:
    keys = rng.sample(string.ascii_lowercase, rng.randint(0, 7))
    return [{key: rng.randint(-10, 30) for key in keys}]


def _steps(rng: random.Random) -> Args:
    start = rng.randint(0, 5)
    values = [start]
    for _ in range(rng.randint(0, 9)):
        values.append(values[-1] + rng.choice((1, 1, 2, 3, 0, -1, -2, -3, 4, 5)))
    return [values]


_TOKENS = ("<", ">", "[", "]", "(", ")", "*", "**", "_", "!", "?", "#", "-", "--", ":", "'", "~")
_LETTERS = "abcdefghijklmnoprstu"


# Parameter ranges stop short of what the inputs span (values -20..40, words of 1..9 letters),
# so that no setting is solved by a trivial function (the identity, a constant).


def _affine(a: int, b: int, x: str) -> str:
    """``x * a + b`` as Python source, without a useless ``* 1`` or ``+ 0``."""
    text = x if a == 1 else f"{x} * {a}"
    return text if b == 0 else f"{text} {'-' if b < 0 else '+'} {abs(b)}"


FAMILIES: tuple[Family, ...] = (
    Family(
        "affine", "expression", ("scale", "transform", "compute"),
        "(x: int) -> int",
        tuple(p for p in _grid(a=range(1, 26), b=range(-50, 51)) if (p["a"], p["b"]) != (1, 0)),
        lambda p: f"returns `{_affine(p['a'], p['b'], 'x')}`",
        lambda p: f"    return {_affine(p['a'], p['b'], 'x')}",
        lambda rng: [rng.randint(-50, 50)],
    ),
    Family(
        "wrap", "expression", ("wrap", "decorate", "surround"),
        "(text: str) -> str",
        _grid(before=_TOKENS, after=_TOKENS),
        lambda p: f"returns `{p['before']!r} + text + {p['after']!r}`",
        lambda p: f"    return {p['before']!r} + text + {p['after']!r}",
        lambda rng: [_text(rng)],
    ),
    Family(
        "scale_all", "expression", ("scale_all", "map_values", "adjust"),
        "(items: list[int]) -> list[int]",
        tuple(p for p in _grid(a=range(1, 26), b=range(-50, 51)) if (p["a"], p["b"]) != (1, 0)),
        lambda p: f"returns `[{_affine(p['a'], p['b'], 'v')} for v in items]`",
        lambda p: f"    return [{_affine(p['a'], p['b'], 'v')} for v in items]",
        lambda rng: [_ints(rng)],
    ),
    Family(
        "replace_letter", "string", ("replace_letter", "swap_letter", "substitute"),
        "(text: str) -> str",
        tuple(p for p in _grid(old=_LETTERS, new=_LETTERS) if p["old"] != p["new"]),
        lambda p: f"returns `text` with every letter {p['old']!r} replaced by {p['new']!r}",
        lambda p: f"    return text.replace({p['old']!r}, {p['new']!r})",
        lambda rng: [_text(rng)],
    ),
    Family(
        "between", "list", ("between", "keep_range", "in_bounds"),
        "(items: list[int]) -> list[int]",
        tuple(p for p in _grid(lo=range(-15, 21), hi=range(-14, 36)) if p["lo"] < p["hi"]),
        lambda p: f"returns the elements of `items` that are at least {p['lo']} and at most "
        f"{p['hi']}, in their order",
        lambda p: f"    return [v for v in items if {p['lo']} <= v <= {p['hi']}]",
        lambda rng: [_ints(rng)],
    ),
    Family(
        "rotate", "list", ("rotate", "rotate_items", "shift_list"),
        "(items: list[int]) -> list[int]",
        _grid(k=range(1, 31), side=("left", "right")),
        lambda p: f"returns a new list: `items` rotated {p['side']} by {p['k']} positions "
        "(wrapping around; an empty list stays empty)",
        lambda p: "    if not items:\n        return []\n"
        f"    k = {p['k'] if p['side'] == 'left' else -p['k']} % len(items)\n"
        "    return items[k:] + items[:k]",
        lambda rng: [_ints(rng)],
    ),
    Family(
        "long_words", "string", ("count_long_words", "long_word_count", "words_longer"),
        "(text: str) -> int",
        _grid(n=range(1, 9), most=(False, True)),
        lambda p: "returns how many whitespace-separated words of `text` have "
        f"{'at most' if p['most'] else 'more than'} {p['n']} characters",
        lambda p: f"    return sum(len(word) {'<=' if p['most'] else '>'} {p['n']} "
        "for word in text.split())",
        lambda rng: [_text(rng)],
    ),
    Family(
        "caesar", "string", ("caesar", "shift_letters", "encode"),
        "(text: str) -> str",
        _grid(k=range(1, 26), back=(False, True)),
        lambda p: "shifts every lowercase letter a-z of `text` "
        f"{'back' if p['back'] else 'forward'} by {p['k']} places in the alphabet, wrapping "
        "around between z and a; every other character stays as it is",
        lambda p: "    return ''.join(chr((ord(c) - 97 + "
        f"{-p['k'] if p['back'] else p['k']}) % 26 + 97) if 'a' <= c <= 'z' else c for c in text)",
        lambda rng: [_text(rng) + rng.choice(("", "!", " 42", "A-Z"))],
    ),
    Family(
        "chunk", "list", ("chunk", "split_into_chunks", "batches"),
        "(items: list[int]) -> list[list[int]]",
        _grid(size=range(2, 13)),
        lambda p: f"splits `items` into consecutive chunks of {p['size']} (the last one may be "
        "shorter) and returns the list of chunks",
        lambda p: f"    size = {p['size']}\n"
        "    return [items[i:i + size] for i in range(0, len(items), size)]",
        lambda rng: [_ints(rng, size=26)],
    ),
    Family(
        "every_nth", "list", ("every_nth", "pick_every", "stride"),
        "(items: list[int]) -> list[int]",
        tuple(p for p in _grid(n=range(2, 13), offset=range(0, 12)) if p["offset"] < p["n"]),
        lambda p: f"returns every {p['n']}th element of `items`, starting at index {p['offset']}",
        lambda p: f"    return items[{p['offset']}::{p['n']}]",
        lambda rng: [_ints(rng, size=14)],
    ),
    Family(
        "top_k", "list", ("top_k", "largest", "best_scores"),
        "(items: list[int]) -> list[int]",
        _grid(k=range(1, 13), small=(False, True)),
        lambda p: f"returns the {p['k']} {'smallest' if p['small'] else 'largest'} values of "
        f"`items` in {'ascending' if p['small'] else 'descending'} order (all of them, sorted, if "
        f"there are fewer than {p['k']}; duplicates count separately)",
        lambda p: f"    return sorted(items, reverse={not p['small']})[:{p['k']}]",
        lambda rng: [_ints(rng)],
        _longer_than_any_k,
    ),
    Family(
        "word_lengths", "dict", ("word_lengths", "length_table", "measure_words"),
        "(text: str) -> dict[str, int]",
        _grid(m=range(1, 10)),
        lambda p: "returns a dict mapping each distinct whitespace-separated word of `text` "
        f"with at least {p['m']} characters to its length",
        lambda p: f"    return {{w: len(w) for w in text.split() if len(w) >= {p['m']}}}",
        lambda rng: [_text(rng)],
    ),
    Family(
        "filter_dict", "dict", ("above", "filter_scores", "keep_large"),
        "(scores: dict[str, int]) -> dict[str, int]",
        _grid(t=range(-5, 26), less=(False, True)),
        lambda p: "returns a new dict with only the entries of `scores` whose value is "
        f"{'less' if p['less'] else 'greater'} than {p['t']}",
        lambda p: f"    return {{k: v for k, v in scores.items() if v {'<' if p['less'] else '>'} "
        f"{p['t']}}}",
        _mapping,
    ),
    Family(
        "digit_sum", "number", ("digit_sum", "sum_digits", "base_digit_sum"),
        "(n: int) -> int",
        _grid(base=range(2, 37)),
        lambda p: f"returns the sum of the digits of the non-negative integer `n` written in "
        f"base {p['base']}",
        lambda p: f"    total = 0\n    while n:\n        n, d = divmod(n, {p['base']})\n"
        "        total += d\n    return total",
        lambda rng: [rng.choice((0, rng.randint(1, 50), rng.randint(50, 100_000)))],
    ),
    Family(
        "clamp", "number", ("clamp_all", "bound", "limit_values"),
        "(values: list[int]) -> list[int]",
        tuple(p for p in _grid(lo=range(-15, 11), hi=range(0, 36)) if p["lo"] < p["hi"]),
        lambda p: f"returns `values` with every value below {p['lo']} replaced by {p['lo']} and "
        f"every value above {p['hi']} replaced by {p['hi']}",
        lambda p: f"    return [min(max(v, {p['lo']}), {p['hi']}) for v in values]",
        lambda rng: [_ints(rng)],
    ),
    Family(
        "run_length", "algorithm", ("compress", "run_length", "squeeze"),
        "(text: str) -> str",
        _grid(r=range(2, 5)),
        lambda p: f"run-length encodes `text`: every run of {p['r']} or more equal characters "
        "becomes the run's length followed by the character (e.g. 'aaaa' -> '4a'); shorter runs "
        "are copied unchanged",
        lambda p: "    out, i = [], 0\n    while i < len(text):\n        j = i\n"
        "        while j < len(text) and text[j] == text[i]:\n            j += 1\n"
        f"        out.append(f'{{j - i}}{{text[i]}}' if j - i >= {p['r']} else text[i:j])\n"
        "        i = j\n    return ''.join(out)",
        _runs,
    ),
    Family(
        "balanced", "algorithm", ("is_balanced", "brackets_ok", "check_nesting"),
        "(text: str) -> bool",
        _grid(pairs=("()[]", "(){}", "()<>", "()[]{}", "[]{}<>", "()[]{}<>")),
        lambda p: "returns True if the brackets "
        + " ".join(p["pairs"][i : i + 2] for i in range(0, len(p["pairs"]), 2))
        + " in `text` are balanced and properly nested; every other character is ignored",
        lambda p: f"    opening, closing = {p['pairs'][0::2]!r}, {p['pairs'][1::2]!r}\n"
        "    pairs = dict(zip(closing, opening))\n"
        "    stack = []\n    for c in text:\n        if c in pairs.values():\n"
        "            stack.append(c)\n        elif c in pairs:\n"
        "            if not stack or stack.pop() != pairs[c]:\n                return False\n"
        "    return not stack",
        _brackets,
        _nested_brackets,
    ),
    Family(
        "longest_run", "algorithm", ("longest_run", "longest_streak", "run_length_max"),
        "(values: list[int]) -> int",
        _grid(d=range(-3, 6)),
        lambda p: "returns the length of the longest stretch of consecutive elements of `values` "
        f"where each element equals the previous one plus {p['d']} (0 for an empty list)",
        lambda p: "    best = current = 0\n    for i, v in enumerate(values):\n"
        f"        current = current + 1 if i and v == values[i - 1] + {p['d']} else 1\n"
        "        best = max(best, current)\n    return best",
        _steps,
    ),
)  # fmt: skip
BY_NAME = {family.name: family for family in FAMILIES}
