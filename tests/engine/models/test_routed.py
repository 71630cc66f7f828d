import threading
import time

import pytest

from ratchet.engine.models import make_model
from ratchet.engine.models.base import Completion, ModelError, Prompt, Sampling
from ratchet.engine.models.openai import OpenAIModel
from ratchet.engine.models.routed import RoutedModel


class Server:
    """A fake server: records which conversations it saw; can be slow or unreachable."""

    name = "openai:m"

    def __init__(self, delay_s=0.0, down=False):
        self.delay_s, self.down, self.seen = delay_s, down, []

    def complete(self, prompts, sampling):
        if self.down:
            raise ModelError("cannot reach the model server")
        time.sleep(self.delay_s)
        self.seen.extend(p.key for p in prompts)
        return [Completion("ok") for _ in prompts]


def prompt(key):
    return Prompt(({"role": "user", "content": "hi"},), key=key)


def test_a_conversation_stays_on_the_server_it_started_on():
    servers = [Server(), Server(), Server()]
    model = RoutedModel(servers)
    for _turn in range(3):
        for episode in range(6):
            model.complete([prompt(f"e{episode}")], Sampling())
    homes = [{key for key in s.seen} for s in servers]
    assert all(len(h) == 2 for h in homes)  # six episodes spread two per server
    assert set.union(*homes) == {f"e{i}" for i in range(6)}
    assert all(len(s.seen) == 6 for s in servers)  # every turn went home


def test_new_conversations_go_to_the_least_loaded_server():
    entered, release = threading.Event(), threading.Event()

    class Holding(Server):
        """Holds the conversation "long" until the test releases it, however long that takes."""

        def complete(self, prompts, sampling):
            if any(p.key == "long" for p in prompts):
                entered.set()
                release.wait(30)  # a hang guard: the test releases it
            return super().complete(prompts, sampling)

    model = RoutedModel([Holding(), Holding()])
    busy = threading.Thread(target=model.complete, args=([prompt("long")], Sampling()))
    busy.start()
    assert entered.wait(30)  # "long" is in flight on one server now
    for episode in range(3):
        model.complete([prompt(f"e{episode}")], Sampling())
    release.set()
    busy.join(30)
    home, other = sorted(model.models, key=lambda server: "long" not in server.seen)
    assert home.seen == ["long"] and sorted(other.seen) == ["e0", "e1", "e2"]
    assert model.load == [0, 0]


def test_an_unreachable_server_is_left_out_and_all_down_raises():
    up, down = Server(), Server(down=True)
    model = RoutedModel([down, up])
    results = model.complete([prompt(f"e{i}") for i in range(4)], Sampling())
    assert [r.text for r in results] == ["ok"] * 4 and len(up.seen) == 4
    with pytest.raises(ModelError):
        RoutedModel([Server(down=True)]).complete([prompt("x")], Sampling())


def test_several_base_urls_make_a_routed_openai_model():
    model = make_model("openai:m", base_url="http://127.0.0.1:1/v1, http://127.0.0.1:2/v1")
    assert isinstance(model, RoutedModel) and model.name == "openai:m"
    assert [m.base_url for m in model.models] == ["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"]
    assert isinstance(make_model("openai:m", base_url="http://127.0.0.1:1/v1"), OpenAIModel)
