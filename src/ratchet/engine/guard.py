"""Honouring an env's threading contract (see :class:`ratchet.core.env.Env`).

The rollout scheduler runs each episode on its own thread. An env that says it is not thread
safe (``thread_safe = False``) is wrapped by :func:`guarded`: every call into it and into its
sessions then runs under one lock, so no two threads are ever inside it at once, while the
episodes still interleave and a local model still batches their turns.
"""

from __future__ import annotations

import threading
from typing import Any

from ratchet.core.env import OPTIONAL_MEMBERS, Env, Session, thread_safe_of
from ratchet.core.task import Split, Task
from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import Observation
from ratchet.core.verdict import Verdict

_CALLS_INTO_ENV = ("describe", "task_from_params")
"""The optional members that may use the env's own state (build a world), so run locked."""


def guarded(env: Env) -> Env:
    """Return ``env`` itself if it is thread safe, else a wrapper that serialises its calls."""
    return env if thread_safe_of(env) else _SerialEnv(env)


class _SerialSession:
    def __init__(self, session: Session, lock: threading.RLock) -> None:
        self._session = session
        self._lock = lock

    def reset(self) -> Observation:
        with self._lock:
            return self._session.reset()

    def step(self, call: ToolCall) -> Observation:
        with self._lock:
            return self._session.step(call)

    def verify(self) -> Verdict:
        with self._lock:
            return self._session.verify()

    def close(self) -> None:
        with self._lock:
            self._session.close()


class _SerialEnv:
    """An env whose calls, and its sessions' calls, all run under one lock.

    It has every optional member the wrapped env gives (see
    :class:`~ratchet.core.env_defaults.EnvDefaults`), so the wrapper reads as the env does.
    """

    thread_safe = True  # it is now, which is the point

    def __init__(self, env: Env) -> None:
        self._env = env
        self._lock = threading.RLock()
        self.name, self.description = env.name, env.description
        self.version, self.max_difficulty = env.version, env.max_difficulty
        for member in OPTIONAL_MEMBERS:
            value = getattr(env, member, None)
            if member == "thread_safe" or value is None:
                continue
            setattr(self, member, self._locked(value) if member in _CALLS_INTO_ENV else value)

    def _locked(self, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return fn(*args, **kwargs)

        return call

    def tasks(
        self, split: Split, n: int, seed: int = 0, difficulty: int | None = None
    ) -> list[Task]:
        with self._lock:
            return self._env.tasks(split, n, seed, difficulty)

    def session(self, task: Task) -> Session:
        with self._lock:
            return _SerialSession(self._env.session(task), self._lock)

    def oracle(self, task: Task) -> list[ToolCall]:
        with self._lock:
            return self._env.oracle(task)
