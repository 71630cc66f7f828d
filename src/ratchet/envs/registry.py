"""The env registry: names to lazily imported envs, plus the ``ratchet.envs`` entry points.

A third-party package adds envs without touching Ratchet by declaring, in its
``pyproject.toml``::

    [project.entry-points."ratchet.envs"]
    "acme/tickets" = "acme_envs.tickets:env"

Wherever an env name goes, a reference also works: ``package.module:attr`` (importable) or
``path/to/file.py:attr`` (a file anywhere), so an env in a script needs no registration. A
file's folder is put on ``sys.path`` before it is imported, as ``python path/to/file.py``
would, so it can import the modules beside it. Several references joined by commas
(``calc,grid``, ``calc,path/to/file.py:attr``) name a :class:`~ratchet.envs.suite.Suite` of
those envs, practised as one.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.metadata import entry_points
from pathlib import Path

from ratchet.core.env import Env
from ratchet.envs.suite import SEPARATOR, Suite

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
        raise UnknownEnvError(
            f"unknown env {name!r}; known envs: {', '.join(env_names())} "
            "(or name one as package.module:attr or path/to/file.py:attr)"
        )
    env = _import(name, target)
    _loaded[name] = env
    return env


def load_env_reference(reference: str) -> Env:
    """Return the env a command line names: a registered name, ``module:attr`` or ``file.py:attr``.

    Several of those joined by commas (``calc,grid``) name a suite of those envs.

    Raises:
        UnknownEnvError: If ``reference`` (or an item of a list) is neither registered nor a
            reference, or a list has an empty item.
        EnvLoadError: If the module or file fails to import or yields no valid env, or a list
            names one env twice.
    """
    if SEPARATOR in reference and reference not in env_names():
        return _load_suite(reference)
    module, sep, attr = reference.rpartition(":")
    if not sep or reference in env_names() or not attr.isidentifier():
        return make_env(reference)
    if module.endswith(".py"):
        if reference not in _loaded:
            _loaded[reference] = _import(reference, reference, _load_file(Path(module)))
        return _loaded[reference]
    if reference not in _loaded:
        _loaded[reference] = _import(reference, reference)
    return _loaded[reference]


def _load_suite(reference: str) -> Env:
    """The suite of the envs ``reference`` lists, separated by commas (see :class:`Suite`)."""
    if reference in _loaded:
        return _loaded[reference]
    items = [item.strip() for item in reference.split(SEPARATOR)]
    if not all(items):
        raise UnknownEnvError(
            f"the env list {reference!r} has an empty item; name an env between every two "
            "commas (e.g. calc,grid)"
        )
    members = []
    for item in items:
        try:
            members.append(load_env_reference(item))
        except UnknownEnvError as exc:
            raise UnknownEnvError(f"in the env list {reference!r}: {exc}") from None
        except EnvLoadError as exc:
            raise EnvLoadError(f"in the env list {reference!r}: {exc}") from None
    try:
        suite = Suite(tuple(members))
    except ValueError as exc:
        raise EnvLoadError(f"the env list {reference!r}: {exc}") from None
    _loaded[reference] = suite
    return suite


def load_object(reference: str) -> object:
    """Return the object ``package.module:attr`` or ``path/to/file.py:attr`` names.

    A file is imported afresh on every call.

    Raises:
        EnvLoadError: If the reference is malformed, or its module fails to import or lacks
            the attribute.
    """
    module, sep, attr = reference.rpartition(":")
    if not sep or not module or not attr.isidentifier():
        raise EnvLoadError(
            f"{reference!r} names no object; use package.module:attr or path/to/file.py:attr"
        )
    try:
        loaded = (
            _load_file(Path(module)) if module.endswith(".py") else importlib.import_module(module)
        )
        return getattr(loaded, attr)
    except EnvLoadError:
        raise
    except Exception as exc:
        raise EnvLoadError(f"{reference} failed to load: {type(exc).__name__}: {exc}") from exc


def _load_file(path: Path) -> object:
    """Import the Python file at ``path`` as a module, its folder first on ``sys.path``."""
    if not path.is_file():
        raise EnvLoadError(f"no env file {path}")
    # Kept there: the env's code may import its siblings later, inside its functions.
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = f"ratchet_user_env_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EnvLoadError(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise EnvLoadError(f"{path} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def _import(name: str, target: str, module_object: object | None = None) -> Env:
    module_name, _, attr = target.rpartition(":")
    try:
        module = (
            module_object if module_object is not None else importlib.import_module(module_name)
        )
        obj = getattr(module, attr)
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
            "max_difficulty, tasks(), session() and oracle(); see docs/envs.md)"
        )
    return obj
