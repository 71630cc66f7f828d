"""``code``: implement a Python function from a specification, judged by hidden tests.

The agent writes ``solution.py`` with ``write_solution``, runs the visible examples with
``run_tests`` (in the sandbox) and calls ``finish``. The verifier imports the file the agent
wrote inside the sandbox, calls the function on hidden inputs drawn from the task's seed, and
compares the results on the host with the reference implementation's; the final answer text is
never trusted. A task's problem is the function to write with the examples it shows
(:func:`problem_key`), not the seed of its hidden tests.
"""

from __future__ import annotations

import ast
import functools
import json
import random
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ratchet.core.env import FINISH, SimpleEnv
from ratchet.core.task import Task, TaskSpec, canonical_key
from ratchet.core.tool import ToolCall, ToolError
from ratchet.core.trajectory import Trajectory
from ratchet.core.verdict import Verdict
from ratchet.envs.code.attacks import ATTACKS
from ratchet.envs.code.families import BY_NAME, FAMILIES, Args, Family, Params
from ratchet.sandbox import Limits, Sandbox, SandboxResult
from ratchet.sandbox.workspace import WorkspacePathError, entry, read_bytes, write_bytes

SOLUTION = "solution.py"
RUN_LIMITS = Limits(cpu_s=2, memory_mb=512, processes=8, timeout_s=5.0, output_bytes=65_536)
_VISIBLE, _HIDDEN, _EDGES = 3, 12, 4
_MAX_EXTRA_DRAWS = 500
_PROBE_SEED = 0
_MAX_SOLUTION_CHARS = 20_000
_MAX_READ_BYTES = 4 * _MAX_SOLUTION_CHARS
_MARK = "@@ratchet-results@@"
# Values are compared in a canonical, type-tagged form so that True != 1 and (1,) != [1].
_CANON = """
def _canon(value):
    if isinstance(value, bool) or value is None:
        return [type(value).__name__, value]
    if isinstance(value, (int, float, str)):
        return [type(value).__name__, value]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [_canon(v) for v in value]]
    if isinstance(value, dict):
        items = [[_canon(k), _canon(v)] for k, v in value.items()]
        return ["dict", sorted(items, key=repr)]
    raise TypeError(f"unsupported return type {type(value).__name__}")
"""
_RUNNER = (
    "import copy, json, sys\nsys.path.insert(0, '')\n"
    + _CANON
    + """
CASES = json.loads(sys.stdin.read())
results = []
try:
    import solution
    fn = getattr(solution, FN)
except BaseException as exc:
    error = f"cannot load {FN} from solution.py: {type(exc).__name__}: {exc}"
    results = [{"error": error}] * len(CASES)
else:
    for args in CASES:
        try:
            results.append({"value": _canon(fn(*copy.deepcopy(args)))})
        except BaseException as exc:
            results.append({"error": f"{type(exc).__name__}: {exc}"})
sys.stdout.flush()
print("\\n" + MARK + json.dumps(results))
"""
)
_canon_namespace: dict[str, Any] = {}
exec(_CANON, _canon_namespace)
canon: Callable[[Any], Any] = _canon_namespace["_canon"]


@dataclass(frozen=True)
class CodeWorld:
    """One episode: a sandbox whose workspace holds ``solution.py``.

    Attributes:
        sandbox: The sandbox the solution runs in.
    """

    sandbox: Sandbox


@dataclass(frozen=True)
class Outcome:
    """The solution's results on a list of cases.

    Attributes:
        results: Per case, ``{"value": canonical}`` or ``{"error": message}``.
        run: The sandbox run that produced them.
    """

    results: tuple[dict[str, Any], ...]
    run: SandboxResult


def family_cases(family: Family, seed: int, count: int) -> list[Args]:
    """Draw ``count`` argument lists for ``family`` from ``seed``."""
    rng = random.Random(seed)
    return [family.inputs(rng) for _ in range(count)]


def expected(family: Family, params: Params, cases: list[Args]) -> list[Any]:
    """Run the reference implementation (trusted, on the host) and return canonical results."""
    namespace: dict[str, Any] = {}
    exec(family.reference("reference", params), namespace)
    return [canon(namespace["reference"](*json.loads(json.dumps(args)))) for args in cases]


def hidden_cases(family: Family, params: Params, seed: int) -> list[Args]:
    """Return the hidden test inputs of a task, drawn from ``seed``.

    Random draws, then the family's edge cases, then, while every expected output is the
    same, more draws until one differs: a function returning a constant never passes.
    """
    rng = random.Random(seed)
    cases = [family.inputs(rng) for _ in range(_HIDDEN)]
    if family.edge_inputs is not None:
        cases += [family.edge_inputs(rng) for _ in range(_EDGES)]
    outputs = {json.dumps(out) for out in expected(family, params, cases)}
    for _ in range(_MAX_EXTRA_DRAWS):
        if len(outputs) > 1:
            break
        case = family.inputs(rng)
        output = json.dumps(expected(family, params, [case])[0])
        if output not in outputs:
            cases.append(case)
            outputs.add(output)
    return cases


def run_cases(sandbox: Sandbox, fn: str, cases: list[Args]) -> Outcome:
    """Call ``fn`` from the workspace's ``solution.py`` on each case, in one sandboxed run."""
    code = f"FN = {fn!r}\nMARK = {_MARK!r}\n{_RUNNER}"
    run = sandbox.run_python(code, stdin=json.dumps(cases).encode(), limits=RUN_LIMITS)
    head, _, tail = run.stdout.rpartition(_MARK)
    try:
        results = json.loads(tail.splitlines()[0]) if head or tail else None
    except (json.JSONDecodeError, IndexError):
        results = None
    if not isinstance(results, list) or len(results) != len(cases):
        reason = run.killed or "it produced no results"
        results = [{"error": f"the test run failed ({reason})"}] * len(cases)
    shown = head.removesuffix("\n") if _MARK in run.stdout else run.stdout
    return Outcome(tuple(results), replace(run, stdout=shown))


KINDS = ("string", "list", "dict", "number", "algorithm")
"""Level 1 draws ``expression`` families (the spec spells out the expression to return);
level 2 draws string and list families, and each level above adds the next kind."""


def level_of(family: Family) -> int:
    """Return the lowest level that draws ``family``."""
    return 1 if family.kind == "expression" else max(2, KINDS.index(family.kind) + 1)


def _sample(rng: random.Random, difficulty: int) -> TaskSpec:
    if difficulty == 1:
        pool = [f for f in FAMILIES if f.kind == "expression"]
    else:
        pool = [f for f in FAMILIES if f.kind in KINDS[:difficulty]]
    family = rng.choice(pool)
    return _spec(family, rng.choice(family.names), rng.choice(family.grid), rng.randrange(10**9))


def _spec(family: Family, fn: str, params: Params, test_seed: int) -> TaskSpec:
    cases = family_cases(family, test_seed, _VISIBLE)
    outputs = expected(family, params, cases)
    examples = "\n".join(
        f"    {_call_text(fn, args)} == {_value_text(out)}"
        for args, out in zip(cases, outputs, strict=True)
    )
    instruction = (
        f"Write a Python module {SOLUTION} defining `def {fn}{family.signature}` that "
        f"{family.spec(params)}.\nExamples:\n{examples}\n"
        "Use write_solution to save the module, run_tests to try the examples, then call finish."
    )
    params_out = {"family": family.name, "fn": fn, "params": params, "test_seed": test_seed}
    return TaskSpec(instruction, params_out, family.kind)


def _call_text(fn: str, args: Args) -> str:
    return f"{fn}({', '.join(repr(a) for a in args)})"


def _value_text(value: Any) -> str:
    return repr(_plain(value))


def _plain(tagged: Any) -> Any:
    kind, value = tagged
    if kind in ("list", "tuple"):
        items = [_plain(v) for v in value]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {_plain(k): _plain(v) for k, v in value}
    return value


def problem_key(params: dict[str, Any]) -> str:
    """A task's problem: the function to write, under its name, with the examples it shows.

    The test seed is left out: it also picks the hidden inputs, so two tasks that read the
    same (same function, name and examples) and have the same solution would otherwise be two
    problems, and could sit in two splits. (A function of the same family and parameters
    under another name or with other examples stays another problem: keyed on the family and
    parameters alone, a family such as ``top_k`` would have 24 problems in all.)
    """
    family = BY_NAME.get(str(params.get("family")))
    seed = params.get("test_seed")
    if family is None or not isinstance(seed, int):
        return canonical_key(params)
    shown = family_cases(family, seed, _VISIBLE)
    kept = {key: value for key, value in params.items() if key != "test_seed"}
    return canonical_key({**kept, "examples": shown})


def _build(task: Task) -> CodeWorld:
    return CodeWorld(Sandbox(RUN_LIMITS))


def _tools(world: CodeWorld, task: Task) -> list[Callable[..., str]]:
    family, params = BY_NAME[task.params["family"]], task.params["params"]
    fn = task.params["fn"]

    def write_solution(code: str) -> str:
        """Write (or overwrite) solution.py, the module holding your function.

        Args:
            code: The whole Python source of the module.
        """
        if len(code) > _MAX_SOLUTION_CHARS:
            raise ToolError(f"the solution is longer than {_MAX_SOLUTION_CHARS} characters")
        try:
            write_bytes(world.sandbox.root, SOLUTION, code.encode())
        except WorkspacePathError as exc:
            raise ToolError(str(exc)) from None
        try:
            ast.parse(code)
        except SyntaxError as exc:
            return f"saved {SOLUTION}, but it has a syntax error on line {exc.lineno}: {exc.msg}"
        return f"saved {SOLUTION} ({len(code.splitlines())} lines)"

    def read_solution() -> str:
        """Return the current content of solution.py."""
        _require_solution(world)
        try:
            data = read_bytes(world.sandbox.root, SOLUTION, _MAX_READ_BYTES + 1)
        except WorkspacePathError as exc:
            raise ToolError(str(exc)) from None
        text = data[:_MAX_READ_BYTES].decode(errors="replace")
        return text + "\n[truncated]" if len(data) > _MAX_READ_BYTES else text

    def run_tests() -> str:
        """Run the visible examples against solution.py in the sandbox and report each result."""
        _require_solution(world)
        cases = family_cases(family, task.params["test_seed"], _VISIBLE)
        outcome = run_cases(world.sandbox, fn, cases)
        wanted = expected(family, params, cases)
        lines = []
        for args, result, want in zip(cases, outcome.results, wanted, strict=True):
            call = _call_text(fn, args)
            if "error" in result:
                lines.append(f"ERROR {call}: {result['error']}")
            elif result["value"] == want:
                lines.append(f"PASS  {call} == {_value_text(want)}")
            else:
                got = _value_text(result["value"])
                lines.append(f"FAIL  {call}: expected {_value_text(want)}, got {got}")
        if outcome.run.killed:
            raise ToolError(f"the test run was killed ({outcome.run.killed}):\n" + "\n".join(lines))
        passed = sum(line.startswith("PASS") for line in lines)
        lines.append(f"{passed}/{len(cases)} examples passed")
        extra = outcome.run.summary() if outcome.run.stdout or outcome.run.stderr else ""
        return "\n".join(lines) + (f"\n[program output]\n{extra}" if extra else "")

    return [write_solution, read_solution, run_tests]


def _require_solution(world: CodeWorld) -> None:
    problem = _solution_problem(world)
    if problem:
        raise ToolError(problem)


def _solution_problem(world: CodeWorld) -> str | None:
    """Why the workspace holds no regular ``solution.py`` file, or ``None`` if it does."""
    found = entry(world.sandbox.root, SOLUTION)
    if found is None:
        return f"{SOLUTION} does not exist yet; write it with write_solution"
    if not stat.S_ISREG(found.st_mode):
        return f"{SOLUTION} is not a regular file (links are not followed); write it again"
    return None


def _check(task: Task, world: CodeWorld, answer: str | None) -> Verdict:
    problem = _solution_problem(world)
    if problem:
        return Verdict.of(False, problem, hidden_passed=0.0)
    family = BY_NAME[task.params["family"]]
    cases = hidden_cases(family, task.params["params"], task.params["test_seed"] + 1)
    outcome = run_cases(world.sandbox, task.params["fn"], cases)
    wanted = expected(family, task.params["params"], cases)
    passed = sum(r.get("value") == w for r, w in zip(outcome.results, wanted, strict=True))
    failures = [r["error"] for r in outcome.results if "error" in r]
    feedback = f"{passed}/{len(cases)} hidden tests passed"
    if failures:
        feedback += f"; first error: {failures[0]}"
    score = passed / len(cases)
    return Verdict(score, passed == len(cases), feedback, {"hidden_passed": float(passed)})


def _solve(task: Task) -> list[ToolCall]:
    family = BY_NAME[task.params["family"]]
    code = family.reference(task.params["fn"], task.params["params"])
    return [ToolCall("write_solution", {"code": code}), ToolCall(FINISH, {"answer": "done"})]


def _relabel(trajectory: Trajectory) -> TaskSpec | None:
    """Find the family and parameters that a function of the last written solution implements.

    Each function the module defines at its top level runs once, in one sandbox, on fixed
    probe inputs of every family; a family whose inputs it handled without error is matched
    against the outputs of each of its parameter settings, computed on the host. Families
    that use the function's name are tried first; the relabelled task keeps the name, which
    is wording, not the problem.
    """
    code = None
    for step in trajectory.steps:
        call = step.call
        if call and call.name == "write_solution" and step.observation.error is None:
            code = call.arguments.get("code")
    if not isinstance(code, str):
        return None
    try:
        defined = sorted(n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef))
    except SyntaxError:
        return None
    seed = trajectory.task.seed
    with Sandbox(RUN_LIMITS) as sandbox:
        write_bytes(sandbox.root, SOLUTION, code.encode())
        for fn in defined:
            found = _match(sandbox, fn)
            if found is not None:
                family, params = found
                spec = _spec(family, fn, params, seed % 10**9)
                return replace(spec, difficulty=level_of(family))
    return None


def _match(sandbox: Sandbox, fn: str) -> tuple[Family, Params] | None:
    families = sorted(FAMILIES, key=lambda f: fn not in f.names)
    probes = [family_cases(family, _PROBE_SEED, _HIDDEN) for family in families]
    results = run_cases(sandbox, fn, [case for cases in probes for case in cases]).results
    for index, family in enumerate(families):
        got = results[index * _HIDDEN : (index + 1) * _HIDDEN]
        if any("error" in result for result in got):
            continue
        params = _outputs_index(family.name).get(json.dumps([r["value"] for r in got]))
        if params is not None:
            return family, params
    return None


@functools.cache
def _outputs_index(name: str) -> dict[str, Params]:
    """Map the outputs of each of a family's settings on the probe inputs to the setting.

    Built once per process (all families together take a few seconds); settings that agree on
    every probe input map to the first of them, and the replay on the relabelled task's hidden
    tests then decides.
    """
    family = BY_NAME[name]
    cases = family_cases(family, _PROBE_SEED, _HIDDEN)
    index: dict[str, Params] = {}
    for params in family.grid:
        index.setdefault(json.dumps(expected(family, params, cases)), params)
    return index


def _teardown(world: CodeWorld) -> None:
    world.sandbox.close()


env: SimpleEnv[tuple[CodeWorld, Task]] = SimpleEnv(
    name="code",
    description="Implement a Python function from a specification; hidden tests in a sandbox.",
    sample=_sample,
    build=lambda task: (_build(task), task),
    tools=lambda state: _tools(*state),
    verify=lambda task, state, answer: _check(task, state[0], answer),
    oracle=_solve,
    max_difficulty=5,
    version="4",
    teardown=lambda state: _teardown(state[0]),
    describe=_relabel,
    attacks=ATTACKS,
    problem_key=problem_key,
)
