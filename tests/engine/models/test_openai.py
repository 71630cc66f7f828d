import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ratchet.core.tool import ToolCall
from ratchet.engine.models import ModelError, Prompt, Sampling, make_model
from ratchet.engine.models.openai import OpenAIModel
from ratchet.engine.models.openai_messages import parse_tool_calls, text_messages

ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


@dataclass
class Reply:
    """What the fake server answers to one request."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False
    delay_s: float = 0.0
    raw: bytes | None = None


def ok(content: str | None = "hi", tool_calls: list[Any] | None = None) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return Reply(
        body={
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
        }
    )


def error(status: int, message: str, **headers: str) -> Reply:
    return Reply(status, {"error": {"message": message, "type": "invalid_request_error"}}, headers)


Script = Callable[[int, dict[str, Any]], Reply]


class FakeServer:
    """An OpenAI-like server on loopback whose replies come from a script."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.release = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    index = len(server.requests)
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    reply = server.script(index, body)
                    if reply.hang:
                        server.release.wait(10)
                    else:
                        time.sleep(reply.delay_s)
                finally:
                    # Leave the count before replying: once the reply is out, the client may
                    # send its next request before this thread runs again.
                    with server._lock:
                        server.in_flight -= 1
                if reply.hang:
                    return
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Script], FakeServer]]:
    servers: list[FakeServer] = []

    def start(script: Script) -> FakeServer:
        servers.append(FakeServer(script))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def model_for(server: FakeServer, **options: Any) -> OpenAIModel:
    defaults: dict[str, Any] = {"backoff_base_s": 0.001, "max_backoff_s": 0.5, "timeout_s": 5}
    return OpenAIModel("test-model", base_url=server.url, **{**defaults, **options})


def ask(text: str = "hello", tools: tuple[dict[str, Any], ...] = ()) -> Prompt:
    return Prompt(({"role": "user", "content": text},), tools)


def test_plain_reply_with_token_counts_and_request_fields(serve, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = serve(lambda i, body: ok("hello back"))
    model = model_for(server)
    [completion] = model.complete([ask()], Sampling(temperature=0.3, max_tokens=17, seed=5))
    assert completion.text == "hello back"
    assert completion.error is None
    assert (completion.prompt_tokens, completion.completion_tokens) == (11, 3)
    assert completion.metadata["finish_reason"] == "stop"
    sent = server.requests[0]
    assert sent["model"] == "test-model"
    assert (sent["temperature"], sent["max_tokens"], sent["seed"]) == (0.3, 17, 5)
    assert sent["messages"] == [{"role": "user", "content": "hello"}]
    assert "tools" not in sent
    assert "authorization" not in {k.lower() for k in server.headers[0]}


def test_api_key_comes_from_the_named_environment_variable(serve, monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-test")
    server = serve(lambda i, body: ok())
    model_for(server, api_key_env="MY_KEY").complete([ask()], Sampling())
    assert server.headers[0]["Authorization"] == "Bearer sk-test"


def test_make_model_builds_the_backend_with_its_reference_as_name(serve):
    server = serve(lambda i, body: ok())
    model = make_model("openai:org/some-model", base_url=server.url + "/")
    assert isinstance(model, OpenAIModel)
    assert model.name == "openai:org/some-model"
    model.complete([ask()], Sampling())
    assert server.requests[0]["model"] == "org/some-model"


def test_429_honours_retry_after_then_succeeds(serve):
    server = serve(
        lambda i, body: error(429, "slow down", **{"Retry-After": "0.2"}) if i == 0 else ok()
    )
    [completion] = model_for(server).complete([ask()], Sampling())
    assert completion.error is None
    assert completion.text == "hi"
    assert completion.metadata["attempts"] == 2
    assert completion.metadata["retry_wait_s"] == pytest.approx(0.2)


def test_500s_are_retried_until_success(serve):
    server = serve(lambda i, body: error(503, "overloaded") if i < 3 else ok("finally"))
    [completion] = model_for(server).complete([ask()], Sampling())
    assert completion.text == "finally"
    assert completion.metadata["attempts"] == 4
    assert len(server.requests) == 4


def test_persistent_500s_give_up_after_max_retries_with_the_server_message(serve):
    server = serve(lambda i, body: error(500, "GPU on fire"))
    [completion] = model_for(server, max_retries=2).complete([ask()], Sampling())
    assert completion.text == ""
    assert completion.error is not None
    assert "3 attempts" in completion.error
    assert "HTTP 500" in completion.error
    assert "GPU on fire" in completion.error
    assert len(server.requests) == 3


def test_a_hanging_request_times_out_and_is_retried(serve):
    server = serve(lambda i, body: Reply(hang=True) if i == 0 else ok("after timeout"))
    # The first request hangs for the whole timeout, so this test takes that long; the second
    # must be answered within it, which a loaded machine might not do in a fraction of a second.
    [completion] = model_for(server, timeout_s=2).complete([ask()], Sampling())
    assert completion.text == "after timeout"
    assert completion.metadata["attempts"] == 2


def test_400_is_not_retried_and_reports_the_server_error(serve):
    server = serve(lambda i, body: error(400, "max_tokens is too large: 99999"))
    [completion] = model_for(server).complete([ask()], Sampling())
    assert completion.error is not None
    assert "HTTP 400" in completion.error
    assert "max_tokens is too large" in completion.error
    assert len(server.requests) == 1


def test_404_error_hints_at_the_base_url(serve):
    server = serve(lambda i, body: Reply(404, {"detail": "Not Found"}))
    [completion] = model_for(server).complete([ask()], Sampling())
    assert completion.error is not None
    assert "Not Found" in completion.error
    assert "--base-url" in completion.error


def test_connection_refused_everywhere_raises_model_error_naming_the_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    model = OpenAIModel("m", base_url=url, max_retries=2, backoff_base_s=0.001)
    with pytest.raises(ModelError, match="--base-url") as caught:
        model.complete([ask(), ask(), ask()], Sampling())
    assert url in str(caught.value)


def test_native_tool_calls_are_parsed_and_tools_sent_with_required_choice(serve):
    call = {
        "id": "call_7",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
    }
    server = serve(lambda i, body: ok(None, [call]))
    [completion] = model_for(server).complete([ask(tools=(ADD_TOOL,))], Sampling())
    assert completion.tool_calls == (ToolCall("add", {"a": 2, "b": 3}, "call_7"),)
    assert completion.text == ""
    assert server.requests[0]["tools"] == [ADD_TOOL]
    assert server.requests[0]["tool_choice"] == "required"


def test_undecodable_tool_arguments_are_kept_as_raw_text(serve):
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 2, "b": '},
    }
    server = serve(lambda i, body: ok(None, [call]))
    [completion] = model_for(server).complete([ask(tools=(ADD_TOOL,))], Sampling())
    assert completion.tool_calls == ()
    assert '{"a": 2, "b": ' in completion.text
    assert completion.error is None


def test_parse_tool_calls_accepts_object_and_empty_arguments():
    calls, raw = parse_tool_calls(
        [
            {"id": "a", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}},
            {"function": {"name": "finish", "arguments": ""}},
        ]
    )
    assert raw == ""
    assert calls == (ToolCall("add", {"a": 1, "b": 2}, "a"), ToolCall("finish", {}, "call_1"))
    calls, raw = parse_tool_calls([{"id": "a", "function": {"name": "add", "arguments": "[1, 2]"}}])
    assert calls == ()
    assert "[1, 2]" in raw


def test_required_tool_choice_falls_back_to_auto_and_remembers(serve):
    def script(i: int, body: dict[str, Any]) -> Reply:
        if body.get("tool_choice") == "required":
            return error(400, 'tool_choice="required" is not supported')
        return ok('{"name": "add", "arguments": {"a": 1, "b": 1}}')

    server = serve(script)
    model = model_for(server)
    [first] = model.complete([ask(tools=(ADD_TOOL,))], Sampling())
    assert first.error is None
    assert first.metadata["tool_mode"] == "auto"
    model.complete([ask(tools=(ADD_TOOL,))], Sampling())
    assert [r["tool_choice"] for r in server.requests] == ["required", "auto", "auto"]


def test_server_without_tool_support_switches_to_text_mode(serve):
    def script(i: int, body: dict[str, Any]) -> Reply:
        if "tools" in body:
            return error(400, "registry.ollama.ai/library/gemma:2b does not support tools")
        return ok('{"name": "add", "arguments": {"a": 1, "b": 1}}')

    server = serve(script)
    model = model_for(server)
    [first] = model.complete([ask(tools=(ADD_TOOL,))], Sampling())
    assert first.text == '{"name": "add", "arguments": {"a": 1, "b": 1}}'
    assert first.tool_calls == ()
    assert model.tool_mode == "text"
    model.complete([ask(tools=(ADD_TOOL,))], Sampling())
    assert ["tools" in r for r in server.requests] == [True, False, False]
    system = server.requests[-1]["messages"][0]
    assert system["role"] == "system"
    assert '"name": "<tool name>"' in system["content"]
    assert "add" in system["content"]


def test_text_mode_sends_schemas_in_the_system_message_and_converts_tool_turns(serve):
    server = serve(lambda i, body: ok('{"name": "finish", "arguments": {"answer": "5"}}'))
    conversation = (
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "Add 2 and 3."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [ToolCall("add", {"a": 2, "b": 3}, "call_1").to_openai()],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    )
    model = model_for(server, native_tools=False)
    [completion] = model.complete([Prompt(conversation, (ADD_TOOL,))], Sampling())
    assert completion.text == '{"name": "finish", "arguments": {"answer": "5"}}'
    sent = server.requests[0]
    assert "tools" not in sent and "tool_choice" not in sent
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert sent["messages"][0]["content"].startswith("You are careful.")
    assert "Add two numbers." in sent["messages"][0]["content"]
    assert json.loads(sent["messages"][2]["content"]) == {
        "name": "add",
        "arguments": {"a": 2, "b": 3},
    }
    assert "add" in sent["messages"][3]["content"] and "5" in sent["messages"][3]["content"]
    assert all(set(m) == {"role", "content"} for m in sent["messages"])


def test_text_messages_merge_consecutive_tool_results_and_keep_text_calls_once():
    rendered = '{"name": "add", "arguments": {"a": 1, "b": 2}}'
    messages = text_messages(
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": rendered,
                "tool_calls": [ToolCall("add", {"a": 1, "b": 2}, "x").to_openai()],
            },
            {"role": "tool", "tool_call_id": "x", "content": "3"},
            {"role": "tool", "tool_call_id": "x", "content": "again 3"},
        ],
        [ADD_TOOL],
    )
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[2]["content"] == rendered
    assert "3" in messages[3]["content"] and "again 3" in messages[3]["content"]


def test_native_mode_sends_tool_turns_as_they_are(serve):
    server = serve(lambda i, body: ok("done"))
    conversation = (
        {"role": "user", "content": "Add."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [ToolCall("add", {"a": 1}, "c").to_openai()],
        },
        {"role": "tool", "tool_call_id": "c", "content": "1"},
    )
    model_for(server).complete([Prompt(conversation, (ADD_TOOL,))], Sampling())
    assert server.requests[0]["messages"] == list(conversation)


def held_until(slots: int, script: Script) -> Script:
    """``script``, but the first ``slots`` requests are answered only once all have arrived.

    So a test sees every slot of a concurrency bound in use at once, however late a client
    thread starts; should they never all arrive, the first waits 30 s (a hang guard) and the
    rest go on at once.
    """
    full = threading.Event()
    arrivals = itertools.count(1)

    def held(i: int, body: dict[str, Any]) -> Reply:
        if next(arrivals) >= slots or not full.wait(30):
            full.set()
        return script(i, body)

    return held


def test_concurrency_is_bounded_and_order_preserved(serve):
    def script(i: int, body: dict[str, Any]) -> Reply:
        number = int(body["messages"][0]["content"])
        # Earlier prompts answer later, so completion order differs from prompt order.
        reply = ok(f"echo {number}")
        reply.delay_s = 0.02 * (12 - number) / 12 + 0.05
        return reply

    server = serve(held_until(3, script))
    model = model_for(server, max_concurrency=3, timeout_s=60)
    completions = model.complete([ask(str(n)) for n in range(12)], Sampling(seed=100))
    assert [c.text for c in completions] == [f"echo {n}" for n in range(12)]
    assert server.max_in_flight == 3
    assert sorted(r["seed"] for r in server.requests) == list(range(100, 112))


def test_concurrency_bound_holds_across_concurrent_callers(serve):
    def script(i: int, body: dict[str, Any]) -> Reply:
        reply = ok("x")
        reply.delay_s = 0.05
        return reply

    server = serve(held_until(2, script))
    model = model_for(server, max_concurrency=2, timeout_s=60)
    callers = [
        threading.Thread(target=model.complete, args=([ask(), ask()], Sampling())) for _ in range(4)
    ]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert len(server.requests) == 8
    assert server.max_in_flight == 2


def test_malformed_success_body_becomes_a_completion_error(serve):
    server = serve(lambda i, body: Reply(200, {"unexpected": True}))
    [completion] = model_for(server).complete([ask()], Sampling())
    assert completion.error is not None
    assert "malformed response" in completion.error


@pytest.mark.parametrize("options", [{"max_concurrency": 0}, {"timeout_s": 0}, {"max_retries": -1}])
def test_bad_options_are_rejected(options):
    with pytest.raises(ValueError):
        OpenAIModel("m", base_url="http://127.0.0.1:9/v1", **options)


def test_base_url_defaults_to_the_environment_then_the_openai_api(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1/")
    assert OpenAIModel("m").base_url == "http://127.0.0.1:8000/v1"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert OpenAIModel("m").base_url == "https://api.openai.com/v1"


@pytest.mark.parametrize(
    "tool_calls",
    [5, "garbage", {"function": {"name": "add"}}, [1, 2], [{"function": 3}],
     [{"function": {"name": {"x": 1}, "arguments": [1]}}], [None]],
)  # fmt: skip
def test_a_malformed_tool_calls_field_becomes_a_malformed_action(serve, tool_calls):
    from ratchet.engine.harness import act
    from ratchet.envs.calc import env

    server = serve(lambda i, body: ok(None, tool_calls=tool_calls))
    [completion] = model_for(server).complete([ask(tools=(ADD_TOOL,))], Sampling())
    assert completion.error is None and completion.tool_calls == ()
    session = env.session(env.tasks("test", 1)[0])
    session.reset()
    step, _ = act(session, completion, turn=0)
    assert step.observation.error and not step.observation.done


@pytest.mark.parametrize("count", ["1e999", "-1e999", '"12"', "-3", "1e20", "true", "2.5", "[1]"])
def test_a_garbage_token_count_becomes_a_completion_error(serve, count):
    body = (
        '{"choices": [{"message": {"role": "assistant", "content": "hi"}}], '
        f'"usage": {{"prompt_tokens": {count}, "completion_tokens": 1}}}}'
    )
    server = serve(lambda i, request: Reply(raw=body.encode()))
    [completion] = model_for(server).complete([ask()], Sampling())
    assert completion.error is not None and "usage.prompt_tokens" in completion.error


def test_a_huge_reply_is_truncated_before_it_is_stored(serve):
    from ratchet.engine.models.openai import MAX_REPLY_CHARS

    server = serve(lambda i, body: ok("x" * 30_000_000))
    [completion] = model_for(server).complete([ask()], Sampling())
    assert completion.error is None and completion.metadata["truncated"]
    assert MAX_REPLY_CHARS <= len(completion.text) < MAX_REPLY_CHARS + 100
    huge_call = {
        "id": "c",
        "function": {"name": "add", "arguments": json.dumps({"a": "9" * 200_000})},
    }
    server = serve(lambda i, body: ok(None, tool_calls=[huge_call]))
    [completion] = model_for(server).complete([ask(tools=(ADD_TOOL,))], Sampling())
    assert completion.tool_calls == () and len(completion.text) < MAX_REPLY_CHARS + 100


def test_a_body_over_the_size_cap_is_a_completion_error(serve, monkeypatch):
    import ratchet.engine.models.openai as openai_module

    monkeypatch.setattr(openai_module, "MAX_RESPONSE_BYTES", 10_000)
    server = serve(lambda i, body: ok("x" * 20_000))
    [completion] = model_for(server).complete([ask()], Sampling())
    assert completion.error is not None and "over" in completion.error


def test_a_gzipped_reply_is_read(serve):
    import gzip

    payload = gzip.compress(json.dumps(ok("zipped").body).encode())
    server = serve(lambda i, body: Reply(raw=payload, headers={"Content-Encoding": "gzip"}))
    [completion] = model_for(server).complete([ask()], Sampling())
    assert completion.error is None and completion.text == "zipped"


class Trickler:
    """A server that sends its reply (or its headers too) one byte every half second."""

    def __init__(self, headers_too: bool) -> None:
        self.sent = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.stop = threading.Event()
        body = json.dumps(ok("slow").body).encode()
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n"
        self.slow, self.fast = (head.encode() + body, b"") if headers_too else (body, head.encode())
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        connection, _ = self.listener.accept()
        with connection:
            connection.recv(65_536)
            connection.sendall(self.fast)
            for byte in self.slow:
                if self.stop.wait(0.5):
                    return
                connection.sendall(bytes([byte]))
                self.sent += 1

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.mark.parametrize("headers_too", [False, True])
def test_a_trickling_server_hits_the_total_deadline(headers_too):
    server = Trickler(headers_too)
    try:
        model = OpenAIModel("m", base_url=server.url, timeout_s=1.5, max_retries=0)
        [completion] = model.complete([ask()], Sampling())
    finally:
        server.close()
    assert completion.error is not None and "within 1.5 s" in completion.error
    assert server.sent < len(server.slow)


def test_a_prompt_narrowed_to_some_tools_offers_only_those(serve):
    call = {"id": "c", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    server = serve(lambda i, body: ok(None, [call]))
    other = {**ADD_TOOL, "function": {**ADD_TOOL["function"], "name": "finish"}}
    narrowed = replace(ask(tools=(ADD_TOOL, other)), reply_tools=(ADD_TOOL,))
    model_for(server).complete([narrowed], Sampling())
    assert server.requests[0]["tools"] == [ADD_TOOL]
