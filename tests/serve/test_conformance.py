"""``ratchet serve`` as the official ``openai`` client sees it: what it honours, what it refuses."""

import json

import jsonschema
import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

import ratchet.engine.models.metadata as keys  # noqa: E402
from ratchet.engine.models.fake import FakeModel, simplest_instance  # noqa: E402
from ratchet.engine.models.lora import traced_examples  # noqa: E402
from servers import ADD, Recording, call_first_tool, client_for, serving_client  # noqa: E402

ASK = [{"role": "user", "content": "What is 2 + 3?"}]
SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "integer", "minimum": 3}, "why": {"type": "string"}},
    "required": ["x", "why"],
    "additionalProperties": False,
}


def served(tmp_path, reply=call_first_tool, model=None, **options):
    http, model, store = serving_client(tmp_path, model=model or Recording(reply=reply), **options)
    return client_for(http), http, model, store


def test_models_retrieve_names_the_model_and_404s_an_unknown_one(tmp_path):
    client, *_ = served(tmp_path)
    model = client.models.retrieve("v3")
    assert model.id == "v3" and model.object == "model" and model.owned_by == "ratchet"
    with pytest.raises(openai.NotFoundError, match="gpt-9"):
        client.models.retrieve("gpt-9")


def test_a_streamed_tool_call_arrives_as_openai_deltas_and_reassembles(tmp_path):
    client, *_ = served(tmp_path)
    chunks = list(
        client.chat.completions.create(model="v3", messages=ASK, tools=[ADD], stream=True)
    )
    opening = chunks[0].choices[0].delta.tool_calls[0]
    assert opening.id.startswith("call_") and opening.function.name == "add"
    assert opening.function.arguments == ""
    pieces = [c.choices[0].delta.tool_calls[0].function.arguments for c in chunks[1:-1]]
    assert len(pieces) > 1 and json.loads("".join(pieces)) == {"a": 2, "b": 3}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    with client.chat.completions.stream(model="v3", messages=ASK, tools=[ADD]) as stream:
        final = stream.get_final_completion()
    assert json.loads(final.choices[0].message.tool_calls[0].function.arguments) == {"a": 2, "b": 3}


def test_streamed_text_matches_the_whole_reply_and_ends_with_usage(tmp_path):
    client, *_ = served(tmp_path, reply=lambda prompt, rng: "five, said the model plainly")
    whole = client.chat.completions.create(model="v3", messages=ASK)
    chunks = list(
        client.chat.completions.create(
            model="v3", messages=ASK, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content == "five, said the model plainly"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5


def test_stop_ends_the_reply_before_the_sequence_and_is_recorded_so(tmp_path):
    client, _, _, store = served(tmp_path, reply=lambda p, r: "first line\nsecond line")
    reply = client.chat.completions.create(model="v3", messages=ASK, stop=["\n", "zzz"])
    assert reply.choices[0].message.content == "first line"
    assert reply.choices[0].finish_reason == "stop" and reply.usage.completion_tokens == 2
    assert store.trajectories()[0][1].steps[0].output == "first line"
    with pytest.raises(openai.BadRequestError, match="whole tool call"):
        client.chat.completions.create(model="v3", messages=ASK, tools=[ADD], stop="\n")


def test_response_format_json_schema_reaches_the_decoder_and_the_reply_conforms(tmp_path):
    client, _, model, _ = served(tmp_path, reply=lambda p, r: "not json at all")
    reply = client.chat.completions.create(
        model="v3",
        messages=ASK,
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}},
    )
    jsonschema.validate(json.loads(reply.choices[0].message.content), SCHEMA)
    assert model.samplings[-1].reply_schema == SCHEMA
    client.chat.completions.create(
        model="v3", messages=ASK, response_format={"type": "json_object"}
    )
    assert model.samplings[-1].reply_schema == {"type": "object"}
    # With tools on offer the reply is a call: the schema is for text replies only.
    client.chat.completions.create(
        model="v3", messages=ASK, tools=[ADD], response_format={"type": "json_object"}
    )
    assert model.samplings[-1].reply_schema is None


def test_simplest_instance_matches_its_schema():
    for schema in (SCHEMA, {"type": "array", "items": {"enum": ["a"]}, "minItems": 2}, {}):
        jsonschema.validate(simplest_instance(schema), schema)


def test_logprobs_come_per_token_and_top_p_and_seed_reach_the_backend(tmp_path):
    client, _, model, _ = served(tmp_path, reply=lambda p, r: "five it is")
    reply = client.chat.completions.create(
        model="v3", messages=ASK, logprobs=True, top_logprobs=2, top_p=0.5, seed=7
    )
    tokens = reply.choices[0].logprobs.content
    assert "".join(t.token for t in tokens) == "five it is"
    assert all(t.logprob == 0.0 and t.top_logprobs for t in tokens)
    assert model.samplings[-1].top_p == 0.5 and model.samplings[-1].top_logprobs == 2
    assert model.prompts[-1].seed == 7
    plain = client.chat.completions.create(model="v3", messages=ASK)
    assert plain.choices[0].logprobs is None


class Plain(Recording):
    """A backend that honours none of the optional sampling features (as a proxied server)."""

    sampling_options = frozenset()


def test_what_a_backend_cannot_honour_is_refused_not_ignored(tmp_path):
    client, *_ = served(tmp_path, model=Plain(reply=call_first_tool))
    refusals = [
        ({"extra_body": {"surely_not_a_field": 1}}, "surely_not_a_field"),
        ({"presence_penalty": 0.5}, "presence_penalty is not supported"),
        ({"n": 2}, "n is not supported"),
        ({"top_p": 0.5}, "top_p is not supported with model"),
        ({"logprobs": True}, "logprobs is not supported with model"),
        ({"response_format": {"type": "json_object"}}, "response_format is not supported"),
        ({"store": False}, "store is not supported"),
        ({"reasoning_effort": "high"}, "reasoning_effort is not supported"),
    ]
    for fields, expected in refusals:
        with pytest.raises(openai.BadRequestError, match=expected):
            client.chat.completions.create(model="v3", messages=ASK, **fields)
    # No-op values of unsupported fields pass: they change nothing.
    client.chat.completions.create(model="v3", messages=ASK, n=1, presence_penalty=0, store=True)


def test_tool_choice_allowed_tools_narrows_the_call(tmp_path):
    mul = {**ADD, "function": {**ADD["function"], "name": "mul"}}
    client, _, model, _ = served(tmp_path)
    choice = {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": "required",
            "tools": [{"type": "function", "function": {"name": "mul"}}],
        },
    }
    reply = client.chat.completions.create(
        model="v3", messages=ASK, tools=[ADD, mul], tool_choice=choice
    )
    assert reply.choices[0].message.tool_calls[0].function.name == "mul"
    assert [t["function"]["name"] for t in model.prompts[-1].tools] == ["mul"]


def test_health_is_open_and_metrics_count_requests_tokens_and_queue(tmp_path):
    client, http, *_ = served(tmp_path, api_keys=("s3cret",))
    assert http.get("/health").json() == {"status": "ok"}
    client = client_for(http, "s3cret")
    client.chat.completions.create(model="v3", messages=ASK, tools=[ADD])
    http.get("/v1/models")  # no key: counted as a 401
    text = http.get("/metrics", headers={"Authorization": "Bearer s3cret"}).text
    assert "# TYPE ratchet_serve_requests_total counter" in text
    assert 'ratchet_serve_requests_total{route="/v1/chat/completions",status="200"} 1.0' in text
    assert 'ratchet_serve_requests_total{route="/v1/models",status="401"} 1.0' in text
    assert 'ratchet_serve_completion_tokens_total{model="v3"}' in text
    assert "ratchet_serve_queue_depth 0.0" in text
    assert 'ratchet_serve_request_seconds_count{route="/v1/chat/completions"} 1.0' in text


class Tokenised(FakeModel):
    """A fake that records its turns token for token, as the local backend does."""

    def complete(self, prompts, sampling):
        completions = super().complete(prompts, sampling)
        for prompt, completion in zip(prompts, completions, strict=True):
            ids = [ord(c) for c in json.dumps(prompt.messages)]
            completion.metadata.update(
                {
                    keys.PROMPT_IDS: ids,
                    keys.COMPLETION_IDS: [ord(c) for c in completion.text] + [3],
                    keys.TOKEN_LOGPROBS: [-0.5] * (len(completion.text) + 1),
                    keys.GRAMMAR: "the grammar",
                }
            )
        return completions


def test_generated_turns_are_recorded_token_for_token_and_trained_on_as_recorded(tmp_path):
    client, _, _, store = served(tmp_path, model=Tokenised(reply=call_first_tool, name="toy"))
    first = client.chat.completions.create(model="v3", messages=ASK, tools=[ADD])
    history = [*ASK, first.choices[0].message.model_dump(exclude_none=True)]
    history.append({"role": "tool", "tool_call_id": "x", "content": "5"})
    client.chat.completions.create(model="v3", messages=history, tools=[ADD])
    [(_, recorded)] = store.trajectories()
    traces = [step.tokens for step in recorded.steps]
    assert all(t.model == "toy" and t.grammar == "the grammar" for t in traces)
    assert traces[0].completion_ids[-1] == 3 and len(traces[0].logprobs) == len(
        traces[0].completion_ids
    )
    assert "".join(chr(i) for i in traces[1].completion_ids[:-1]) == recorded.steps[1].output
    examples = traced_examples(recorded, "toy", 100_000)
    assert examples is not None and len(examples) == 2  # the second prompt is a new rendering
    learned = [
        [i for i, m in zip(e.input_ids, e.assistant_masks, strict=True) if m] for e in examples
    ]
    assert learned == [list(t.completion_ids) for t in traces]
    assert traced_examples(recorded, "local", 100_000) is None  # another tokenizer's ids
