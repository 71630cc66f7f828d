"""A tiny OpenEnv environment server: guess a secret number, told "higher" or "lower".

Built with OpenEnv's own ``create_app``; it has the Task API (``train``, ``validation`` and
``test`` splits of fixed secrets), so a client resets it with ``split`` and ``index``. The
episode ends with reward 1 on the right guess, or reward 0 after ``MAX_GUESSES`` wrong ones.

    python examples/servers/guess_openenv.py --port 8000
"""

import argparse
import random
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

MAX_GUESSES = 7
_rng = random.Random(11)
SECRETS = {
    split: [_rng.randint(1, 100) for _ in range(size)]
    for split, size in (("train", 30), ("validation", 12), ("test", 12))
}


class GuessAction(Action):
    """One guess."""

    guess: int = Field(..., ge=1, le=100, description="Your guess, from 1 to 100")


class GuessObservation(Observation):
    """What the game says."""

    message: str = Field(default="", description="The game's answer")


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    """One game; a new instance per WebSocket session."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self._secret = 50

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        split: str = "train",
        index: int = 0,
        **kwargs: Any,
    ) -> GuessObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        self._secret = SECRETS[split][index]
        return GuessObservation(message="I picked a number from 1 to 100.", reward=None)

    def step(
        self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any
    ) -> GuessObservation:  # type: ignore[override]
        self._state.step_count += 1
        if action.guess == self._secret:
            return GuessObservation(message="Correct!", done=True, reward=1.0)
        hint = "higher" if action.guess < self._secret else "lower"
        over = self._state.step_count >= MAX_GUESSES
        message = "Out of guesses." if over else f"{hint.capitalize()}."
        return GuessObservation(message=message, done=over, reward=0.0)

    @property
    def state(self) -> State:
        return self._state

    # The Task API: the server's own task lists (no secrets: a client could show them).
    def list_splits(self) -> list[str]:
        return list(SECRETS)

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        return [self.get_task(split, index) for index in range(len(SECRETS[split]))]

    def num_tasks(self, split: str) -> int:
        return len(SECRETS[split])

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        return {
            "id": f"{split}-{index}",
            "index": index,
            "prompt": f"Guess my secret number (game {split}-{index}) with the step tool: "
            f"give one guess at a time; I say higher or lower.",
        }


app = create_app(
    GuessEnvironment, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=16
)


if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8000)
    uvicorn.run(app, host="127.0.0.1", port=parser.parse_args().port)
