import threading
import time
from dataclasses import replace

from ratchet.core.agent import Agent
from ratchet.core.env import (
    SimpleEnv,
    left_out,
    max_sessions_of,
    params_schema_of,
    policy_of,
    task_builder,
    thread_safe_of,
)
from ratchet.core.task import TaskSpec
from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.engine.guard import guarded
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import RolloutConfig, rollout


class Engine:
    """A parser with global state: it notices when two threads are inside it at once."""

    def __init__(self):
        self.inside = 0
        self.overlaps = 0
        self.open = 0
        self.most_open = 0
        self.lock = threading.Lock()

    def enter(self):
        with self.lock:
            self.inside += 1
            self.overlaps += self.inside > 1
        time.sleep(0.002)  # long enough for another thread to walk in, were it allowed
        with self.lock:
            self.inside -= 1


def make_env(engine, **flags):
    def build(task):
        engine.enter()
        with engine.lock:
            engine.open += 1
            engine.most_open = max(engine.most_open, engine.open)
        return engine

    def tools(world):
        def look() -> str:
            """Look around."""
            world.enter()
            return "a room"

        return [look]

    def teardown(world):
        with world.lock:
            world.open -= 1

    return SimpleEnv(
        name="parser",
        description="a non-thread-safe engine",
        sample=lambda rng, d: TaskSpec("Look twice.", {"n": rng.randrange(10**6)}),
        build=build,
        tools=tools,
        verify=lambda task, world, answer: (world.enter(), Verdict.of(True))[1],
        oracle=lambda task: [ToolCall("look", {}), ToolCall("finish", {"answer": "x"})],
        teardown=teardown,
        **flags,
    )


LOOK = '{"name": "look", "arguments": {}}'
FINISH = '{"name": "finish", "arguments": {"answer": "done"}}'


def play(env):
    model = FakeModel(script=[LOOK, LOOK, FINISH])
    tasks = env.tasks("train", 12)
    return rollout(env, tasks, Agent(model="fake", max_turns=6), model, RolloutConfig(8))


def test_a_non_thread_safe_env_is_never_entered_by_two_threads():
    engine = Engine()
    episodes = play(make_env(engine, thread_safe=False))
    assert len(episodes) == 12 and all(t.error is None for t in episodes)
    assert engine.overlaps == 0
    assert engine.most_open > 1  # the episodes still interleave


def test_max_sessions_caps_the_worlds_open_at_once():
    engine = Engine()
    play(make_env(engine, max_sessions=2))
    assert engine.most_open <= 2


def test_thread_safe_envs_are_not_wrapped():
    env = make_env(Engine())
    assert guarded(env) is env
    wrapped = guarded(replace(env, thread_safe=False))
    assert wrapped is not env and wrapped.name == "parser" and wrapped.max_difficulty == 5


def test_the_wrapper_reads_as_the_env_does_for_every_optional_member():
    def from_params(params):
        return TaskSpec(instruction=f"parse {params['text']}", params=params)

    env = replace(
        make_env(Engine()),
        thread_safe=False,
        policy="Parse only what you are given.",
        task_from_params=from_params,
        params_schema={"type": "object", "required": ["text"]},
        max_sessions=3,
    )
    wrapped = guarded(env)
    assert policy_of(wrapped) == "Parse only what you are given."
    assert params_schema_of(wrapped) == {"type": "object", "required": ["text"]}
    assert max_sessions_of(wrapped) == 3 and thread_safe_of(wrapped)
    build = task_builder(wrapped)
    assert build is not None and build({"text": "a"}).instruction == "parse a"
    assert set(left_out(wrapped)) == {*left_out(env), "thread_safe"}  # it is thread safe now
