"""Every option's ``--help`` text reads as one plain sentence that names settings by flags."""

import re

import pytest
import typer.main

from ratchet.cli import app

LONGEST = 160
"""Characters a help text may take: about two lines of a terminal's help panel."""

MARKUP = re.compile(r"``|:(func|class|meth|attr|data|mod|exc|obj):")
"""Sphinx and reStructuredText markup, which a terminal shows as noise."""

SENTENCE_END = re.compile(r"[.!?]\s+\S")
"""A sentence that ends before the text does."""

FIELD_NAME = re.compile(r"(?<![\w/.-])[a-z]+(?:_[a-z]+)+\b")
"""A Python name such as ``train_k`` (not a route such as ``/v1/load_lora_adapter``)."""


def _help_texts() -> list[tuple[str, str, str]]:
    """``(command, option, help)`` of every shown option and argument of every command."""
    texts = []
    for name, command in typer.main.get_command(app).commands.items():
        for parameter in command.params:
            if getattr(parameter, "hidden", False) or parameter.name == "help":
                continue
            text = getattr(parameter, "help", None) or ""
            texts.append((name, max(parameter.opts, key=len), text))
    return texts


HELP_TEXTS = _help_texts()


def _problems(text: str) -> list[str]:
    """What keeps ``text`` from being one plain sentence that speaks in flags."""
    problems = []
    if not text.endswith("."):
        problems.append("does not end as a sentence")
    if SENTENCE_END.search(text.replace("e.g. ", "e.g.\0")):
        problems.append("holds more than one sentence")
    if MARKUP.search(text):
        problems.append("shows Sphinx markup")
    if FIELD_NAME.search(text):
        problems.append(f"names a field ({FIELD_NAME.search(text).group()}), not its flag")
    if len(text) > LONGEST:
        problems.append(f"is {len(text)} characters long (at most {LONGEST})")
    return problems


def test_the_checks_catch_what_they_are_for():
    assert _problems("Rounds to run.") == []
    assert _problems("Env name (e.g. calc) or a file (see /v1/load_lora_adapter).") == []
    assert _problems("Rounds to run. Test covers every level.") == ["holds more than one sentence"]
    assert _problems("See :class:`Budget`.") == ["shows Sphinx markup"]
    assert _problems("Samples per task (see train_k).") == ["names a field (train_k), not its flag"]
    assert _problems("x" * LONGEST + ".")[-1].startswith("is 161 characters long")
    assert _problems("No full stop") == ["does not end as a sentence"]


def test_every_command_offers_help_texts_to_check():
    commands = {command for command, _, _ in HELP_TEXTS}
    assert {"improve", "eval", "run", "check", "forge", "serve"} <= commands
    assert len(HELP_TEXTS) > 100


@pytest.mark.parametrize(
    ("command", "option", "text"), HELP_TEXTS, ids=[f"{c} {o}" for c, o, _ in HELP_TEXTS]
)
def test_each_help_text_is_one_plain_sentence(command, option, text):
    assert _problems(text) == [], f"ratchet {command} {option}: {text!r}"


def test_improve_explains_its_own_default_of_max_turns():
    texts = {(command, option): text for command, option, text in HELP_TEXTS}
    assert texts["improve", "--max-turns"].endswith("(unset: --max-difficulty plus 2).")
    assert texts["eval", "--max-turns"].endswith("(unset: the agent's own).")
