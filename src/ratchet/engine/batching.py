"""Batching the model calls of concurrent episodes, without lockstep.

Each episode runs :func:`ratchet.engine.harness.run_episode` on its own thread and asks for
one reply at a time. A CPU model is many times faster per token on a batch, so
:class:`Batcher` holds requests until every episode in flight is waiting for the model (or the
batch is full, or the oldest request has waited ``max_wait_s``) and then runs them as one call.
An episode busy in a slow env step therefore delays a batch by at most ``max_wait_s``, and it
joins the next batch when its step is done: episodes never wait for a whole turn of the others.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

from ratchet.engine.cancel import Abandoned, GenerationAbandoned, never, watching
from ratchet.engine.models.base import Completion, Model, Prompt, Sampling


@dataclass(eq=False)  # requests are compared by identity: two may carry the same prompt
class _Request:
    prompt: Prompt
    sampling: Sampling
    abandoned: Abandoned = never
    since: float = field(default_factory=time.perf_counter)
    result: Completion | None = None
    failure: BaseException | None = None


class Batcher:
    """Gathers single-prompt requests from episode threads into batched model calls.

    Args:
        model: The backend that completes batches.
        max_batch: Most prompts per call.
        max_wait_s: Longest a request waits for others before its batch runs anyway.
    """

    def __init__(self, model: Model, max_batch: int, max_wait_s: float = 0.05) -> None:
        self.model = model
        self.max_batch = max(1, max_batch)
        self.max_wait_s = max_wait_s
        self._pending: list[_Request] = []
        self._in_flight = 0
        self._running = False
        self._cond = threading.Condition()

    def in_flight(self, episodes: int) -> None:
        """Say how many episodes are running or about to start (the scheduler keeps this true).

        A batch runs once that many requests are pending, so episodes whose threads start a
        little late still join the first batch.
        """
        with self._cond:
            self._in_flight = episodes
            self._cond.notify_all()

    def complete(
        self, prompt: Prompt, sampling: Sampling, abandoned: Abandoned = never
    ) -> Completion:
        """Return the reply to ``prompt``, computed in a batch with other episodes' prompts.

        ``abandoned`` tells whether the asker has gone: a request abandoned before its batch
        runs is dropped, and a backend may stop generating it mid-batch (see
        :mod:`ratchet.engine.cancel`).

        Raises:
            GenerationAbandoned: If the request was dropped before its batch ran.
            Exception: Whatever the model raised for the batch (e.g. ``ModelError``).
        """
        request = _Request(prompt, sampling, abandoned)
        with self._cond:
            self._pending.append(request)
            self._cond.notify_all()
            while request.result is None and request.failure is None:
                if self._running or not self._ready():
                    self._cond.wait(timeout=self._wait_s())
                    continue
                batch = self._take()
                self._running = True
                self._cond.release()
                try:
                    self._run(batch)
                finally:
                    self._cond.acquire()
                    self._running = False
                    self._cond.notify_all()
        if request.failure is not None:
            raise request.failure
        assert request.result is not None  # the loop above exits only with one of the two set
        return request.result

    def _ready(self) -> bool:
        if not self._pending:
            return False
        everyone = len(self._pending) >= min(self._in_flight, self.max_batch)
        return everyone or time.perf_counter() - self._pending[0].since >= self.max_wait_s

    def _wait_s(self) -> float:
        if not self._pending:
            return self.max_wait_s
        return max(0.001, self.max_wait_s - (time.perf_counter() - self._pending[0].since))

    def _take(self) -> list[_Request]:
        """The oldest request and those that share its sampling settings, up to a full batch.

        Abandoned requests are dropped first; the batch is empty if every one was.
        """
        for request in [r for r in self._pending if r.abandoned()]:
            request.failure = GenerationAbandoned("the request was abandoned before it ran")
            self._pending.remove(request)
        if not self._pending:
            return []
        head = self._pending[0].sampling
        batch = [r for r in self._pending if _same(r.sampling, head)][: self.max_batch]
        self._pending = [r for r in self._pending if r not in batch]
        return batch

    def _run(self, batch: list[_Request]) -> None:
        if not batch:
            return
        try:
            with watching([r.abandoned for r in batch]):
                completions = self.model.complete([r.prompt for r in batch], batch[0].sampling)
        except BaseException as exc:  # every waiting episode sees the backend's failure
            for request in batch:
                request.failure = exc
            return
        for request, completion in zip(batch, completions, strict=True):
            request.result = completion


def _same(a: Sampling, b: Sampling) -> bool:
    """Whether two requests can share a call: seeds ride on prompts, the rest must agree."""
    return replace(a, seed=None) == replace(b, seed=None)
