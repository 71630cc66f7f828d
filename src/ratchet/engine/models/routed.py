"""One model on several servers: least-loaded routing that keeps a conversation on one server.

``--base-url URL1,URL2,...`` gives the ``openai`` backend one
:class:`~ratchet.engine.models.openai.OpenAIModel` per server (each bounding its own requests in
flight). A new conversation (a :class:`~ratchet.engine.models.base.Prompt` ``key`` not seen
before, i.e. a new episode) goes to the server with the fewest requests in flight (ties: the one
that has started the fewest conversations); its later turns go to the same server, whose prefix
cache then holds the conversation so far. A server that cannot be reached is left out from then
on and its conversations move to the others.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from ratchet.engine.models.base import Completion, Model, ModelError, Prompt, Sampling

_REMEMBERED = 100_000


class RoutedModel:
    """Routes each conversation to one of several servers of the same model.

    Args:
        models: One backend per server (all serving the same model).

    Attributes:
        name: The model reference (the first server's).
        models: The backends.
        load: Requests in flight per server.
        started: Conversations started per server.

    Raises:
        ValueError: If ``models`` is empty.
    """

    def __init__(self, models: Sequence[Model]) -> None:
        if not models:
            raise ValueError("a routed model needs at least one server")
        self.name = models[0].name
        self.models = list(models)
        self.load = [0] * len(models)
        self.started = [0] * len(models)
        self._down: set[int] = set()
        self._homes: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def complete(self, prompts: Sequence[Prompt], sampling: Sampling) -> list[Completion]:
        """Complete each prompt on its conversation's server, concurrently.

        Raises:
            ModelError: If no server can be reached.
        """
        if len(prompts) == 1:
            return [self._complete_one(prompts[0], sampling)]
        with ThreadPoolExecutor(max(1, min(len(prompts), 32)), "ratchet-route") as pool:
            return list(pool.map(lambda prompt: self._complete_one(prompt, sampling), prompts))

    def _complete_one(self, prompt: Prompt, sampling: Sampling) -> Completion:
        while True:
            server = self._route(prompt.key)
            try:
                completion = self.models[server].complete([prompt], sampling)[0]
            except ModelError:
                with self._lock:
                    self._down.add(server)
                    if len(self._down) == len(self.models):
                        raise
                continue
            finally:
                with self._lock:
                    self.load[server] -= 1
            completion.metadata["server"] = server
            return completion

    def _route(self, key: str | None) -> int:
        """The conversation's server (a new one goes to the least loaded); counts it in flight."""
        with self._lock:
            home = self._homes.get(key) if key is not None else None
            if home is None or home in self._down:
                up = [i for i in range(len(self.models)) if i not in self._down]
                home = min(up, key=lambda i: (self.load[i], self.started[i], i))
                self.started[home] += 1
                if key is not None:
                    self._homes[key] = home
            if key is not None:
                self._homes.move_to_end(key)
                while len(self._homes) > _REMEMBERED:
                    self._homes.popitem(last=False)
            self.load[home] += 1
            return home
