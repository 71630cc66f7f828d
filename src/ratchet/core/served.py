"""How a recorded (served) conversation is marked when it is stored as a task.

A conversation the server recorded has no problem key in any env's splits, so it is stored as a
train task whose problem key starts with :data:`SERVED_KEY`, of family :data:`SERVED_FAMILY`.
These names live in core so that both the server, which records such tasks, and the improve
loop, which reads them back as experience, can use them without depending on each other.
"""

from __future__ import annotations

from ratchet.core.task import Task

SERVED_FAMILY = "served"
"""The family of every recorded conversation (it has no problem key in an env's splits)."""

SERVED_KEY = "served:"
"""The prefix of a recorded conversation's problem key (an env's keys are JSON objects)."""

SERVED_ENV = "served"
"""The env recorded for conversations when the server knows of none."""


def is_served(task: Task) -> bool:
    """Whether ``task`` is a recorded conversation rather than a task an env can play."""
    return task.problem.startswith(SERVED_KEY)
