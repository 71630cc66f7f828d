"""Any OpenEnv environment server as a Ratchet env, through OpenEnv's own client.

Each Ratchet session is one OpenEnv session: a ``GenericEnvClient`` (OpenEnv's ``EnvClient``
for servers whose action and observation types we do not import) on the server's ``/ws``
endpoint, reset with the task's reset arguments. What the agent can call depends on the server:

- a tool-calling server (OpenEnv's MCP actions, RFC 003: it answers ``list_tools``) offers its
  tools, each called as a ``call_tool`` action; a tool's result reaches the agent as the text
  of its MCP ``CallToolResult`` (its text content), not the result's JSON, and a result marked
  ``is_error`` as an error observation. Ratchet envs served by
  :mod:`ratchet.integrations.openenv_server` are such servers;
- any other server offers one tool, ``step``, whose parameters are the server's action schema
  (from ``GET /schema``).

OpenEnv's ``MCPToolClient`` is not used: it runs in OpenEnv's production mode only, where tool
calls go over HTTP ``/mcp`` and carry no reward, and the reward is what Ratchet verifies by.
The same ``call_tool`` actions go over the session's WebSocket instead, rewards included.

A server holds a limited number of sessions (``max_concurrent_envs``) and refuses the next
with ``CAPACITY_REACHED``. Opening a session waits for a free one, up to ``capacity_wait_s``:
the refusal says how many the server holds, which becomes the env's ``max_sessions`` (so later
rollouts run no more episodes at once) and bounds the sessions this process opens (so waiting
ones queue here instead of knocking); a refused session retries with a growing pause, for
slots other clients hold. A server that cannot be reached, stays full past the wait, or drops
a session raises :class:`~ratchet.core.trajectory.InfrastructureError`: the episode is stored
as errored and left out of pass@1, never counted as the agent's failure.

Tasks come from the server's Task API (``/{env}/splits``, ``/{env}/tasks``; its ``validation``
split is Ratchet's ``probe``; each task is reset with its ``split`` and ``index``), or from your
own sampler or :class:`~ratchet.core.pool.TaskPool` whose params hold ``{"reset": {...}}``.
Verification reads the rewards the server computed (its own world state): by default the score
is the last reward, clipped to [0, 1], and a task passes at ``pass_reward``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from ratchet.core.env import FINISH
from ratchet.core.pool import TaskPool
from ratchet.core.task import Sampler, Split, Task, TaskSpec, generate_tasks
from ratchet.core.tool import Tool, ToolCall, ToolError
from ratchet.core.trajectory import InfrastructureError, Observation, error_observation
from ratchet.core.verdict import Verdict
from ratchet.integrations.openenv_client import (
    ACTION_ERRORS,
    Slots,
    capacity_of,
    close,
    connect,
    refusal,
    tool_result_text,
)

SERVER_SPLITS: dict[str, Split] = {"train": "train", "validation": "probe", "test": "test"}
"""Task API split names and the Ratchet split each becomes."""

_FINISH_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "The final answer."}},
    "required": ["answer"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Outcome:
    """What an episode left on the server, for a custom verifier.

    Attributes:
        observation: The last observation payload (``observation``, ``reward``, ``done``).
        rewards: Every non-null reward the server gave, in order.
        done: Whether the server ended the episode.
        answer: What the agent passed to ``finish``, if it did.
    """

    observation: dict[str, Any]
    rewards: tuple[float, ...]
    done: bool
    answer: str | None


Render = Callable[[dict[str, Any]], str]
Verify = Callable[[Task, Outcome], Verdict]


def render_observation(observation: dict[str, Any]) -> str:
    """Show an observation's fields to the agent: a lone text field as it is, else JSON."""
    fields = {k: v for k, v in observation.items() if k not in ("metadata", "reward", "done")}
    texts = [v for v in fields.values() if isinstance(v, str)]
    if len(fields) == 1 and len(texts) == 1:
        return texts[0]
    return json.dumps(fields, sort_keys=True, default=str)


@dataclass
class OpenEnvEnv:
    """An OpenEnv server as a Ratchet env (see the module docstring).

    Attributes:
        url: The server's base URL, e.g. ``http://127.0.0.1:8000``.
        name: The env's name.
        oracle_fn: ``oracle(task) -> [ToolCall]``: a plan that solves the task.
        description: One line for ``ratchet envs``.
        sample: Your tasks (params ``{"reset": {...}}``), or ``None`` for the server's Task API.
        verify_fn: ``verify(task, outcome) -> Verdict``; default: the last reward.
        render: Turns an observation payload into text for the agent.
        pass_reward: The reward at which a task passes (default verifier).
        max_difficulty: Highest difficulty of ``sample``'s tasks.
        version: Bumped whenever tasks or scoring change meaning.
        timeout_s: Longest wait for the server's answer to one message.
        max_sessions: Sessions the server holds at once (``max_concurrent_envs``); learned
            from the server's first refusal when not given (see the module docstring).
        capacity_wait_s: Longest a new session waits for the server to have room before its
            episode is errored (an infrastructure error, left out of pass@1).
        api_key: Sent as ``Authorization: Bearer KEY`` with every request and session, for a
            server that wants a key (``openenv_app(..., api_key=...)``).
    """

    url: str
    name: str
    oracle_fn: Callable[[Task], list[ToolCall]]
    description: str = ""
    sample: Sampler | TaskPool | None = None
    verify_fn: Verify | None = None
    render: Render = render_observation
    pass_reward: float = 1.0
    max_difficulty: int = 1
    version: str = "1"
    timeout_s: float = 30.0
    max_sessions: int | None = None
    capacity_wait_s: float = 600.0
    api_key: str | None = field(default=None, repr=False)
    _schema: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _slots: Slots = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")
        self._slots = Slots(self.max_sessions)
        if self.sample is None:
            self.sample = _server_pool(self)
        if isinstance(self.sample, TaskPool):
            self.max_difficulty = self.sample.max_difficulty
        self.description = self.description or f"the OpenEnv server at {self.url}"

    def tasks(
        self, split: Split, n: int, seed: int = 0, difficulty: int | None = None
    ) -> list[Task]:
        """Draw ``n`` tasks of ``split`` from the server's task lists or your sampler."""
        if isinstance(self.sample, TaskPool):
            return self.sample.tasks(self.name, split, n, seed, difficulty)
        assert self.sample is not None  # set in __post_init__
        return generate_tasks(
            self.name,
            self.sample,
            split=split,
            n=n,
            seed=seed,
            difficulty=difficulty,
            max_difficulty=self.max_difficulty,
        )

    def session(self, task: Task) -> OpenEnvSession:
        """Open a session (one environment instance on the server) for ``task`` and reset it.

        Waits up to ``capacity_wait_s`` while the server is full; the wait is not part of
        the episode's time budget, which starts at ``reset()``.

        Raises:
            InfrastructureError: If the server cannot be reached or stays full.
            RuntimeError: If the server refuses to reset the task (its own error).
        """
        client, first = self._start(task.params.get("reset", {}))
        return OpenEnvSession(self, task, client, first)

    def oracle(self, task: Task) -> list[ToolCall]:
        """Your plan for ``task``."""
        return self.oracle_fn(task)

    def action_schema(self) -> dict[str, Any]:
        """The server's action schema (``GET /schema``), as tool parameters."""
        if self._schema is None:
            schema = self.call_api("/schema")["action"]
            properties = {k: v for k, v in schema.get("properties", {}).items() if k != "metadata"}
            self._schema = {
                **{k: v for k, v in schema.items() if k not in ("title", "properties")},
                "type": "object",
                "properties": properties,
                "additionalProperties": False,
            }
        return self._schema

    def _start(self, reset: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """A connected client and its reset payload, once the server has room for a session."""
        deadline = time.monotonic() + self.capacity_wait_s
        pause_s = 0.05
        while True:
            if not self._slots.take(deadline):
                raise InfrastructureError(self._full())
            client = connect(self.url, self.timeout_s, self.headers())
            try:
                first = client.reset(**reset)
                return client, {"observation": first.observation, "reward": first.reward,
                                "done": first.done}  # fmt: skip
            except Exception as exc:
                close(client)
                self._slots.give_back()
                code, message = refusal(exc)
                if code is None or code in ("SESSION_ERROR", "FACTORY_ERROR"):
                    raise InfrastructureError(f"OpenEnv server {self.url}: {exc}") from None
                if code != "CAPACITY_REACHED":
                    raise RuntimeError(
                        f"OpenEnv server {self.url} refused reset: {message}"
                    ) from None
                self._learn(message)
            if time.monotonic() + pause_s > deadline:
                raise InfrastructureError(self._full())
            time.sleep(pause_s)
            pause_s = min(2 * pause_s, 2.0)

    def _learn(self, refused: str) -> None:
        """Take the server's size from its refusal: bound this process's sessions by it."""
        size = capacity_of(refused)
        if size is None:
            return
        self._slots.bound(size)
        self.max_sessions = size if self.max_sessions is None else min(self.max_sessions, size)

    def _full(self) -> str:
        return (
            f"OpenEnv server {self.url} had no free session within {self.capacity_wait_s:g} s "
            f"(it holds {self.max_sessions or 'an unknown number of'} at once)"
        )

    def headers(self) -> dict[str, str]:
        """The headers every request and session sends (the key, if there is one)."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def call_api(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """``GET`` ``path`` (``POST`` ``body`` if given) and return the JSON answer.

        Raises:
            ConnectionError: If the request fails or the server answers with an error.
        """
        try:
            if body is None:
                response = httpx.get(
                    self.url + path, headers=self.headers(), timeout=self.timeout_s
                )
            else:
                response = httpx.post(
                    self.url + path, json=body, headers=self.headers(), timeout=self.timeout_s
                )
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise ConnectionError(f"OpenEnv server {self.url}: {path} failed: {exc}") from None
        return response.json()

    def judge(self, task: Task, outcome: Outcome) -> Verdict:
        """Apply ``verify_fn``, or score the last reward."""
        if self.verify_fn is not None:
            return self.verify_fn(task, outcome)
        if not outcome.rewards:
            return Verdict(0.0, False, "the server gave no reward")
        last = outcome.rewards[-1]
        score = min(1.0, max(0.0, last))
        return Verdict(score, last >= self.pass_reward, f"last reward {last:g}")


class OpenEnvSession:
    """One episode: one session on the server, through OpenEnv's client."""

    def __init__(self, env: OpenEnvEnv, task: Task, client: Any, first: dict[str, Any]) -> None:
        self.env, self.task = env, task
        self._client = client
        self._first = first
        self._tools: dict[str, Tool] = {}
        self._last: dict[str, Any] = {}
        self._rewards: list[float] = []
        self._answer: str | None = None
        self._over = False
        self._closed = False

    def reset(self) -> Observation:
        """Offer the server's tools (or its action) with the task and the first observation."""
        self._record(self._first)
        listed = self._listed_tools()
        if listed is not None:
            self._tools = {spec["name"]: self._remote_tool(spec) for spec in listed}
        else:
            self._tools = {"step": self._action_tool()}
        if FINISH not in self._tools:  # the server has no finish of its own: end it here
            self._tools[FINISH] = Tool.from_schema(
                FINISH,
                "Submit your final answer and end the episode.",
                _FINISH_SCHEMA,
                self._finish_here,
            )
        text = "\n\n".join(
            t for t in (self.task.instruction, self.env.render(self._first["observation"])) if t
        )
        return Observation(text, tools=tuple(tool.schema() for tool in self._tools.values()))

    def step(self, call: ToolCall) -> Observation:
        """Send one action; the server's refusals of it come back as error observations.

        Raises:
            InfrastructureError: If the session is lost (the server went away or timed out).
        """
        if self._over:
            return error_observation("the episode is over; no more calls are taken", done=True)
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(self._tools)
            return error_observation(f"unknown tool {call.name!r}; available tools: {known}")
        try:
            arguments = tool.validate(call.arguments)
            if call.name == FINISH:
                self._answer = str(arguments.get("answer", ""))
            text = tool.fn(**arguments)
        except ToolError as exc:
            return error_observation(str(exc), done=self._over)
        self._over = self._over or bool(self._last.get("done"))
        return Observation(text, done=self._over, terminated=self._over)

    def _finish_here(self, answer: str) -> str:
        self._over = True
        return "Answer submitted."

    def verify(self) -> Verdict:
        """Judge the episode by what the server reported."""
        outcome = Outcome(
            self._last, tuple(self._rewards), bool(self._last.get("done")), self._answer
        )
        return self.env.judge(self.task, outcome)

    def close(self) -> None:
        """Close the session on the server and free its slot (idempotent)."""
        if not self._closed:
            self._closed = True
            close(self._client)
            self.env._slots.give_back()

    def _listed_tools(self) -> list[dict[str, Any]] | None:
        """The server's tools, or ``None`` if it does not take OpenEnv's MCP actions."""
        try:
            observation = self._act({"type": "list_tools"})
        except ToolError:  # an action schema of its own refused the MCP action
            return None
        tools = observation.get("tools")
        return tools if isinstance(tools, list) else None

    def _remote_tool(self, spec: dict[str, Any]) -> Tool:
        name = spec["name"]

        def call(**arguments: Any) -> str:
            payload = self._act({"type": "call_tool", "tool_name": name, "arguments": arguments})
            error = payload.get("error")
            if error:
                raise ToolError(
                    error.get("message", str(error)) if isinstance(error, dict) else str(error)
                )
            return tool_result_text(payload.get("result"))

        schema = spec.get("input_schema") or spec.get("inputSchema") or {"type": "object"}
        return Tool.from_schema(name, spec.get("description") or name, schema, call)

    def _action_tool(self) -> Tool:
        def call(**action: Any) -> str:
            return self.env.render(self._act(action))

        return Tool.from_schema(
            "step", "Take one action in the environment.", self.env.action_schema(), call
        )

    def _act(self, action: dict[str, Any]) -> dict[str, Any]:
        """Send a step; return its observation payload.

        Raises:
            ToolError: If the server refused the action (the agent sees why).
            InfrastructureError: If the session is lost.
        """
        try:
            result = self._client.step(action)
        except Exception as exc:
            code, message = refusal(exc)
            if code in ACTION_ERRORS:
                raise ToolError(message) from None
            raise InfrastructureError(f"OpenEnv server {self.env.url}: {exc}") from None
        observation: dict[str, Any] = result.observation
        self._record({"observation": observation, "reward": result.reward, "done": result.done})
        return observation

    def _record(self, payload: dict[str, Any]) -> None:
        self._last = payload
        if payload.get("reward") is not None:
            self._rewards.append(float(payload["reward"]))


def openenv_env(
    url: str,
    *,
    name: str,
    oracle: Callable[[Task], list[ToolCall]],
    sample: Sampler | TaskPool | None = None,
    verify: Verify | None = None,
    **options: Any,
) -> OpenEnvEnv:
    """Return the OpenEnv server at ``url`` as an env (see :class:`OpenEnvEnv` for ``options``).

    Raises:
        ConnectionError: If the server cannot be reached, or (with ``sample=None``) has no
            Task API.
    """
    return OpenEnvEnv(url, name, oracle, sample=sample, verify_fn=verify, **options)


def _server_pool(env: OpenEnvEnv) -> TaskPool:
    """The server's own task lists, by split, through its Task API."""
    names: Sequence[str] = env.call_api("/list_environments")
    server = names[0]
    splits: dict[Split, list[TaskSpec]] = {}
    for split in env.call_api(f"/{server}/splits"):
        split_name = split["name"] if isinstance(split, dict) else str(split)
        ours = SERVER_SPLITS.get(split_name)
        if ours is None:
            continue
        listed = env.call_api(f"/{server}/tasks", {"split": split_name})["tasks"]
        splits[ours] = [_spec(split_name, index, spec) for index, spec in enumerate(listed)]
    if not splits:
        raise ConnectionError(f"OpenEnv server {env.url} lists no train, validation or test split")
    return TaskPool(**splits)


def _spec(split: str, index: int, spec: Any) -> TaskSpec:
    listed = spec if isinstance(spec, dict) else {"value": spec}
    text = next(
        (str(listed[k]) for k in ("prompt", "instruction", "question") if k in listed),
        f"Solve task {listed.get('id', index)} of the {split} split.",
    )
    return TaskSpec(text, {"reset": {"split": split, "index": index}, "task": listed})
