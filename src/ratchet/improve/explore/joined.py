"""Joined copies: a string that lists several copied values, as a regex over the spans.

The ``list`` strategy (:mod:`.strategies`) lets a free string argument be one span of the
conversation or a few short ones joined, for the answers and files that list several values
("the values, in that order, separated by commas"; one name per line). A JSON schema's
``enum`` cannot say that without listing every combination, so the string gets a ``pattern``.
"""

from __future__ import annotations

from collections.abc import Sequence

_SEPARATORS = (", ", "\n")
_JOINED_CHARS = 40
"""Longest span a joined string joins (a value: an id, a name, a path; not a sentence)."""
_REGEX_SYNTAX = frozenset("\\.+*?()|[]{}^$#&-~")


def joined_pattern(spans: Sequence[str], joins: int) -> tuple[str, int]:
    """A regex of one of ``spans``, or 2 to ``joins`` short ones joined; and its longest match.

    Joined spans are those of at most :data:`_JOINED_CHARS` characters, by ``", "`` or a new
    line. Written for both JSON-schema regex dialects it meets (Python's ``re`` in validation,
    the Rust ``regex`` syntax of the constrained decoder): only the characters either treats as
    syntax are escaped, and control characters by their escapes (a new line as backslash-n).
    """
    short = [span for span in spans if len(span) <= _JOINED_CHARS]
    one = "|".join(_escaped(span) for span in spans)
    part = "|".join(_escaped(span) for span in short)
    separators = "|".join(_escaped(separator) for separator in _SEPARATORS)
    joined = f"(?:{part})(?:(?:{separators})(?:{part})){{1,{joins - 1}}}"
    widest = sorted(map(len, short), reverse=True)[:joins]
    longest_join = sum(widest) + max(map(len, _SEPARATORS)) * (len(widest) - 1)
    longest = max(max(map(len, spans)), longest_join if len(widest) > 1 else 0)
    if len(short) < 2:
        return f"^(?:{one})$", longest
    return f"^(?:{one}|{joined})$", longest


def _escaped(text: str) -> str:
    controls = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
    return "".join(
        controls.get(char, "\\" + char if char in _REGEX_SYNTAX else char) for char in text
    )
