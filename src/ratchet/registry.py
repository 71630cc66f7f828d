"""The env registry: names to lazily imported envs, plus the ``ratchet.envs`` entry points.

A third-party package adds envs without touching Ratchet by declaring, in its
``pyproject.toml``::

    [project.entry-points."ratchet.envs"]
    "acme/tickets" = "acme_envs.tickets:env"
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from ratchet.env import Env

ENTRY_POINT_GROUP = "ratchet.envs"

_BUILTIN = {
    "calc": "ratchet.envs.calc:env",
    "code": "ratchet.envs.code:env",
    "files": "ratchet.envs.files:env",
    "grid": "ratchet.envs.grid:env",
    "shop": "ratchet.envs.shop:env",
}
_registered: dict[str, str] = dict(_BUILTIN)
_loaded: dict[str, Env] = {}


class UnknownEnvError(LookupError):
    """No env is registered under the requested name."""


class EnvLoadError(RuntimeError):
    """A registered env failed to import or is not a valid env."""


def register_env(name: str, target: str) -> None:
    """Register an env under ``name``; ``target`` is ``"module:attr"``, imported on first use.

    ``attr`` may be an env object or a zero-argument callable that returns one.

    Raises:
        ValueError: If ``target`` is not of the form ``module:attr``.
    """
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise ValueError(f"env target must look like 'package.module:attr'; got {target!r}")
    _registered[name] = target
    _loaded.pop(name, None)


def env_names() -> list[str]:
    """Return every known env name: built-in, registered and from entry points, sorted."""
    return sorted({*_registered, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})


def make_env(name: str) -> Env:
    """Return the env registered as ``name``, importing it on first use.

    Raises:
        UnknownEnvError: Listing the known names, if ``name`` is not registered.
        EnvLoadError: If the env's module fails to import or yields no valid env.
    """
    if name in _loaded:
        return _loaded[name]
    target = _registered.get(name)
    if target is None:
        target = next((ep.value for ep in entry_points(group=ENTRY_POINT_GROUP, name=name)), None)
    if target is None:
        raise UnknownEnvError(f"unknown env {name!r}; known envs: {', '.join(env_names())}")
    env = _import(name, target)
    _loaded[name] = env
    return env


def _import(name: str, target: str) -> Env:
    module_name, _, attr = target.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:
        raise EnvLoadError(
            f"env {name!r} ({target}) failed to load: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(obj, Env) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise EnvLoadError(
                f"env {name!r}: factory {target} raised {type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(obj, Env):
        raise EnvLoadError(
            f"env {name!r}: {target} is not an env (needs name, description, version, "
            "max_difficulty, tasks(), session() and oracle())"
        )
    return obj
