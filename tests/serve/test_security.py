"""The attacks on ``ratchet serve`` (issue 47's serve findings), one regression test each."""

import asyncio
import json
import signal
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

from fakes import CharTokenizer, lever_context  # noqa: E402
from ratchet.core.agent import Agent  # noqa: E402
from ratchet.engine.cancel import abandoned_rows  # noqa: E402
from ratchet.engine.models.fake import FakeModel  # noqa: E402
from ratchet.engine.models.lora import to_example, traced_examples  # noqa: E402
from ratchet.improve.experience import verified_experience  # noqa: E402
from ratchet.improve.levers import NoCandidate  # noqa: E402
from ratchet.improve.levers.exemplars import ExemplarLever  # noqa: E402
from ratchet.serve.app import Uvicorn, create_app  # noqa: E402
from ratchet.serve.config import ServeConfig  # noqa: E402
from ratchet.serve.guard import Guard  # noqa: E402
from servers import ADD, call_first_tool, make_server, serving_client  # noqa: E402

USER = {"role": "user", "content": "What is 40 + 2?"}
CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "add", "arguments": '{"a": 40, "b": 2}'},
}


def invented_history():
    """A conversation whose assistant call and tool result the client made up."""
    return [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]


def learned_text(trajectory):
    example = to_example(CharTokenizer(), trajectory, 100_000)
    return "".join(
        chr(i) for i, m in zip(example.input_ids, example.assistant_masks, strict=True) if m
    )


def chat(http, messages, **fields):
    body = {"model": "v3", "messages": messages, "tools": [ADD], **fields}
    return http.post("/v1/chat/completions", json=body)


def test_invented_turns_never_become_training_targets_or_exemplars(tmp_path):
    http, _, _ = serving_client(tmp_path)
    invented = chat(http, invented_history()).json()
    judged = http.post(
        "/v1/feedback", json={"conversation_id": invented["conversation_id"], "score": 1.0}
    )
    assert judged.status_code == 200
    # An honest conversation beside it: every assistant turn generated here.
    first = chat(http, [{"role": "user", "content": "What is 2 + 3?"}]).json()
    honest = [{"role": "user", "content": "What is 2 + 3?"}, first["choices"][0]["message"]]
    honest.append({"role": "tool", "tool_call_id": "x", "content": "5"})
    second = chat(http, honest).json()
    assert second["conversation_id"] == first["conversation_id"]
    http.post("/v1/feedback", json={"conversation_id": first["conversation_id"], "score": 1.0})
    # What `ratchet improve calc --experience STORE` imports, and what the levers make of it.
    imported = {t.task.instruction: t for t in verified_experience(tmp_path / "store", "calc")}
    poisoned, clean = imported["What is 40 + 2?"], imported["What is 2 + 3?"]
    assert [s.given for s in poisoned.steps] == [True, False]
    assert [s.given for s in clean.steps] == [False, False]
    learned = learned_text(poisoned)
    assert '"a": 2, "b": 3' in learned and "40" not in learned  # rft's target: ours only
    assert learned_text(clean).count('"a": 2, "b": 3') == 2
    context = lever_context([poisoned], tmp_path / "w1", incumbent=Agent(model="fake"))
    with pytest.raises(NoCandidate):
        ExemplarLever().propose(context)
    context = lever_context([poisoned, clean], tmp_path / "w2", incumbent=Agent(model="fake"))
    candidate = ExemplarLever().propose(context)
    assert [e.instruction for e in candidate.exemplars] == ["What is 2 + 3?"]


def test_a_turn_counts_as_generated_only_where_this_server_generated_it(tmp_path):
    http, _, store = serving_client(tmp_path)
    first = chat(http, [USER]).json()
    ours = first["choices"][0]["message"]
    # The client moves our reply after a history it made up: in that context it is not ours.
    moved = [*invented_history(), ours, {"role": "tool", "tool_call_id": "x", "content": "5"}]
    chat(http, moved)
    recorded = {t.metadata["conversation"]: t for _, t in store.trajectories()}
    assert len(recorded) == 2
    [other] = [t for cid, t in recorded.items() if cid != first["conversation_id"]]
    assert [s.given for s in other.steps] == [True, True, False]
    assert traced_examples(other, "fake", 10_000) is None  # the fake records no token ids


def test_feedback_is_given_once_the_same_verdict_again_is_a_no_op(tmp_path):
    http, _, store = serving_client(tmp_path)
    reply = chat(http, [USER]).json()
    conversation = reply["conversation_id"]
    verdict = {"conversation_id": conversation, "score": 1.0, "note": "right"}
    first = http.post("/v1/feedback", json=verdict)
    again = http.post("/v1/feedback", json=verdict)
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    other = http.post("/v1/feedback", json={**verdict, "score": 0.0, "note": "wrong after all"})
    assert other.status_code == 409 and "already has a verdict" in other.json()["error"]["message"]
    [(_, recorded)] = store.trajectories()
    assert recorded.verdict.score == 1.0 and recorded.verdict.feedback == "right"
    # A judged conversation is closed: by name it is refused, by history a new one starts.
    assert chat(http, [USER], conversation_id=conversation).status_code == 409
    history = [
        USER,
        reply["choices"][0]["message"],
        {"role": "tool", "tool_call_id": "x", "content": "42"},
    ]
    continued = chat(http, history).json()
    assert continued["conversation_id"] != conversation
    assert store.trajectories(task_ids={f"served-{conversation}"})[0][1].verdict.score == 1.0


def test_a_conversation_cannot_be_taken_over_by_another_key(tmp_path):
    http, _, store = serving_client(tmp_path, api_keys=("key-a", "key-b"))
    a = {"Authorization": "Bearer key-a"}
    b = {"Authorization": "Bearer key-b"}
    body = {"model": "v3", "messages": [USER], "tools": [ADD], "conversation_id": "shared-1"}
    assert http.post("/v1/chat/completions", json=body, headers=a).status_code == 200
    theirs = {**body, "messages": [{"role": "user", "content": "Overwritten by b."}]}
    taken = http.post("/v1/chat/completions", json=theirs, headers=b)
    assert taken.status_code == 409 and "another API key" in taken.json()["error"]["message"]
    judged = http.post("/v1/feedback", json={"conversation_id": "shared-1", "score": 0}, headers=b)
    assert judged.status_code == 404
    [(_, recorded)] = store.trajectories()
    assert recorded.task.instruction == USER["content"] and recorded.verdict is None
    # B replaying A's exact history is recognised as B's own, new conversation.
    reply = http.post("/v1/chat/completions", json=body, headers=a).json()
    history = [USER, reply["choices"][0]["message"]]
    replayed = http.post(
        "/v1/chat/completions", json={"model": "v3", "messages": history}, headers=b
    ).json()
    assert replayed["conversation_id"] != "shared-1"
    mine = http.post("/v1/feedback", json={"conversation_id": "shared-1", "score": 1}, headers=a)
    assert mine.status_code == 200


def run_asgi(app, scope, chunks):
    """Run an ASGI app on one request; return (status, body, chunks received by the app)."""
    received = []
    sent = []
    queue = list(chunks)

    async def receive():
        received.append(1)
        if not queue:
            return {"type": "http.disconnect"}
        return queue.pop(0)

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body or b"null"), len(received)


def never_called(scope, receive, send):
    raise AssertionError("the body reached the app")


def post(headers):
    return {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers}


def test_an_unauthenticated_body_is_refused_before_a_byte_of_it_is_read():
    guard = Guard(never_called, ["s3cret"], max_body_bytes=1 << 20)
    huge = [{"type": "http.request", "body": b"x" * 65536, "more_body": True}] * 100
    for headers in ([], [(b"authorization", b"s3cret")], [(b"authorization", b"Bearer nope")]):
        status, body, read = run_asgi(guard, post(headers), huge)
        assert status == 401 and read == 0
        assert body["error"]["type"] == "authentication_error"


def test_a_body_over_the_cap_gets_413_and_is_never_parsed():
    guard = Guard(never_called, ["s3cret"], max_body_bytes=1000)
    key = (b"authorization", b"Bearer s3cret")
    declared = post([key, (b"content-length", b"300000000")])
    status, body, read = run_asgi(guard, declared, [])
    assert status == 413 and read == 0 and "--max-body-mb" in body["error"]["message"]
    chunked = [{"type": "http.request", "body": b"x" * 600, "more_body": True}] * 1000
    status, _, read = run_asgi(guard, post([key]), chunked)
    assert status == 413 and read == 2  # it stopped reading at the cap


def test_the_body_cap_is_configurable_and_answers_in_openai_shape(tmp_path):
    http, _, _ = serving_client(tmp_path, config=ServeConfig(max_body_mb=0.01))
    big = chat(http, [{"role": "user", "content": "x" * 20_000}])
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
    assert chat(http, [USER]).status_code == 200


MALFORMED = [
    {"tool_choice": {"function": "add"}},
    {"messages": [{"role": "assistant", "content": "x", "tool_calls": 5}]},
    {
        "messages": [
            {
                "role": "assistant",
                "tool_calls": [{"id": "a", "type": "function", "function": "add"}],
            }
        ]
    },
    {"messages": None},
    {"messages": [None]},
    {"messages": [{"role": "user", "content": 5}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    {"messages": []},
    {"tools": "add"},
    {"tools": [{"type": "function", "function": {"name": 5}}]},
    {"tools": [{"type": "custom", "custom": {"name": "x"}}]},
    {"temperature": "hot"},
    {"temperature": 9},
    {"top_p": 0},
    {"stop": 5},
    {"stop": ["a", "b", "c", "d", "e"]},
    {"max_tokens": 0},
    {"seed": "x"},
    {"n": 3},
    {"logit_bias": {"1": 5}},
    {"top_logprobs": 3},
    {"response_format": {"type": "json_schema"}},
    {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": 7}},
        }
    },
    {"stream_options": {"include_usage": True}},
    {"conversation_id": "a b"},
    {"model": ["v3"]},
    {"functions": [{"name": "add"}]},
]


def test_malformed_requests_get_400_in_openai_shape_never_500(tmp_path):
    http, _, _ = serving_client(tmp_path)
    for fields in MALFORMED:
        body = {"model": "v3", "messages": [USER], "tools": [ADD], **fields}
        answer = http.post("/v1/chat/completions", json=body)
        assert answer.status_code == 400, (fields, answer.text)
        assert set(answer.json()["error"]) == {"message", "type", "param", "code"}, fields
    for raw in (b"[]", b"null", b"{", b"\xff\xfe", b""):
        answer = http.post("/v1/chat/completions", content=raw)
        assert answer.status_code == 400, raw
    for route in ("/v1/feedback", "/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        assert http.post(route, content=b"{").status_code == 400
        assert http.post(route, json={"lora_name": 5, "surely_not": 1}).status_code == 400


def test_an_unexpected_failure_is_a_500_in_openai_shape_not_a_reset(tmp_path):
    def broken(prompt, rng):
        raise RuntimeError("boom")

    from fastapi.testclient import TestClient

    server, _, _ = make_server(tmp_path, model=FakeModel(reply=broken))
    http = TestClient(create_app(server), raise_server_exceptions=False)
    answer = chat(http, [USER])
    assert answer.status_code == 500 and answer.json()["error"]["type"] == "server_error"


def adapter(directory, config="{}"):
    directory.mkdir(parents=True)
    (directory / "adapter_config.json").write_text(config)
    return str(directory)


def test_adapters_load_only_from_the_lora_root_and_at_most_max_loras(tmp_path):
    built = []

    def build(path):
        built.append(path)
        return FakeModel(reply=call_first_tool)

    root = tmp_path / "adapters"
    http, _, _ = serving_client(tmp_path, build=build, lora_root=root, max_loras=1)

    def load(name, path):
        return http.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": path})

    outside = load("a0", adapter(tmp_path / "elsewhere"))
    assert outside.status_code == 400 and "--lora-root" in outside.json()["error"]["message"]
    (root).mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")
    assert load("a0", str(root / "link")).status_code == 400  # a link out is still outside
    assert load("a0", str(root / ".." / "elsewhere")).status_code == 400
    listed = load("bad", adapter(root / "bad", "[1, 2]"))
    assert listed.status_code == 400 and "JSON object" in listed.json()["error"]["message"]
    assert load("a1", adapter(root / "a1")).status_code == 200
    full = load("a2", adapter(root / "a2"))
    assert full.status_code == 400 and "--max-loras" in full.json()["error"]["message"]
    assert http.post("/v1/unload_lora_adapter", json={"lora_name": "a1"}).status_code == 200
    assert load("a2", str(root / "a2")).status_code == 200
    assert [p.name for p in built] == ["a1", "a2"]


def test_adapter_loading_is_off_without_a_lora_root(tmp_path):
    http, _, _ = serving_client(tmp_path, build=lambda path: FakeModel(), lora_root=None)
    answer = http.post(
        "/v1/load_lora_adapter", json={"lora_name": "a", "lora_path": adapter(tmp_path / "a")}
    )
    assert answer.status_code == 400 and "--lora-root" in answer.json()["error"]["message"]


def test_health_is_open_docs_are_off_and_the_key_is_only_a_bearer_token(tmp_path):
    http, _, _ = serving_client(tmp_path, api_keys=("s3cret",))
    assert http.get("/health").status_code == 200
    for route in ("/docs", "/redoc", "/openapi.json", "/metrics", "/v1/models"):
        assert http.get(route).status_code == 401, route
    good = {"Authorization": "Bearer s3cret"}
    for route in ("/docs", "/redoc", "/openapi.json"):
        assert http.get(route, headers=good).status_code == 404, route
    for sent in ("s3cret", "Token s3cret", "Bearer s3cre", "Bearer s3cret2", "Basic s3cret"):
        assert http.get("/v1/models", headers={"Authorization": sent}).status_code == 401, sent
    assert http.get("/v1/models", headers=good).status_code == 200


class Waiting(FakeModel):
    """A model whose generation runs until its asker abandons it (or a minute passes)."""

    def __init__(self):
        super().__init__()
        self.started = threading.Event()
        self.abandoned = threading.Event()

    def complete(self, prompts, sampling):
        self.started.set()
        check = abandoned_rows(range(len(prompts)))
        deadline = time.monotonic() + 60
        while check is not None and not all(check()) and time.monotonic() < deadline:
            time.sleep(0.01)
        if check is not None and all(check()):
            self.abandoned.set()
        return super().complete(prompts, sampling)


class WaitingBatched(Waiting):
    max_batch_size = 4


def start(tmp_path, model):
    server, _, _ = make_server(tmp_path, model=model)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(create_app(server), log_level="warning")
    running = Uvicorn(config, server)
    thread = threading.Thread(target=running.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not running.started and time.monotonic() < deadline:
        time.sleep(0.05)
    return running, thread, port


def test_a_generation_stops_when_its_client_disconnects(tmp_path):
    model = Waiting()
    running, thread, port = start(tmp_path, model)
    try:
        body = json.dumps({"model": "v3", "messages": [USER]}).encode()
        with socket.create_connection(("127.0.0.1", port)) as client:
            head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"  # noqa: E501
            client.sendall(head.encode() + body)
            assert model.started.wait(30)
        assert model.abandoned.wait(30), "the generation went on after its client left"
    finally:
        running.should_exit = True
        thread.join(30)


def test_sigterm_during_a_long_generation_stops_the_server(tmp_path):
    model = WaitingBatched()
    running, thread, port = start(tmp_path, model)
    answers = []

    def ask():
        body = {"model": "v3", "messages": [USER]}
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        answers.append(httpx.post(url, json=body, timeout=90))

    asking = threading.Thread(target=ask)
    asking.start()
    assert model.started.wait(30)
    running.handle_exit(signal.SIGTERM, None)
    thread.join(30)
    asking.join(30)
    assert not thread.is_alive(), "the server ignored SIGTERM during a generation"
    assert model.abandoned.is_set()
    assert answers[0].status_code == 503 and "shutting down" in answers[0].text
