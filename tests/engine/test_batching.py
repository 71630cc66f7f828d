"""The batcher drops requests abandoned before their batch runs and tells the backend the rest."""

import threading

import pytest

from ratchet.engine.batching import Batcher
from ratchet.engine.cancel import GenerationAbandoned, abandoned_rows
from ratchet.engine.models.base import Prompt, Sampling
from ratchet.engine.models.fake import FakeModel


class Watching(FakeModel):
    """A fake that notes, per call, which of its prompts were abandoned."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def complete(self, prompts, sampling):
        check = abandoned_rows(range(len(prompts)))
        self.seen.append(None if check is None else check())
        return super().complete(prompts, sampling)


def prompt(text):
    return Prompt(({"role": "user", "content": text},))


def test_an_abandoned_request_is_dropped_and_the_others_are_watched():
    model = Watching()
    batcher = Batcher(model, max_batch=4, max_wait_s=5)
    batcher.in_flight(3)
    gone = threading.Event()
    gone.set()
    results = {}

    def ask(name, abandoned):
        try:
            results[name] = batcher.complete(prompt(name), Sampling(), abandoned)
        except GenerationAbandoned as exc:
            results[name] = exc

    threads = [
        threading.Thread(target=ask, args=("left", gone.is_set)),
        threading.Thread(target=ask, args=("stayed", lambda: False)),
        threading.Thread(target=ask, args=("also", lambda: False)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert isinstance(results["left"], GenerationAbandoned)
    assert results["stayed"].text and results["also"].text
    assert model.seen == [[False, False]]


def test_requests_with_different_sampling_options_never_share_a_call():
    model = Watching()
    batcher = Batcher(model, max_batch=4, max_wait_s=0.2)
    batcher.in_flight(2)
    samplings = [Sampling(top_p=0.5), Sampling(reply_schema={"type": "object"})]
    threads = [
        threading.Thread(target=batcher.complete, args=(prompt(str(i)), sampling))
        for i, sampling in enumerate(samplings)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert model.calls == 2 and len(model.seen) == 2


@pytest.mark.parametrize("seed", [None, 3])
def test_seeds_alone_do_not_split_a_batch(seed):
    model = Watching()
    batcher = Batcher(model, max_batch=4, max_wait_s=5)
    batcher.in_flight(2)
    threads = [
        threading.Thread(target=batcher.complete, args=(prompt(str(i)), Sampling(seed=s)))
        for i, s in enumerate([seed, 9])
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(model.seen) == 1
