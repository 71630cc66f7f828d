"""Model-written env modules, run in the sandbox.

A module a model wrote is code no one has read. It never runs in Ratchet's process: a
:class:`Worker` starts it in a sandbox (:mod:`ratchet.sandbox`: its own workspace, no network,
no view of the host's files or installed packages, CPU, memory and process limits) behind the
small line protocol of :mod:`ratchet.forge.worker`, and :func:`module_env` makes it an env whose
tools, verifier and oracle are requests to that worker. The module's contract, in plain Python
with the standard library only, is :data:`CONTRACT`.

One worker serves every session of the env, one request at a time. A worker that dies (a
crash, a limit, a request that overruns :data:`REQUEST_TIMEOUT_S`) is started again on the next
request; the sessions it held are gone, so their calls become error observations and their
verdicts fail.
"""

from __future__ import annotations

import atexit
import itertools
import json
import random
import threading
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ratchet.core.env import SimpleEnv
from ratchet.core.pool import TaskPool
from ratchet.core.task import Task, TaskSpec, canonical_key, split_of
from ratchet.core.tool import Tool, ToolCall, ToolError
from ratchet.core.verdict import Verdict
from ratchet.sandbox import Limits, Sandbox, SandboxProcess, SandboxProcessError, python_executable

REQUEST_TIMEOUT_S = 10.0
WORKER_LIMITS = Limits(cpu_s=3600, memory_mb=1024, processes=8, timeout_s=86_400.0)
"""A worker's limits over its whole life: an hour of CPU, a day of wall clock."""
SAMPLE_BATCH = 200
MAX_LEVELS = 10
_WORKER_SOURCE = Path(__file__).with_name("worker.py")

CONTRACT = """\
An env module is one Python file that imports only the standard library (json, random,
sqlite3, re, ...: no other package is installed where it runs). It defines:

NAME = "forge/<short-name>"        # the env's name
DESCRIPTION = "<one line>"         # what the agent practises
MAX_DIFFICULTY = <int, 1-10>       # difficulty levels; level d needs about d tool calls
TOOLS = [                          # the agent's tools, as JSON schemas
    {"name": "<tool>", "description": "<what it does>",
     "parameters": {"type": "object", "properties": {...}, "required": [...]}},
]

def sample(rng, difficulty):       # rng: random.Random; a pure function of its inputs
    return {"instruction": "<what the agent is asked>", "params": {<hidden JSON facts>}}
def build(params):                 # a fresh world for one episode (any Python object)
    ...
def call(world, name, arguments):  # run tool `name`; return text; raise ValueError with a
    ...                            # message the agent can read when the call is bad
def verify(params, world, answer): # judge the world's final STATE (answer: the text the agent
    return passed, feedback        # gave to finish, or None); never trust the agent's claims
def oracle(params):                # calls that solve the task, ending with finish:
    return [{"name": "<tool>", "arguments": {...}},
            {"name": "finish", "arguments": {"answer": "<answer, or 'done'>"}}]

Every session also offers finish(answer), which ends the episode; do not list it in TOOLS.
A task whose verifier passes when the agent does nothing, or only claims success, is broken;
so is one the oracle does not solve, and one whose params repeat across difficulties.
Different params are different problems: vary them enough that thousands of tasks exist.
"""


class ModuleError(RuntimeError):
    """The module failed a request (its message is the module's error or traceback)."""


class Worker:
    """A sandboxed worker serving one module's requests, started again if it dies.

    Args:
        code: The module's source.
        limits: The worker's limits over its whole life.
    """

    def __init__(self, code: str, limits: Limits = WORKER_LIMITS) -> None:
        self.code = code
        self.limits = limits
        self._lock = threading.Lock()
        self._sandbox: Sandbox | None = None
        self._process: SandboxProcess | None = None
        atexit.register(self.close)

    def ask(self, op: str, **fields: Any) -> Any:
        """Send one request and return its ``ok`` value.

        Raises:
            ModuleError: If the module failed it, or the worker died or broke the protocol.
        """
        with self._lock:
            try:
                line = self._running().exchange(json.dumps({"op": op, **fields}), REQUEST_TIMEOUT_S)
            except SandboxProcessError as exc:
                self._stop()
                raise ModuleError(str(exc)) from None
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            reply = {"error": f"the worker's reply is not JSON: {line[:200]!r}"}
        if not isinstance(reply, dict) or "error" in reply or "ok" not in reply:
            error = reply.get("error") if isinstance(reply, dict) else reply
            raise ModuleError(str(error))
        return reply["ok"]

    def close(self) -> None:
        """Stop the worker and remove its workspace (idempotent)."""
        with self._lock:
            self._stop()

    def _running(self) -> SandboxProcess:
        if self._process is not None and self._process.alive:
            return self._process
        self._stop()
        sandbox = Sandbox(limits=self.limits)
        try:
            (sandbox.root / "module.py").write_text(self.code)
            (sandbox.root / "worker.py").write_text(_WORKER_SOURCE.read_text())
            self._process = sandbox.start([python_executable(), "-I", "-S", "-B", "worker.py"])
        except BaseException:
            sandbox.close()
            raise
        self._sandbox = sandbox
        return self._process

    def _stop(self) -> None:
        if self._process is not None:
            self._process.close()
            self._process = None
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


@dataclass(frozen=True)
class Info:
    """What a module declares about itself.

    Attributes:
        name: The env's name.
        description: One line.
        max_difficulty: Its highest level.
        tools: Its tools (their functions unset: sessions bind them).
    """

    name: str
    description: str
    max_difficulty: int
    tools: tuple[Tool, ...]


def read_info(worker: Worker, default_name: str) -> Info:
    """The module's declarations, checked.

    Raises:
        ModuleError: If the module fails to load or declares something malformed.
    """
    info = worker.ask("info")
    top = info.get("max_difficulty")
    if not isinstance(top, int) or not 1 <= top <= MAX_LEVELS:
        raise ModuleError(f"MAX_DIFFICULTY must be an integer from 1 to {MAX_LEVELS}; got {top!r}")
    declared = info.get("tools")
    if not isinstance(declared, list) or not declared:
        raise ModuleError("TOOLS must be a non-empty list of tool schemas")
    tools = []
    for spec in declared:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise ModuleError(f"each entry of TOOLS needs a 'name'; got {spec!r}")
        if spec["name"] == "finish":
            raise ModuleError("TOOLS must not list finish: every session offers it")
        parameters = spec.get("parameters") or {"type": "object"}
        try:
            tools.append(
                Tool.from_schema(
                    spec["name"],
                    str(spec.get("description") or spec["name"]),
                    {"additionalProperties": False, **parameters},
                    _unbound,
                )
            )
        except ValueError as exc:
            raise ModuleError(str(exc)) from None
    name = info.get("name") if isinstance(info.get("name"), str) else default_name
    description = str(info.get("description") or f"An env forged from a spec ({name}).")
    return Info(str(name), description, top, tuple(tools))


def _unbound(**arguments: Any) -> str:
    raise ToolError("this tool is not bound to a session")


def draw_pool(
    worker: Worker, levels: int, per_level: int, seed: int
) -> tuple[TaskPool, Counter[str]]:
    """Draw the module's tasks once: up to ``per_level`` distinct problems per level.

    Returns the pool (split by problem key) and counts of what was drawn and dropped.

    Raises:
        ModuleError: If some level gives no valid task (with the first error seen).
    """
    counts: Counter[str] = Counter()
    seen: set[str] = set()
    splits: dict[str, list[TaskSpec]] = {"train": [], "probe": [], "test": []}
    rng = random.Random(seed)
    for level in range(1, levels + 1):
        kept, first_error = 0, ""
        for _ in range(20 * per_level // SAMPLE_BATCH + 1):
            seeds = [rng.randrange(2**31) for _ in range(SAMPLE_BATCH)]
            for drawn in worker.ask("sample", seeds=seeds, difficulty=level):
                spec, why = _spec(drawn, level)
                if spec is None:
                    counts[why] += 1
                    first_error = (
                        first_error
                        or (drawn.get("error") if isinstance(drawn, dict) else "")
                        or why
                    )
                    continue
                key = canonical_key(spec.params)
                if key in seen:
                    counts["duplicate problem"] += 1
                    continue
                seen.add(key)
                splits[split_of(key)].append(spec)
                kept += 1
                if kept == per_level:
                    break
            if kept == per_level:
                break
        counts[f"level {level}"] = kept
        if not kept:
            raise ModuleError(f"sample(rng, {level}) gave no valid task: {first_error}")
    return TaskPool.from_splits(splits), counts


def _spec(drawn: Any, level: int) -> tuple[TaskSpec | None, str]:
    if not isinstance(drawn, dict) or "error" in drawn:
        return None, "sample raised"
    instruction, params = drawn.get("instruction"), drawn.get("params")
    if not isinstance(instruction, str) or not instruction.strip() or not isinstance(params, dict):
        return None, "sample gave no instruction and params"
    family = drawn.get("family")
    return TaskSpec(
        instruction, params, family if isinstance(family, str) else "default", level
    ), ""


def module_env(
    code: str, pool: TaskPool, version: str, name: str, worker: Worker | None = None
) -> SimpleEnv[str]:
    """The env of a model-written module, its code run by a sandboxed :class:`Worker`.

    Args:
        code: The module's source.
        pool: Its tasks, drawn once (:func:`draw_pool`).
        version: The env's version.
        name: The env's name.
        worker: A worker already running ``code`` (default: a new one).

    Raises:
        ModuleError: If the module does not load or declares something malformed.
    """
    runner = worker or Worker(code)
    info = read_info(runner, name)
    sessions = itertools.count()
    lock = threading.Lock()

    def build(task: Task) -> str:
        with lock:
            session = f"s{next(sessions)}"
        runner.ask("open", session=session, params=task.params)
        return session

    def tools(session: str) -> list[Tool]:
        return [replace(tool, fn=_caller(runner, session, tool.name)) for tool in info.tools]

    def verify(task: Task, session: str, answer: str | None) -> Verdict:
        try:
            return _verdict(runner.ask("verify", session=session, answer=answer))
        except ModuleError as exc:
            return Verdict.of(False, f"the verifier failed: {exc}")

    def oracle(task: Task) -> list[ToolCall]:
        calls = runner.ask("oracle", params=task.params)
        if not isinstance(calls, list):
            raise ModuleError(f"oracle(params) must return a list of calls; got {calls!r}")
        return [_call(entry) for entry in calls]

    def close(session: str) -> None:
        try:
            runner.ask("close", session=session)
        except ModuleError:
            return  # the worker died and took the session with it

    return SimpleEnv(
        name=name,
        description=info.description,
        sample=pool,
        build=build,
        tools=tools,
        verify=verify,
        oracle=oracle,
        version=version,
        teardown=close,
        max_difficulty=min(info.max_difficulty, pool.max_difficulty),
    )


def _caller(worker: Worker, session: str, name: str) -> Any:
    def call(**arguments: Any) -> str:
        try:
            return str(worker.ask("call", session=session, name=name, arguments=arguments))
        except ModuleError as exc:
            raise ToolError(str(exc)) from None

    return call


def _call(entry: Any) -> ToolCall:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ModuleError(
            f"each oracle call must be {{'name': ..., 'arguments': ...}}; got {entry!r}"
        )
    arguments = entry.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise ModuleError(f"oracle call {entry['name']!r}: arguments must be an object")
    return ToolCall(entry["name"], arguments)


def _verdict(result: Any) -> Verdict:
    """A verdict from what ``verify`` returned: a bool, ``(passed, feedback)`` or a mapping."""
    if isinstance(result, bool):
        return Verdict.of(result, "passed" if result else "failed")
    if isinstance(result, list) and len(result) == 2 and isinstance(result[0], bool):
        return Verdict.of(result[0], str(result[1]))
    if isinstance(result, dict) and isinstance(result.get("passed"), bool):
        return Verdict.of(result["passed"], str(result.get("feedback", "")))
    return Verdict.of(False, f"verify returned {result!r}, not (passed, feedback)")
