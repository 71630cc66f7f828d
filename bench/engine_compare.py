"""Generation of the ``local`` engine (torch) against OpenVINO GenAI, in one run, same prompts.

Both engines get the same token ids (turn-1 prompts of the built-in envs, rendered by the local
backend), 16 sequences a batch, at most 48 reply tokens, temperature 0.7 with a seed per row,
with and without a LoRA adapter (a random rank-8 one made here with peft: its numbers, not its
quality, are what is measured). Each engine constrains its replies to the JSON schema the local
backend builds (``tool_call_schema(offered_tools(prompt))``, bounds included): torch through
llguidance (the shipped path), OpenVINO GenAI through its ``json_schema`` structured output
(XGrammar), the only one of its modes that accepts every built-in schema (its EBNF parser
rejects the ``Regex`` rules XGrammar emits for ``pattern``; see docs/models.md).

Prints, per engine and adapter: generated tokens, seconds, tokens/s, and how many replies are
valid calls of the schema and how many are in the compact layout the adapters are trained on
(``json.dumps``'s separators, no other whitespace). Then the candidate's tokens/s over
torch's (the default engine stays torch; see docs/models.md). Runs alternate engines, best of
``--repeats``. Needs ``openvino-genai`` (the ``bench`` extra). Measures; never asserts.
Run: ``python bench/engine_compare.py [--per-env 4] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import openvino  # type: ignore[import-untyped,import-not-found,unused-ignore]
import openvino_genai  # type: ignore[import-untyped,import-not-found,unused-ignore]
import peft
import torch

from ratchet.engine.models import Prompt, Sampling
from ratchet.engine.models.base import offered_tools, row_seeds
from ratchet.engine.models.checkpoints import embedded_model_file, load
from ratchet.engine.models.constrain import tool_call_schema
from ratchet.engine.models.local import LocalModel
from ratchet.engine.models.lora import LORA_TARGETS
from ratchet.envs.registry import make_env

ENVS = ("calc", "shop", "files", "code", "grid")
BATCH = 16
MAX_TOKENS = 48
TEMPERATURE = 0.7


def env_prompts(per_env: int) -> list[Prompt]:
    """Turn-1 prompts of each built-in env's training tasks (``per_env`` each)."""
    prompts = []
    for name in ENVS:
        env = make_env(name)
        for task in env.tasks("train", per_env, seed=0):
            observation = env.session(task).reset()
            message = {"role": "user", "content": observation.text}
            prompts.append(Prompt((message,), observation.tools))
    return prompts


def random_adapter(directory: Path) -> Path:
    """Save a random rank-8 peft adapter of the embedded model (non-zero, unlike a fresh one)."""
    model, _ = load(None, dtype=torch.float32)
    torch.manual_seed(0)
    config = peft.LoraConfig(
        r=8, lora_alpha=16, target_modules=LORA_TARGETS, init_lora_weights=False
    )
    wrapped = peft.get_peft_model(model, config)
    with torch.no_grad():
        for name, parameter in wrapped.named_parameters():
            if "lora_" in name:
                parameter.mul_(0.3)
    wrapped.save_pretrained(str(directory))
    return directory


class Checker:
    """Counts replies that are valid calls of their schema, and those in the compact layout."""

    def __init__(self, schemas: Sequence[dict[str, Any]]) -> None:
        self.schemas = schemas

    def __call__(self, texts: Sequence[str]) -> tuple[int, int]:
        valid = compact = 0
        for text, schema in zip(texts, self.schemas, strict=True):
            try:
                call = json.loads(text)
                jsonschema.validate(call, schema)
            except (ValueError, jsonschema.ValidationError):
                continue
            valid += 1
            compact += text == json.dumps(call, ensure_ascii=False)
        return valid, compact


def run_torch(model: LocalModel, prompts: list[Prompt]) -> tuple[float, int, list[str]]:
    """Seconds, generated tokens and replies of the torch path, batches of 16."""
    started = time.perf_counter()
    replies = model.complete(
        prompts, Sampling(temperature=TEMPERATURE, max_tokens=MAX_TOKENS, seed=0)
    )
    elapsed = time.perf_counter() - started
    return elapsed, sum(c.completion_tokens for c in replies), [c.text for c in replies]


class OpenVinoGenAI:
    """The candidate: a continuous-batching pipeline on the embedded GGUF file."""

    def __init__(self, adapter: Path | None) -> None:
        scheduler = openvino_genai.SchedulerConfig()
        scheduler.enable_prefix_caching = True
        scheduler.cache_size = 1
        properties: dict[str, Any] = {}
        self.adapters: Any = None
        if adapter is not None:
            settings = json.loads((adapter / "adapter_config.json").read_text())
            self.adapters = openvino_genai.AdapterConfig()
            self.adapters.add(
                openvino_genai.Adapter(str(adapter / "adapter_model.safetensors")),
                settings["lora_alpha"] / settings["r"],
            )
            properties["adapters"] = self.adapters
        started = time.perf_counter()
        self.pipeline = openvino_genai.ContinuousBatchingPipeline(
            str(embedded_model_file()), scheduler, "CPU", properties
        )
        self.load_s = time.perf_counter() - started

    def run(
        self, model: LocalModel, prompts: list[Prompt], schemas: list[dict[str, Any]]
    ) -> tuple[float, int, list[str]]:
        """Seconds, generated tokens and replies, 16 requests at a time."""
        seeds = row_seeds(prompts, Sampling(seed=0))
        configs, inputs = [], []
        for prompt, schema, seed in zip(prompts, schemas, seeds, strict=True):
            config = openvino_genai.GenerationConfig()
            config.max_new_tokens = MAX_TOKENS
            config.do_sample = True
            config.temperature = TEMPERATURE
            config.rng_seed = seed or 0
            structured = openvino_genai.StructuredOutputConfig()
            structured.json_schema = json.dumps(schema)
            config.structured_output_config = structured
            if self.adapters is not None:
                config.adapters = self.adapters
            configs.append(config)
            row = np.array([model._tokens(prompt, MAX_TOKENS)], dtype=np.int64)
            inputs.append(openvino.Tensor(row))
        tokens, texts = 0, []
        started = time.perf_counter()
        for start in range(0, len(prompts), BATCH):
            results = self.pipeline.generate(
                inputs[start : start + BATCH], configs[start : start + BATCH]
            )
            for result in results:
                ids = list(result.m_generation_ids[0])
                tokens += len(ids)
                texts.append(model.tokenizer.decode(ids, skip_special_tokens=True))
        return time.perf_counter() - started, tokens, texts


def measure(
    label: str, adapter: Path | None, prompts: list[Prompt], repeats: int
) -> dict[str, float]:
    """Print and return each engine's best tokens/s, with ``adapter`` (or none)."""
    model = LocalModel(None, adapter=str(adapter) if adapter else None)
    schemas = [tool_call_schema(offered_tools(p), MAX_TOKENS, model.count_text) for p in prompts]
    candidate = OpenVinoGenAI(adapter)
    print(f"{label}: openvino-genai pipeline built in {candidate.load_s:.1f} s")
    run_torch(model, prompts[:2])  # warm-up: llguidance tokenizer, allocations
    candidate.run(model, prompts[:2], schemas[:2])
    best: dict[str, tuple[float, int, list[str]]] = {}
    for _ in range(repeats):
        for engine, result in (
            ("torch", run_torch(model, prompts)),
            ("openvino-genai", candidate.run(model, prompts, schemas)),
        ):
            if engine not in best or result[1] / result[0] > best[engine][1] / best[engine][0]:
                best[engine] = result
    rates = {}
    for engine, (elapsed, tokens, texts) in best.items():
        valid, compact = Checker(schemas)(texts)
        rates[engine] = tokens / elapsed
        print(
            f"  {engine:15s} {tokens:5d} tokens in {elapsed:6.1f} s = {rates[engine]:6.1f} "
            f"tokens/s; valid calls {valid}/{len(texts)}, compact {compact}/{len(texts)}"
        )
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-env", type=int, default=4, help="prompts per env (5 envs)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    prompts = env_prompts(args.per_env)
    with tempfile.TemporaryDirectory() as scratch:
        adapter = random_adapter(Path(scratch) / "adapter")
        found = [
            measure("no adapter", None, prompts, args.repeats),
            measure("adapter", adapter, prompts, args.repeats),
        ]
    ratios = [rates["openvino-genai"] / rates["torch"] for rates in found]
    print(
        "openvino-genai candidate (not adopted: its constraint is not the local backend's): "
        + ", ".join(f"{r:.2f} x torch's tokens/s" for r in ratios)
        + " (without, with the adapter)"
    )


if __name__ == "__main__":
    main()
