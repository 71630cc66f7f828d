"""Harbor task directories as an env, run in Ratchet's sandbox instead of a container.

A Harbor task is a directory::

    instruction.md        what the agent is told
    task.toml             [metadata] difficulty, [verifier]/[agent] timeout_sec, ...
    environment/          the container's build context (Dockerfile and files)
    tests/test.sh         run after the agent; writes /logs/verifier/reward.txt (or .json)
    solution/solve.sh     the reference solution (Ratchet's oracle)

Ratchet plays such a task without Docker: each episode gets a fresh sandbox workspace
(:mod:`ratchet.sandbox`: no network, confined to the workspace, limits on CPU, memory and time)
seeded with the files of ``environment/`` (its ``Dockerfile`` and compose file are not run, so
tasks that need packages installed need Harbor itself), and the agent gets a ``bash`` tool
that runs commands there. The container paths the task's files use are mapped into the
sandbox: the working directory (``/app`` by default) is the workspace, and ``/tests``,
``/logs`` and ``/solution`` are folders inside it.

Verification happens after the episode, when every process the agent started is dead: the
tests and a fresh, empty ``logs/verifier`` go into a folder with a random name the agent could
not have known (so nothing it planted is in the way), ``test.sh`` runs in the sandbox, and the
reward file is read from that folder on the host without following links (``reward.txt``
first, then ``reward.json``, as Harbor does). The agent never sees the tests or the reward file.
``test.sh`` runs in the sandbox's scrubbed environment with ``HOME`` and ``TMPDIR`` in empty
folders of that random folder and ``PYTHONNOUSERSITE=1``: the workspace is the agent's home
during the episode, and a ``usercustomize.py``, a ``.pth`` file or a ``.gitconfig`` planted
there would otherwise run inside the verifier. Score is the reward clipped to [0, 1]; a task
passes at 1.

``task.toml`` is checked when the task is read: a section that is not a table, or a
``timeout_sec`` that is not a finite positive number, is refused with the file and the key.

A task's problem is what the agent is told and what solves it (:func:`problem_of`), not its
directory's name: two directories with the same instruction and the same ``solution/`` are one
problem even when their ``environment/`` files differ, since an episode that solves one,
replayed, solves the other. One problem is never in two splits; copies listed in two are kept in
the more held-out one and :class:`RepeatedTasks` is warned.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
import tomllib
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet.core.env import FINISH, SimpleEnv
from ratchet.core.pool import TaskPool, dropped_text
from ratchet.core.task import (
    SPLITS,
    ProblemKey,
    Split,
    Task,
    TaskSpec,
    canonical_key,
    split_of,
    wording_key,
)
from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.sandbox import Limits, Sandbox
from ratchet.sandbox.workspace import WorkspacePathError, make_folder, read_bytes, write_bytes

DIFFICULTIES = {"easy": 1, "medium": 2, "hard": 3}
_DOCKER_FILES = {"Dockerfile", "docker-compose.yaml", "docker-compose.yml"}
_REWARD_BYTES = 65_536
_MAX_SEED_BYTES = 16 << 20


class RepeatedTasks(UserWarning):
    """Tasks of one split are the same problem as tasks of a more held-out one and were dropped."""


@dataclass(frozen=True)
class HarborTask:
    """One task directory, read.

    Attributes:
        name: The directory's name (the task's params; its problem is :func:`problem_of`).
        path: The directory.
        instruction: ``instruction.md``.
        config: ``task.toml``, parsed.
    """

    name: str
    path: Path
    instruction: str
    config: dict[str, Any]

    @property
    def difficulty(self) -> int:
        """``[metadata] difficulty`` as 1 (easy), 2 (medium) or 3 (hard); 1 if absent."""
        value = self.config.get("metadata", {}).get("difficulty", "easy")
        return DIFFICULTIES.get(str(value).lower(), 1) if not isinstance(value, int) else value

    def timeout(self, section: str, default: float) -> float:
        """``[section] timeout_sec``, or ``default`` (checked by :func:`read_task`)."""
        return float(self.config.get(section, {}).get("timeout_sec", default))


def read_task(path: Path | str) -> HarborTask:
    """Read a Harbor task directory.

    Raises:
        ValueError: If ``instruction.md`` or ``tests/test.sh`` is missing, or ``task.toml`` does
            not parse or holds a malformed value (see :func:`check_config`).
    """
    path = Path(path)
    for required in ("instruction.md", "tests/test.sh"):
        if not (path / required).is_file():
            raise ValueError(f"{path} is not a Harbor task: it has no {required}")
    toml = path / "task.toml"
    try:
        config = tomllib.loads(toml.read_text()) if toml.exists() else {}
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{toml} does not parse: {exc}") from None
    check_config(config, toml)
    return HarborTask(path.name, path, (path / "instruction.md").read_text().strip(), config)


def check_config(config: dict[str, Any], where: Path | str = "task.toml") -> None:
    """Refuse a ``task.toml`` whose sections or timeouts Ratchet could not use.

    ``[metadata]``, ``[verifier]``, ``[agent]``, ``[solution]`` and ``[environment]`` must be
    tables, and each ``timeout_sec`` a finite positive number (``nan``, ``inf``, ``-5``,
    ``"600"`` and ``true`` are refused), so a bad file fails when it is read rather than in
    every episode's verification.

    Raises:
        ValueError: Naming the file, the section and the value.
    """
    for section in ("metadata", "verifier", "agent", "solution", "environment"):
        table = config.get(section, {})
        if not isinstance(table, dict):
            raise ValueError(f"{where}: [{section}] must be a table; got {table!r}")
        if "timeout_sec" not in table:
            continue
        value = table["timeout_sec"]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value <= 0:
            raise ValueError(
                f"{where}: [{section}] timeout_sec must be a positive, finite number of "
                f"seconds; got {value!r}"
            )


def problem_of(task: HarborTask) -> str:
    """A task's problem key: its instruction (case and spacing aside) and its solution's files.

    ``environment/`` is the task's world, not its problem, and ``tests/`` only judges it: the
    same words solved by the same ``solve.sh`` over other files are one problem. A task without
    solution files is its own problem, keyed by its name.
    """
    folder = task.path / "solution"
    files = sorted(
        path
        for path in (folder.rglob("*") if folder.is_dir() else ())
        if path.is_file() and not path.is_symlink()
    )
    if not files:
        return canonical_key({"task": task.name})
    digests = {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in files
    }
    return canonical_key({"instruction": wording_key(task.instruction), "solution": digests})


@dataclass
class HarborWorld:
    """One episode's sandbox and the task it plays."""

    task: HarborTask
    sandbox: Sandbox


def harbor_env(
    tasks: Path | str | Sequence[Path | str],
    *,
    name: str,
    description: str = "",
    splits: Mapping[str, Sequence[str]] | None = None,
    workdir: str = "/app",
    limits: Limits | None = None,
    version: str = "1",
) -> SimpleEnv[HarborWorld]:
    """Return an env over Harbor task directories.

    Args:
        tasks: A folder of task directories (every subfolder with an ``instruction.md``), or a
            list of task directories.
        name: The env's name.
        description: One line for ``ratchet envs``.
        splits: Task names per split (``train``, ``probe``, ``test``), used as given, except
            that a problem in two splits stays only in the more held-out one (warned as
            :class:`RepeatedTasks`); tasks not named are left out. ``None``: split by
            problem-key hash (80/10/10).
        workdir: The container's working directory, mapped to the sandbox workspace.
        limits: Sandbox limits for each of the agent's commands (the verifier gets the task's
            ``[verifier] timeout_sec``).
        version: Bumped whenever the tasks change meaning.

    Raises:
        ValueError: If a directory is not a Harbor task, two tasks share a name, or ``splits``
            names an unknown split or task.
    """
    found = _find(tasks)
    by_name = {task.name: task for task in found}
    if len(by_name) != len(found):
        raise ValueError("two Harbor tasks share a directory name; names must be unique")
    problems = {task.name: problem_of(task) for task in found}

    def problem_key(params: dict[str, Any]) -> str:
        known = problems.get(str(params.get("task")))
        return known if known is not None and params.keys() == {"task"} else canonical_key(params)

    paths = _Paths(workdir)
    command_limits = limits or Limits(cpu_s=20, memory_mb=1024, timeout_s=30.0)

    def spec(task: HarborTask) -> TaskSpec:
        return TaskSpec(
            paths.instruction(task.instruction), {"task": task.name}, difficulty=task.difficulty
        )

    def build(task: Task) -> HarborWorld:
        harbor = by_name[task.params["task"]]
        world = HarborWorld(harbor, Sandbox(command_limits))
        try:
            _seed(world.sandbox.root, harbor.path / "environment")
        except BaseException:
            world.sandbox.close()
            raise
        return world

    def tools(world: HarborWorld) -> list[Any]:
        def bash(command: str) -> str:
            """Run a shell command in the task's working directory and show its output.

            Args:
                command: A bash command line.
            """
            return world.sandbox.run(["/bin/bash", "-c", command]).summary()

        return [bash]

    def oracle(task: Task) -> list[ToolCall]:
        solve = by_name[task.params["task"]].path / "solution" / "solve.sh"
        if not solve.is_file():
            raise ValueError(f"Harbor task {task.params['task']} has no solution/solve.sh")
        script = paths.rewrite(solve.read_text(), paths.solution_dir)
        return [ToolCall("bash", {"command": script}), ToolCall(FINISH, {"answer": "done"})]

    pool = _pool(found, splits, spec, problem_key, name)
    return SimpleEnv(
        name=name,
        description=description or f"{len(found)} Harbor tasks, run in the sandbox",
        sample=pool,
        build=build,
        tools=tools,
        verify=lambda task, world, answer: _verify(world, paths),
        oracle=oracle,
        problem_key=problem_key,
        version=version,
        teardown=lambda world: world.sandbox.close(),
    )


class _Paths:
    """Maps the container paths a task's files use to places in the sandbox workspace."""

    solution_dir = "solution"

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir.rstrip("/") or "/"

    def instruction(self, text: str) -> str:
        """The instruction with the working directory named as the agent will find it."""
        return self._sub(text, {self.workdir: "."}, {self.workdir: "the current folder"})

    def rewrite(self, text: str, tests: str, logs: str = "logs") -> str:
        """A script or test file with its container paths moved into the workspace."""
        places = {self.workdir: ".", "/tests": f"./{tests}", "/logs": f"./{logs}"}
        places["/solution"] = "./solution"
        return self._sub(text, places, places)

    @staticmethod
    def _sub(text: str, prefix: dict[str, str], bare: dict[str, str]) -> str:
        """Replace whole container paths: ``/app/x`` by ``prefix`` + ``/x``, ``/app`` by ``bare``.

        ``/dev/null``, ``/apps`` and ``lib/tests`` are left alone.
        """
        pattern = "|".join(re.escape(p) for p in sorted(prefix, key=len, reverse=True))
        container = re.compile(rf"(?<![\w./-])({pattern})(?:(?=/)|(?![\w-])(?!\.\w))")

        def place(found: re.Match[str]) -> str:
            path = found.group(1)
            return prefix[path] if text.startswith("/", found.end()) else bare[path]

        return container.sub(place, text)


def _find(tasks: Path | str | Sequence[Path | str]) -> list[HarborTask]:
    if isinstance(tasks, (str, Path)):
        root = Path(tasks)
        if (root / "instruction.md").is_file():
            return [read_task(root)]
        if not root.is_dir():
            raise ValueError(f"no Harbor tasks at {root}: not a folder")
        return [read_task(p) for p in sorted(root.iterdir()) if (p / "instruction.md").is_file()]
    return [read_task(p) for p in tasks]


def _pool(
    found: list[HarborTask],
    splits: Mapping[str, Sequence[str]] | None,
    spec: Callable[[HarborTask], TaskSpec],
    problem_key: ProblemKey,
    name: str,
) -> TaskPool:
    if splits is None:
        grouped: dict[Split, list[TaskSpec]] = {split: [] for split in SPLITS}
        for task in found:
            made = spec(task)
            grouped[split_of(problem_key(made.params))].append(made)
        return TaskPool(**grouped)
    names = {task.name: task for task in found}
    unknown = [task for listed in splits.values() for task in listed if task not in names]
    if unknown:
        raise ValueError(f"splits name tasks that are not there: {', '.join(unknown[:5])}")
    pool = TaskPool.from_splits(
        {split: [spec(names[n]) for n in listed] for split, listed in splits.items()}
    )
    dropped = pool.dropped(problem_key)
    if dropped:
        warnings.warn(
            f"Harbor tasks of {name}: {sum(dropped.values())} tasks are the same problem (same "
            "instruction and solution) as tasks of a more held-out split and were dropped "
            f"(test over probe over train): {dropped_text(dropped)}",
            RepeatedTasks,
            stacklevel=3,
        )
    return pool


def _seed(root: Path, environment: Path) -> None:
    """Copy the build context's files (not the Docker files) into the workspace."""
    if not environment.is_dir():
        return
    total = 0
    for source in sorted(environment.rglob("*")):
        relative = source.relative_to(environment)
        if source.is_symlink() or not source.is_file() or relative.parts[0] in _DOCKER_FILES:
            continue
        data = source.read_bytes()
        total += len(data)
        if total > _MAX_SEED_BYTES:
            raise ValueError(f"{environment} holds more than {_MAX_SEED_BYTES >> 20} MB of files")
        write_bytes(root, relative.as_posix(), data)


def _verify(world: HarborWorld, paths: _Paths) -> Verdict:
    """Run the task's tests in a fresh folder of the workspace and read the reward it wrote."""
    harbor, sandbox = world.task, world.sandbox
    folder = f".verifier-{secrets.token_hex(8)}"  # unknowable to the agent, so nothing is planted
    for source in sorted((harbor.path / "tests").rglob("*")):
        if source.is_file() and not source.is_symlink():
            relative = source.relative_to(harbor.path / "tests").as_posix()
            text = paths.rewrite(
                source.read_text(errors="replace"), f"{folder}/tests", f"{folder}/logs"
            )
            write_bytes(sandbox.root, f"{folder}/tests/{relative}", text.encode())
    for made in ("logs/verifier", "home", "tmp"):
        make_folder(sandbox.root, f"{folder}/{made}")
    timeout = min(harbor.timeout("verifier", 120.0), 600.0)
    limits = Limits(cpu_s=max(1, int(timeout)), memory_mb=2048, processes=64, timeout_s=timeout)
    # The workspace was the agent's home: nothing it planted there may run in the verifier.
    inside = sandbox.directory / folder
    env = {"HOME": str(inside / "home"), "TMPDIR": str(inside / "tmp"), "PYTHONNOUSERSITE": "1"}
    result = sandbox.run(["/bin/bash", f"{folder}/tests/test.sh"], limits=limits, env=env)
    reward, metrics = _reward(sandbox.root, f"{folder}/logs/verifier")
    if reward is None:
        # The folder's random name would make the same episode's feedback differ run to run.
        output = result.summary().replace(f"./{folder}/", "").replace(folder, "verifier")
        return Verdict(0.0, False, f"the tests wrote no reward file; test.sh: {output[-400:]}")
    score = min(1.0, max(0.0, reward)) if math.isfinite(reward) else 0.0
    return Verdict(score, score >= 1.0, f"reward {reward:g}", metrics)


def _reward(root: Path, logs: str) -> tuple[float | None, dict[str, float]]:
    """Read ``reward.txt`` (a number), else ``reward.json`` (``{"reward": x}``), never via links."""
    for name in ("reward.txt", "reward.json"):
        try:
            text = read_bytes(root, f"{logs}/{name}", _REWARD_BYTES).decode(errors="replace")
        except (OSError, WorkspacePathError):
            continue
        try:
            if name == "reward.txt":
                return float(text.strip()), {}
            data = json.loads(text)
        except ValueError:
            return None, {}
        metrics = {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}
        reward = metrics.get("reward", next(iter(metrics.values()), None))
        return reward, metrics
    return None, {}
