import json

import httpx
import pytest

from ratchet.core.tool import ToolCall
from ratchet.core.trajectory import assistant_message, tool_message
from ratchet.engine.models import make_model, make_trainer
from ratchet.engine.models.base import ModelError, Prompt
from ratchet.engine.models.render import render_native, render_prompt
from ratchet.engine.models.served import ServedTrainer, adapter_name, register_adapter
from ratchet.engine.models.training import LocalTrainer


def adapter_dir(tmp_path, content="w"):
    directory = tmp_path / "v2" / "adapter"
    directory.mkdir(parents=True)
    (directory / "adapter_config.json").write_text("{}")
    (directory / "adapter_model.safetensors").write_text(content)
    return directory


def test_adapter_names_follow_content(tmp_path):
    first = adapter_name(adapter_dir(tmp_path / "a"))
    assert first.startswith("ratchet-v2-")
    assert first == adapter_name(adapter_dir(tmp_path / "b"))
    assert first != adapter_name(adapter_dir(tmp_path / "c", "other"))


def served_by(monkeypatch, handler):
    """Route httpx.post/get through ``handler(request) -> httpx.Response``."""
    client = httpx.Client(transport=httpx.MockTransport(handler))
    monkeypatch.setattr(httpx, "post", lambda url, **kw: client.post(url, **kw))
    monkeypatch.setattr(httpx, "get", lambda url, **kw: client.get(url, **kw))


def test_registering_loads_the_adapter_on_every_server_once_by_name(tmp_path, monkeypatch):
    seen = []

    def handler(request):
        seen.append((str(request.url), json.loads(request.content)))
        if len(seen) == 2:  # the second server has it already
            return httpx.Response(400, text="The lora adapter has already been loaded.")
        return httpx.Response(200, text="Success")

    served_by(monkeypatch, handler)
    adapter = adapter_dir(tmp_path)
    name = register_adapter(["http://a/v1", "http://b/v1/"], adapter)
    urls = [url for url, _ in seen]
    assert urls == ["http://a/v1/load_lora_adapter", "http://b/v1/load_lora_adapter"]
    assert seen[0][1] == {"lora_name": name, "lora_path": str(adapter.resolve())}


def test_a_server_without_dynamic_lora_gets_a_clear_error(tmp_path, monkeypatch):
    served_by(monkeypatch, lambda request: httpx.Response(404, text="Not Found"))
    with pytest.raises(ModelError, match=r"--enable-lora and .*VLLM_ALLOW_RUNTIME_LORA_UPDATING"):
        register_adapter(["http://a/v1"], adapter_dir(tmp_path))
    with pytest.raises(ModelError, match="no LoRA adapter"):
        register_adapter(["http://a/v1"], tmp_path)


def test_an_openai_model_with_an_adapter_is_served_under_the_adapters_name(tmp_path, monkeypatch):
    served_by(monkeypatch, lambda request: httpx.Response(200, text="Success"))
    adapter = adapter_dir(tmp_path)
    model = make_model("openai:base", base_url="http://a/v1", adapter=str(adapter))
    assert model.name == f"openai:{adapter_name(adapter)}"
    with pytest.raises(ValueError, match="needs the server"):
        make_model("openai:base", adapter=str(adapter))


def test_the_trainer_renders_as_the_server_prompts(monkeypatch):
    listing = {"data": [{"id": "smol", "prompt_format": "ratchet"}, {"id": "qwen"}]}
    served_by(monkeypatch, lambda request: httpx.Response(200, json=listing))
    assert ServedTrainer("smol", "/w", "http://a/v1").prompt_format() == "ratchet"
    assert ServedTrainer("qwen", "/w", "http://a/v1").prompt_format() == "native"
    with pytest.raises(ModelError, match="does not serve 'gone'"):
        ServedTrainer("gone", "/w", "http://a/v1").prompt_format()


def test_make_trainer_needs_weights_for_a_served_model():
    assert isinstance(make_trainer("local"), LocalTrainer)
    trainer = make_trainer("openai:m", weights="/w", base_url="http://a/v1,http://b/v1")
    assert isinstance(trainer, ServedTrainer) and trainer.base_url == "http://a/v1"
    with pytest.raises(ValueError, match="--weights PATH"):
        make_trainer("openai:m")


class Template:
    """A tokenizer whose chat template shows what it was given."""

    eos_token = "<eos>"

    def apply_chat_template(self, conversation, tools=None, **kwargs):
        return json.dumps({"messages": conversation, "tools": tools})


def test_native_rendering_hands_structured_calls_and_tools_to_the_template():
    call = ToolCall("add", {"a": 1, "b": 2}, id="call_0")
    tools = ({"type": "function", "function": {"name": "add"}},)
    prompt = Prompt(
        ({"role": "user", "content": "hi"}, assistant_message(call), tool_message(call, "3")),
        tools,
    )
    shown = json.loads(render_native(Template(), prompt))
    assert shown["tools"] == list(tools)
    assert shown["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"a": 1, "b": 2}
    ours = json.loads(render_prompt(Template(), prompt))
    assert ours["tools"] is None and "You can call these tools" in ours["messages"][0]["content"]
