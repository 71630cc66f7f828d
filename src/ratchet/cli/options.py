"""Command-line options derived from the library's config dataclasses, and shared helpers.

A setting is declared once, as a field of a frozen config dataclass with its default and its
``Attributes:`` docstring line; :func:`config_options` turns the fields (nested configs
flattened) into typer options with that default and help text, and :func:`build_config` turns
the parsed values back into the dataclass. So the CLI never restates a default.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import re
import sqlite3
import types
import typing
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import docstring_parser
import typer
from rich.console import Console
from typer.models import OptionInfo

from ratchet.core.env import Env
from ratchet.core.task import SPLITS, Split
from ratchet.engine.cluster import RayConfig, RayPool
from ratchet.engine.models import Model, ModelError, make_model
from ratchet.engine.store import StoreError
from ratchet.envs.registry import EnvLoadError, UnknownEnvError, load_env_reference

console = Console()
errors = Console(stderr=True)

C = TypeVar("C")
F = TypeVar("F", bound=Callable[..., Any])

_SCALARS = (int, float, str, bool)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` as an error and exit with ``code`` (no traceback)."""
    errors.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def load_env(reference: str) -> Env:
    """Return the env named ``reference`` (a name, ``module:attr`` or ``file.py:attr``).

    Exits with a message listing the known envs when there is none.
    """
    try:
        return load_env_reference(reference)
    except (UnknownEnvError, EnvLoadError) as exc:
        fail(str(exc))


def parse_split(value: str) -> Split:
    """Return ``value`` as a split or exit with the allowed values."""
    for split in SPLITS:
        if value == split:
            return split
    fail(f"--split must be one of {', '.join(SPLITS)}; got {value!r}")


def _docs(cls: type[Any]) -> dict[str, str]:
    parsed = docstring_parser.parse(inspect.getdoc(cls) or "")
    # Docstrings mark code with double backticks; a terminal shows them as noise.
    return {
        p.arg_name: " ".join((p.description or "").replace("``", "").split()) for p in parsed.params
    }


def _config_type(kind: Any) -> type[Any] | None:
    """The dataclass inside ``kind`` (``X`` or ``X | None``), if it is a nested config."""
    options = typing.get_args(kind) if isinstance(kind, types.UnionType) else (kind,)
    found = [o for o in options if dataclasses.is_dataclass(o) and isinstance(o, type)]
    return found[0] if found else None


def _default(item: dataclasses.Field[Any]) -> Any:
    if item.default is not dataclasses.MISSING:
        return item.default
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return inspect.Parameter.empty


def _leaves(
    cls: type[Any], instance: Any = None
) -> list[tuple[dataclasses.Field[Any], Any, Any, str]]:
    """``(field, type, default, help)`` of each leaf field; nested configs are flattened."""
    hints, docs = typing.get_type_hints(cls), _docs(cls)
    leaves = []
    for item in dataclasses.fields(cls):
        if not offered(item):
            continue
        value = getattr(instance, item.name) if instance is not None else _default(item)
        nested = _config_type(hints[item.name])
        if nested is None:
            leaves.append((item, hints[item.name], value, docs.get(item.name, "")))
        else:
            leaves.extend(_leaves(nested, value if dataclasses.is_dataclass(value) else nested()))
    return leaves


def offered(item: dataclasses.Field[Any]) -> bool:
    """Whether a config field is a command-line option.

    A field declared with ``metadata={"cli": False}`` is set from Python only (research
    knobs): it is not offered, and a command builds it with its default. Other metadata a
    field may carry: ``flag`` (its flag, when not ``--field-name``), ``metavar``, ``parse``
    (a repeatable option whose texts this function turns into the field's value; it raises
    ``ValueError`` for bad ones) and ``moved`` (a deprecated field, hidden from ``--help``;
    the ``DeprecationWarning`` the config gives when it is used is printed).
    """
    return bool(item.metadata.get("cli", True))


def _option_type(kind: Any) -> Any:
    """The typer type for a field type; tuples of strings become comma-separated text."""
    if kind in _SCALARS or kind == list[str] | None:
        return kind
    args = typing.get_args(kind)
    if typing.get_origin(kind) is tuple and args and args[0] is str:
        return str
    if isinstance(kind, types.UnionType) and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1 and inner[0] in _SCALARS:
            return inner[0] | None
    raise TypeError(f"no command-line option type for {kind!r}")


def config_options(
    cls: type[Any],
    exclude: Collection[str] = (),
    defaults: dict[str, Any] | None = None,
    flags: dict[str, str] | None = None,
    helps: Mapping[str, str] | None = None,
) -> list[inspect.Parameter]:
    """Typer options, one per leaf field of config dataclass ``cls`` (nested ones flattened).

    Args:
        cls: The config dataclass.
        exclude: Field names not to offer (e.g. the ones a command sets itself).
        defaults: Defaults that replace the dataclass's for this command.
        flags: Flags other than ``--field-name`` (e.g. ``{"n": "-n"}``).
        helps: Help texts that replace the docstring's for this command, where the command
            gives the field a meaning of its own (e.g. its own default when unset).
    """
    parameters = []
    leaves = _leaves(cls)
    flag_of = {
        item.name: (flags or {}).get(item.name, item.metadata.get("flag", _flag(item.name)))
        for item, *_ in leaves
    }
    for item, kind, default, help_text in leaves:
        name = item.name
        if name in exclude:
            continue
        default = (defaults or {}).get(name, default)
        if isinstance(default, tuple):
            default = ",".join(default)
        flag = flag_of[name]
        help_text = _in_flags((helps or {}).get(name, help_text), flag_of)
        if kind is bool and default is True and name not in (flags or {}):
            flag = f"{flag}/--no-{flag[2:]}"  # an option that is on says how to turn it off
        option = typer.Option(
            flag,
            help=help_text,
            show_default="parse" not in item.metadata,
            metavar=item.metadata.get("metavar"),
            hidden="moved" in item.metadata,
        )
        if "parse" in item.metadata:
            kind, default = list[str] | None, None  # repeatable texts, parsed by the config
        parameters.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=Annotated[_option_type(kind), option],
                default=default,
            )
        )
    return parameters


def _flag(name: str) -> str:
    """The default flag of config field ``name``: ``train_k`` is ``--train-k``."""
    return "--" + name.replace("_", "-")


def _in_flags(text: str, flag_of: Mapping[str, str]) -> str:
    """``text`` naming settings by their flags: ``train_k`` becomes ``--train-k``.

    Only names with an underscore are replaced; a one-word name (``model``, ``seed``) is also
    an ordinary word.
    """
    names = sorted((name for name in flag_of if "_" in name), key=len, reverse=True)
    if not names:
        return text
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return pattern.sub(lambda match: flag_of[match.group(1)], text)


def build_config(cls: type[C], values: dict[str, Any], **fixed: Any) -> C:
    """Build config dataclass ``cls`` from flat option ``values`` and ``fixed`` fields.

    Exits with a one-line message if the dataclass refuses a value.
    """
    hints = typing.get_type_hints(cls)
    arguments: dict[str, Any] = dict(fixed)
    for item in dataclasses.fields(typing.cast(Any, cls)):
        nested = _config_type(hints[item.name])
        if item.name in fixed or not offered(item):
            continue
        if nested is not None:
            default = _default(item)
            instance = default if dataclasses.is_dataclass(default) else nested()
            arguments[item.name] = _rebuild(instance, values)
        elif item.name in values:
            value = values[item.name]
            if typing.get_origin(hints[item.name]) is tuple and isinstance(value, str):
                value = tuple(part.strip() for part in value.split(",") if part.strip())
            if "parse" in item.metadata:
                try:
                    value = item.metadata["parse"](value or [])
                except ValueError as exc:
                    fail(str(exc))
            arguments[item.name] = value
    problem = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        try:
            config = cls(**arguments)
        except (TypeError, ValueError) as exc:
            problem = str(exc)
    for warning in caught:  # a deprecated setting says its new spelling on the console
        errors.print(f"[yellow]warning:[/] {warning.message}", highlight=False)
    if problem is not None:
        fail(problem)
    return config


def _rebuild(instance: Any, values: dict[str, Any]) -> Any:
    changes = {}
    for item in dataclasses.fields(instance):
        if not offered(item):
            continue
        current = getattr(instance, item.name)
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            changes[item.name] = _rebuild(current, values)
        elif item.name in values:
            changes[item.name] = values[item.name]
    return dataclasses.replace(instance, **changes)


def with_options(
    parameters: list[inspect.Parameter],
    panels: Mapping[str, str] | None = None,
    other_panel: str | None = None,
) -> Callable[[F], F]:
    """Add ``parameters`` (from :func:`config_options`) to a command's signature.

    The command receives them in a keyword argument ``options`` (a dict), so its own code
    stays short whatever the config holds.

    Args:
        parameters: The options to add.
        panels: The ``--help`` panel of each option, by parameter name (the command's own
            options included); ``None``: one list of options.
        other_panel: The panel of options ``panels`` does not name.
    """

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != "options"]
        names = {p.name for p in parameters}
        everything = [*own, *parameters]
        if panels is not None:
            everything = _by_panel(everything, panels, other_panel)

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            options = {k: v for k, v in kwargs.items() if k in names}
            rest = {k: v for k, v in kwargs.items() if k not in names}
            return command(options=options, **rest)

        wrapper.__signature__ = signature.replace(parameters=everything)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {}
        return typing.cast(F, wrapper)

    return decorate


def _by_panel(
    parameters: list[inspect.Parameter], panels: Mapping[str, str], other_panel: str | None
) -> list[inspect.Parameter]:
    """Options placed in their panels and ordered as ``panels`` lists them; arguments first.

    ``--help`` shows the panels in the order of their first option, so panels come in the
    order ``panels`` first names them (``other_panel`` last), each option in its listed place.
    """
    order = list(dict.fromkeys([*panels.values(), other_panel]))
    listed = list(panels)

    def place(parameter: inspect.Parameter) -> tuple[int, int]:
        if parameter.name in panels:
            return order.index(panels[parameter.name]), listed.index(parameter.name)
        return len(order) - 1, len(listed)

    options = [p for p in parameters if _is_option(p)]
    placed = [_in_panel(p, panels.get(p.name, other_panel)) for p in sorted(options, key=place)]
    # Keyword-only, so that reordering them can never put a defaulted parameter before a
    # positional one.
    keyword = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in placed]
    return [p for p in parameters if not _is_option(p)] + keyword


def _is_option(parameter: inspect.Parameter) -> bool:
    """Whether a command parameter is declared as a typer option."""
    if typing.get_origin(parameter.annotation) is not Annotated:
        return False
    return any(isinstance(e, OptionInfo) for e in typing.get_args(parameter.annotation)[1:])


def _in_panel(parameter: inspect.Parameter, panel: str | None) -> inspect.Parameter:
    """Option ``parameter`` shown in ``--help`` panel ``panel``."""
    kind, *extras = typing.get_args(parameter.annotation)
    # Shared option types (Quiet, Threads) are shared objects: place a copy.
    placed = [copy.copy(e) if isinstance(e, OptionInfo) else e for e in extras]
    for extra in placed:
        if isinstance(extra, OptionInfo):
            extra.rich_help_panel = panel
    return parameter.replace(annotation=Annotated[(kind, *placed)])


def friendly(command: F) -> F:
    """Turn store, path and disk errors raised by ``command`` into one-line messages (exit 2)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except StoreError as exc:
            fail(str(exc))
        except sqlite3.Error as exc:
            fail(f"the store failed: {exc}")
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            fail(f"{exc.strerror or exc}{where}")

    return typing.cast(F, wrapper)


def load_model(spec: str, base_url: str | None, adapter: Path | None, threads: int | None) -> Model:
    """Build the backend ``spec`` or exit with a clear message."""
    options: dict[str, object] = {}
    if base_url:
        options["base_url"] = base_url
    if adapter is not None:
        options["adapter"] = str(adapter)
    if threads is not None and spec.startswith("local"):
        options["threads"] = threads
    try:
        return make_model(spec, **options)
    except (ModelError, ValueError, TypeError) as exc:
        fail(str(exc))


# Options several commands share, declared once.
EnvRef = Annotated[
    str,
    typer.Argument(
        metavar="ENV",
        help="Env name (e.g. calc), package.module:attr or path/to/file.py:attr, or several "
        "joined by commas as one suite (calc,grid).",
    ),
]
BaseUrl = Annotated[str | None, typer.Option(help="Server URL for openai models.")]
Threads = Annotated[
    int | None, typer.Option(min=1, help="Torch CPU threads of a local model (default: all cores).")
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]
RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        help="Run episodes in Ray actors: local (a private Ray instance), auto (the cluster "
        "RAY_ADDRESS names, else the last one started here) or a cluster's address.",
    ),
]
RayWorkers = Annotated[int, typer.Option(min=1, help="Ray env worker actors (with --ray).")]
RayEpisodes = Annotated[
    int, typer.Option(min=1, help="Episodes each Ray worker plays at once (with --ray).")
]


@contextlib.contextmanager
def ray_pool(
    address: str | None,
    env_ref: str,
    workers: int,
    episodes: int,
    base_url: str | None,
    threads: int | None,
) -> Iterator[RayPool | None]:
    """Yield a pool of Ray env workers for ``--ray ADDRESS``, or ``None`` without it.

    Exits with a message if Ray is not installed or the cluster cannot be joined.
    """
    if address is None:
        yield None
        return
    options: dict[str, Any] = {"base_url": base_url} if base_url else {}
    if threads is not None:
        options["threads"] = threads
    config = RayConfig(address, workers, episodes)
    try:
        pool = RayPool(env_ref, options, config)
    except ImportError:
        fail("--ray needs the ray extra: pip install ratchet[ray]")
    try:
        entered = pool.__enter__()
    except (ConnectionError, RuntimeError, ValueError) as exc:
        fail(f"cannot start or join the Ray cluster at {address}: {exc}")
    try:
        yield entered
    finally:
        pool.__exit__(None, None, None)
