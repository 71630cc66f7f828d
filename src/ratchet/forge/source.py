"""Sources: what a user already has, described for ``ratchet forge``.

A :class:`Source` is typed tool functions over a world whose state can be read, plus a way to
make that world in a seeded state: a seed-data generator (``worlds`` different states) or a
snapshot (one). Three constructors cover the usual cases: :func:`sqlite_source` (tools over a
SQLite connection), :func:`object_source` (tools over a Python object) and :func:`mcp_source`
(an MCP server with a state-reading tool). Nothing here reads a world into a tool's schema:
the agent sees the tools' own types, and :func:`ratchet.forge.walks.survey` refuses a source
whose schemas differ from world to world (they would be listing a world's hidden contents).
"""

from __future__ import annotations

import copy
import functools
import json
import random
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from ratchet.core.tool import Tool
from ratchet.forge.state import sqlite_state
from ratchet.integrations.mcp import Connections, MCPClient, Server, StdioServer, mcp_tools

W = TypeVar("W")

Values = Sequence[Any] | Callable[[Any], Sequence[Any]]
"""Argument values a walk may draw: a list, or a function of the world giving one."""


@dataclass(frozen=True)
class Source(Generic[W]):
    """Typed tools over a world with readable state: what ``ratchet forge`` makes an env from.

    Attributes:
        name: The forged env's name (e.g. ``"forge/library"``).
        description: One line for ``ratchet envs``.
        open: ``open(index) -> world``: a fresh world in seeded state ``index`` (``0`` to
            ``worlds - 1``); the same index always gives the same state.
        tools: ``tools(world)``: the tools, as typed functions bound to the world or
            :class:`~ratchet.core.tool.Tool` objects. Their schemas are what the agent sees:
            type closed sets with the vocabulary of values (``Literal["fiction", ...]``), never
            with what one world happens to hold.
        state: ``state(world)``: the world's state as nested mappings and lists of scalars;
            the verifier compares it with the walk's replay.
        worlds: How many seeded states there are (1 for a snapshot).
        close: Releases a world.
        values: Values random walks draw arguments from, by parameter name (``"book_id"``) or
            tool and parameter (``"lend_book.book_id"``): a list, or a function of the world.
            Parameters without any draw from their schema's ``enum``, booleans, bounded
            numbers, or the values the world's state holds.
        templates: Instruction templates by tool name, formatted with the call's arguments
            and ``{changes}`` (what the call changed): ``"Lend book {book_id} to member
            {member_id}."``. A read tool's template is a question. Tools without one get a
            plain sentence from their description and arguments.
        policy: Rules shown to the agent with every task.
        files: Files besides the source's own module whose content pins the env's version
            (a server script, a snapshot).
        thread_safe: ``False`` if no two threads may use the source's worlds at once.
    """

    name: str
    description: str
    open: Callable[[int], W]
    tools: Callable[[W], Sequence[Callable[..., Any] | Tool]]
    state: Callable[[W], Any]
    worlds: int = 1
    close: Callable[[W], None] | None = None
    values: Mapping[str, Values] = field(default_factory=dict)
    templates: Mapping[str, str] = field(default_factory=dict)
    policy: str = ""
    files: tuple[Path, ...] = ()
    thread_safe: bool = True

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a source needs a name")
        if self.worlds < 1:
            raise ValueError(f"a source needs at least one world; got {self.worlds}")


def sqlite_source(
    *,
    name: str,
    description: str,
    tools: Callable[[sqlite3.Connection], Sequence[Callable[..., Any] | Tool]],
    schema: str = "",
    seed: Callable[[random.Random, sqlite3.Connection], None] | None = None,
    snapshot: str | Path | None = None,
    worlds: int = 16,
    values: Mapping[str, Values | str] | None = None,
    **options: Any,
) -> Source[sqlite3.Connection]:
    """A source whose worlds are SQLite databases.

    Give either ``seed`` (with ``schema``): world ``i`` is the schema filled by
    ``seed(random.Random(i), connection)``; or ``snapshot``: a database file, one world. Each
    world is built once and every session gets its own in-memory copy.

    Args:
        name: The forged env's name.
        description: One line for ``ratchet envs``.
        tools: ``tools(connection)``: typed tool functions over a session's database.
        schema: SQL run on an empty database before ``seed``.
        seed: Fills world ``i``'s database from ``random.Random(i)``.
        snapshot: A SQLite database file to copy instead.
        worlds: How many seeded worlds (ignored with a snapshot: one).
        values: As :attr:`Source.values`; a string is a SQL query whose first column gives
            the values (``"SELECT id FROM books"``).
        **options: Other :class:`Source` fields (``templates``, ``policy``, ``files``).

    Raises:
        ValueError: Unless exactly one of ``seed`` and ``snapshot`` is given.
    """
    if (seed is None) == (snapshot is None):
        raise ValueError("sqlite_source needs either seed= (with schema=) or snapshot=")
    lock = threading.Lock()

    @functools.cache
    def base(index: int) -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        if snapshot is not None:
            with sqlite3.connect(f"file:{snapshot}?mode=ro", uri=True) as disk:
                disk.backup(conn)
        else:
            assert seed is not None
            conn.executescript(schema)
            seed(random.Random(index), conn)
            conn.commit()
        return conn

    def open_world(index: int) -> sqlite3.Connection:
        copy_ = sqlite3.connect(":memory:", check_same_thread=False)
        with lock:
            base(index).backup(copy_)
        return copy_

    files = tuple(options.pop("files", ())) + ((Path(snapshot),) if snapshot else ())
    return Source(
        name=name,
        description=description,
        open=open_world,
        tools=tools,
        state=sqlite_state,
        worlds=1 if snapshot is not None else worlds,
        close=sqlite3.Connection.close,
        values={k: _query(v) if isinstance(v, str) else v for k, v in (values or {}).items()},
        files=files,
        **options,
    )


def _query(sql: str) -> Callable[[sqlite3.Connection], list[Any]]:
    def run(conn: sqlite3.Connection) -> list[Any]:
        return [row[0] for row in conn.execute(sql)]

    return run


def object_source(
    *,
    name: str,
    description: str,
    seed: Callable[[random.Random], W],
    tools: Callable[[W], Sequence[Callable[..., Any] | Tool]],
    state: Callable[[W], Any] | None = None,
    worlds: int = 16,
    **options: Any,
) -> Source[W]:
    """A source whose worlds are Python objects: ``seed(random.Random(i))`` makes world ``i``.

    Each session gets a deep copy of the world's seeded object. ``state`` reads it (default:
    the object itself, which must then be mappings, lists and scalars); a snapshot is a
    ``seed`` that ignores its generator, with ``worlds=1``.

    Args:
        name: The forged env's name.
        description: One line for ``ratchet envs``.
        seed: Makes world ``i``'s object from ``random.Random(i)``.
        tools: ``tools(world)``: typed tool functions over a session's object.
        state: Reads the object's state.
        worlds: How many seeded worlds.
        **options: Other :class:`Source` fields (``values``, ``templates``, ``policy``,
            ``files``).
    """

    @functools.cache
    def base(index: int) -> W:
        return seed(random.Random(index))

    return Source(
        name=name,
        description=description,
        open=lambda index: copy.deepcopy(base(index)),
        tools=tools,
        state=state or (lambda world: world),
        worlds=worlds,
        **options,
    )


def mcp_source(
    server: Server,
    *,
    name: str,
    description: str,
    state_tool: str,
    load_tool: str | None = None,
    seed: Callable[[random.Random], dict[str, Any]] | None = None,
    worlds: int = 16,
    timeout_s: float = 30.0,
    **options: Any,
) -> Source[MCPClient]:
    """A source whose worlds are MCP server connections.

    ``state_tool`` is the server's tool that returns its state as JSON. With ``load_tool`` and
    ``seed``, world ``i`` is the server after ``load_tool(**seed(random.Random(i)))`` and
    connections are reused (each world reloads); without them each world is a fresh server
    (one world, the server's own data). Both tools are hidden from the agent. A script the
    server runs (a ``.py`` file among a :class:`StdioServer`'s arguments) pins the version.

    Args:
        server: The MCP server.
        name: The forged env's name.
        description: One line for ``ratchet envs``.
        state_tool: The tool that reads the state.
        load_tool: The tool that loads seed data.
        seed: Makes ``load_tool``'s arguments for world ``i``.
        worlds: How many seeded worlds (one without ``load_tool``).
        timeout_s: Longest wait for connecting and for each call.
        **options: Other :class:`Source` fields (``values``, ``templates``, ``policy``,
            ``files``).

    Raises:
        ValueError: If only one of ``load_tool`` and ``seed`` is given.
    """
    if (load_tool is None) != (seed is None):
        raise ValueError("mcp_source needs both load_tool= and seed=, or neither")
    connections = Connections(server, timeout_s, reuse=load_tool is not None)
    hidden = {state_tool, *([load_tool] if load_tool else [])}

    @functools.cache
    def seed_data(index: int) -> dict[str, Any]:
        assert seed is not None
        return seed(random.Random(index))

    def open_world(index: int) -> MCPClient:
        client = connections.take()
        if load_tool is not None:
            try:
                client.call(load_tool, seed_data(index))
            except BaseException:
                client.close()
                raise
        return client

    def read(client: MCPClient) -> Any:
        return json.loads(client.call(state_tool))

    scripts: tuple[Path, ...] = ()
    if isinstance(server, StdioServer):
        scripts = tuple(Path(a) for a in server.args if a.endswith(".py") and Path(a).is_file())
    files = tuple(options.pop("files", ())) + scripts
    return Source(
        name=name,
        description=description,
        open=open_world,
        tools=lambda client: mcp_tools(client, hidden),
        state=read,
        worlds=worlds if load_tool is not None else 1,
        close=connections.give_back,
        files=files,
        **options,
    )
