"""A complete Ratchet env: a key-value store the agent must update.

Check it with ``ratchet check examples/kv_env.py:env``, or register it by name with
``ratchet.register_env("example/kv", "kv_env:env")`` (with this folder on ``sys.path``) or from
a package's entry points.
"""

import random

from ratchet import SimpleEnv, Task, TaskSpec, ToolCall, Verdict

KEYS = ["colour", "city", "pet", "fruit", "planet", "tree", "metal", "sport"]
VALUES = ["red", "blue", "oslo", "lima", "cat", "owl", "plum", "kiwi", "mars", "oak", "gold"]


def sample(rng: random.Random, difficulty: int) -> TaskSpec:
    """Draw a task: set `difficulty` keys to values."""
    goal = {key: rng.choice(VALUES) for key in rng.sample(KEYS, difficulty)}
    wants = ", ".join(f"{k} to {v}" for k, v in goal.items())
    return TaskSpec(f"Set {wants}, then call finish.", {"goal": goal})


def tools(store: dict[str, str]) -> list:
    def put(key: str, value: str) -> str:
        """Store a value under a key.

        Args:
            key: The key.
            value: The value to store.
        """
        store[key] = value
        return "ok"

    return [put]


def verify(task: Task, store: dict[str, str], answer: str | None) -> Verdict:
    """Pass only if the store holds exactly the goal (the answer text is ignored)."""
    return Verdict.of(store == task.params["goal"], f"store is {store}")


def oracle(task: Task) -> list[ToolCall]:
    """One put per goal key, then finish."""
    puts = [ToolCall("put", {"key": k, "value": v}) for k, v in task.params["goal"].items()]
    return [*puts, ToolCall("finish", {"answer": "done"})]


env = SimpleEnv(
    name="example/kv",
    description="Set keys in a key-value store.",
    sample=sample,
    build=lambda task: {},
    tools=tools,
    verify=verify,
    oracle=oracle,
)
