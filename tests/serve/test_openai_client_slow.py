"""The official openai client against ``ratchet serve`` with the embedded model, over HTTP."""

import json
import os
import subprocess

import jsonschema
import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

from ratchet.engine.store import Store  # noqa: E402
from servers import ADD, free_port, ratchet, wait_for  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.model]

ASK = [{"role": "user", "content": "What is 12 + 30? Use the add tool."}]
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}, "unit": {"enum": ["apples", "pears"]}},
    "required": ["answer", "unit"],
    "additionalProperties": False,
}


def test_the_openai_client_gets_every_conformant_feature_from_the_local_model(tmp_path):
    port = free_port()
    command = [ratchet(), "serve", "base", "--port", str(port), "--threads", "1"]
    command += ["--store", str(tmp_path / "store"), "--api-key-env", "SERVE_KEY"]
    with (tmp_path / "serve.log").open("w") as log:
        server = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "SERVE_KEY": "k", "OMP_NUM_THREADS": "1"},
        )
    try:
        url = f"http://127.0.0.1:{port}/v1"
        wait_for(f"http://127.0.0.1:{port}/health", server)
        client = openai.OpenAI(base_url=url, api_key="k", timeout=600)
        model = client.models.retrieve("base").id

        called = client.chat.completions.create(model=model, messages=ASK, tools=[ADD], seed=1)
        call = called.choices[0].message.tool_calls[0]
        assert call.function.name == "add" and set(json.loads(call.function.arguments)) >= {"a"}

        with client.chat.completions.stream(model=model, messages=ASK, tools=[ADD]) as stream:
            final = stream.get_final_completion()
        streamed = final.choices[0].message.tool_calls[0].function
        assert streamed.name == "add" and isinstance(json.loads(streamed.arguments), dict)

        chunks = list(client.chat.completions.create(model=model, messages=ASK, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text and chunks[-1].choices[0].finish_reason in ("stop", "length")

        cut = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Write three short lines about apples."}],
            stop=["\n", "."],
            max_completion_tokens=64,
            temperature=0,
        )
        assert "\n" not in cut.choices[0].message.content
        assert "." not in cut.choices[0].message.content

        shaped = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "How many apples are 3 and 4 apples?"}],
            response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}},
            max_completion_tokens=64,
        )
        jsonschema.validate(json.loads(shaped.choices[0].message.content), SCHEMA)

        scored = client.chat.completions.create(
            model=model, messages=ASK, logprobs=True, top_logprobs=2, max_completion_tokens=16
        )
        tokens = scored.choices[0].logprobs.content
        assert "".join(t.token for t in tokens) == scored.choices[0].message.content
        assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in tokens)
        assert all(t.top_logprobs[0].logprob >= t.logprob - 1e-4 for t in tokens)

        with pytest.raises(openai.BadRequestError, match="surely_not_a_field"):
            client.chat.completions.create(
                model=model, messages=ASK, extra_body={"surely_not_a_field": 1}
            )
    finally:
        server.terminate()
        server.wait(timeout=60)
    with Store(tmp_path / "store") as store:
        recorded = [step for _, t in store.trajectories() for step in t.steps]
    assert len(recorded) == 6
    assert all(s.tokens is not None and s.tokens.model == "local" for s in recorded)
    assert all(len(s.tokens.logprobs) == len(s.tokens.completion_ids) for s in recorded)
    assert any(s.tokens.grammar for s in recorded) and any(not s.tokens.grammar for s in recorded)
