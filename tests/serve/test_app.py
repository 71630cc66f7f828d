import json
import threading

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

from ratchet.core.agent import Agent  # noqa: E402
from ratchet.core.memory import Exemplar, Insight  # noqa: E402
from servers import (  # noqa: E402
    ADD,
    Recording,
    call_first_tool,
    client_for,
    serving_client,
)


class Batched(Recording):
    max_batch_size = 8
    batches: tuple[int, ...] = ()

    def complete(self, prompts, sampling):
        self.batches += (len(prompts),)
        return super().complete(prompts, sampling)


def make_server(tmp_path, api_key=None, **options):
    return serving_client(tmp_path, api_keys=(api_key,) if api_key else (), **options)


def test_the_openai_client_gets_a_tool_call_and_the_conversation_is_recorded(tmp_path):
    http, _, store = make_server(tmp_path)
    client = client_for(http)
    assert [m.id for m in client.models.list()] == ["v3"]
    messages = [{"role": "user", "content": "Add 2 and 3 with the tool."}]
    first = client.chat.completions.create(model="v3", messages=messages, tools=[ADD])
    call = first.choices[0].message.tool_calls[0]
    assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 2, "b": 3}
    assert first.choices[0].finish_reason == "tool_calls"
    conversation = first.conversation_id
    # The client continues the conversation: history, the call, its result.
    messages += [first.choices[0].message.model_dump(exclude_none=True)]
    messages += [{"role": "tool", "tool_call_id": call.id, "content": "5"}]
    second = client.chat.completions.create(model="v3", messages=messages, tools=[ADD])
    assert second.conversation_id == conversation
    [(_, recorded)] = store.trajectories()
    assert recorded.verdict is None and recorded.task.split == "train"
    assert recorded.task.family == "served" and recorded.task.problem == f"served:{conversation}"
    assert recorded.task.instruction == "Add 2 and 3 with the tool."
    assert [s.call.name for s in recorded.steps] == ["add", "add"]
    assert recorded.steps[0].observation.text == "5"
    assert recorded.messages[0]["role"] == "system"  # the agent's own system message


def test_feedback_attaches_a_verdict_and_unknown_conversations_are_refused(tmp_path):
    http, _, store = make_server(tmp_path)
    client = client_for(http)
    reply = client.chat.completions.create(
        model="v3", messages=[{"role": "user", "content": "Add 1 and 1."}], tools=[ADD]
    )
    answer = http.post(
        "/v1/feedback",
        json={"conversation_id": reply.conversation_id, "score": 1.0, "note": "right"},
    )
    assert answer.status_code == 200 and answer.json()["passed"] is True
    [(_, recorded)] = store.trajectories()
    assert recorded.passed and recorded.verdict.feedback == "right"
    missing = http.post("/v1/feedback", json={"conversation_id": "nope", "score": 0})
    assert (
        missing.status_code == 404
        and "no conversation 'nope'" in missing.json()["error"]["message"]
    )
    bad = http.post("/v1/feedback", json={"conversation_id": "x", "score": 2})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "score"


def test_a_named_conversation_keeps_its_id(tmp_path):
    http, _, store = make_server(tmp_path)
    body = {"model": "v3", "messages": [{"role": "user", "content": "hi"}], "tools": [ADD]}
    reply = http.post("/v1/chat/completions", json=body, headers={"X-Ratchet-Conversation": "t-1"})
    assert reply.headers["X-Ratchet-Conversation"] == "t-1"
    assert store.trajectories()[0][1].task.id == "served-t-1"
    bad = http.post("/v1/chat/completions", json={**body, "conversation_id": "a b"})
    assert bad.status_code == 400 and "conversation id" in bad.json()["error"]["message"]


def test_the_agents_memory_is_applied_as_in_episodes(tmp_path):
    demo = Exemplar(
        "calc",
        "add",
        1,
        "Add 4 and 4.",
        (
            {"role": "assistant", "content": '{"name": "add", "arguments": {"a": 4, "b": 4}}'},
            {"role": "tool", "content": "8"},
        ),
    )
    agent = Agent(version="v3", model="fake", insights=(Insight("Always add."),), exemplars=(demo,))
    http, model, _ = make_server(tmp_path, agent=agent)
    messages = [
        {"role": "system", "content": "You work for ACME."},
        {"role": "user", "content": "Add 2 and 3."},
    ]
    client_for(http).chat.completions.create(model="v3", messages=messages, tools=[ADD])
    prompt = model.prompts[-1].messages
    assert prompt[0]["role"] == "system"
    assert "Always add." in prompt[0]["content"] and "You work for ACME." in prompt[0]["content"]
    assert prompt[1] == {"role": "user", "content": "Add 4 and 4."}  # the demonstration
    assert prompt[-1]["content"] == "Add 2 and 3."


def test_without_memory_the_conversation_passes_through(tmp_path):
    agent = Agent(version="v3", model="fake", insights=(Insight("Always add."),))
    http, model, store = make_server(tmp_path, agent=agent, memory=False)
    messages = [{"role": "user", "content": "Add 2 and 3."}]
    client_for(http).chat.completions.create(model="v3", messages=messages, tools=[ADD])
    assert list(model.prompts[-1].messages) == messages
    assert store.trajectories()[0][1].messages[0] == messages[0]


def test_tool_choice_none_gives_text(tmp_path):
    http, _, _ = make_server(tmp_path)
    reply = client_for(http).chat.completions.create(
        model="v3", messages=[{"role": "user", "content": "hi"}], tools=[ADD], tool_choice="none"
    )
    assert reply.choices[0].message.content == "plain words"
    assert not reply.choices[0].message.tool_calls


def test_an_api_key_is_required_when_set(tmp_path):
    http, _, _ = make_server(tmp_path, api_key="s3cret")
    with pytest.raises(openai.AuthenticationError, match="API key"):
        client_for(http, "wrong").models.list()
    assert [m.id for m in client_for(http, "s3cret").models.list()] == ["v3"]


def test_bad_requests_get_clear_openai_style_errors(tmp_path):
    http, _, _ = make_server(tmp_path)
    client = client_for(http)
    with pytest.raises(openai.NotFoundError, match="the model 'gpt-9' does not exist here"):
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    cases = [
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n is not supported"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": [{"x": 1}]}, "tools.0"),
        (
            {
                "messages": [{"role": "user", "content": "x"}],
                "tools": [ADD],
                "tool_choice": {"type": "function", "function": {"name": "mul"}},
            },
            "'mul'",
        ),
        ({"messages": "hello"}, "messages"),
    ]
    for body, expected in cases:
        answer = http.post("/v1/chat/completions", json={"model": "v3", **body})
        assert answer.status_code == 400, body
        assert expected in answer.json()["error"]["message"], answer.json()
    assert http.get("/v1/nothing").status_code == 404


def test_adapters_load_and_unload_like_vllm(tmp_path):
    built = []

    def build(path):
        built.append(path)
        return Recording(reply=lambda prompt, rng: '{"name": "add", "arguments": {"a": 9, "b": 9}}')

    http, _, store = make_server(tmp_path, build=build)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    missing = http.post(
        "/v1/load_lora_adapter", json={"lora_name": "a1", "lora_path": str(adapter)}
    )
    assert (
        missing.status_code == 400 and "adapter_config.json" in missing.json()["error"]["message"]
    )
    (adapter / "adapter_config.json").write_text("{}")
    loaded = http.post("/v1/load_lora_adapter", json={"lora_name": "a1", "lora_path": str(adapter)})
    assert loaded.status_code == 200 and "a1" in loaded.text and built == [adapter]
    again = http.post("/v1/load_lora_adapter", json={"lora_name": "a1", "lora_path": str(adapter)})
    assert again.status_code == 400 and "already been loaded" in again.json()["error"]["message"]
    client = client_for(http)
    assert [(m.id, m.parent) for m in client.models.list()] == [("v3", None), ("a1", "v3")]
    reply = client.chat.completions.create(
        model="a1", messages=[{"role": "user", "content": "x"}], tools=[ADD]
    )
    assert json.loads(reply.choices[0].message.tool_calls[0].function.arguments) == {"a": 9, "b": 9}
    assert store.trajectories()[0][1].metadata["served_as"] == "a1"
    assert http.post("/v1/unload_lora_adapter", json={"lora_name": "a1"}).status_code == 200
    assert http.post("/v1/unload_lora_adapter", json={"lora_name": "a1"}).status_code == 404


def test_adapters_are_refused_where_the_model_cannot_take_them(tmp_path):
    http, _, _ = make_server(tmp_path)
    answer = http.post("/v1/load_lora_adapter", json={"lora_name": "a", "lora_path": "/x"})
    assert (
        answer.status_code == 400 and "takes no LoRA adapters" in answer.json()["error"]["message"]
    )


def test_concurrent_requests_are_batched_for_a_local_style_model(tmp_path):
    model = Batched(reply=call_first_tool)
    http, _, store = make_server(tmp_path, model=model)
    body = {"model": "v3", "messages": [{"role": "user", "content": "Add."}], "tools": [ADD]}
    replies = []

    def ask(number):
        headers = {"X-Ratchet-Conversation": f"c{number}"}
        replies.append(http.post("/v1/chat/completions", json=body, headers=headers).status_code)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert replies == [200] * 6 and sum(model.batches) == 6
    assert len(store.trajectories()) == 6
