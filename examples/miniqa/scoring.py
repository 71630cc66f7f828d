"""MiniQA's official scorer, kept as published: the port imports it rather than rewriting it.

An answer is normalised the way extractive-QA benchmarks do (lower case, punctuation and the
articles a, an and the dropped, spaces collapsed). It is correct when it contains one of the
question's gold aliases; a question with no gold alias has no answer in its context, and only
an empty answer is correct there.
"""

import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces."""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


def correct(answer: str, aliases: list[str]) -> bool:
    """Whether ``answer`` is right: it holds a gold alias, or is empty where none exists."""
    said = normalize(answer)
    if not aliases:
        return said == ""
    return any(normalize(alias) in said for alias in aliases)
