"""Constrained decoding: every reply of the ``local`` backend is a valid call of an offered tool.

The reply format is one JSON object ``{"name": ..., "arguments": {...}}``. For the tools on offer,
:func:`tool_call_schema` builds the JSON schema of such a call (given the reply's token cap, with
the strings and arrays bounded so that a whole call fits it: :mod:`.bounds`), and
:class:`ToolCallConstraint`
masks the logits of a batched Hugging Face ``generate()`` with one ``llguidance`` matcher per
sequence, so sampling can only pick tokens that keep the reply a prefix of a valid call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.numpy
import numpy as np
import torch

from ratchet.engine.models.bounds import Count, bound_arguments

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

# The same separators as ``json.dumps`` and no free whitespace: a small model would otherwise
# spend its token budget on spaces and newlines, and the training targets (``format_call``) use
# exactly this layout.
_JSON_OPTIONS: JsonCompileOptions = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
}


def tool_call_schema(
    tools: Sequence[dict[str, Any]], max_tokens: int | None = None, count: Count | None = None
) -> dict[str, Any]:
    """Return the JSON schema of one call of any of ``tools``.

    Args:
        tools: OpenAI-format tool schemas (``{"type": "function", "function": {...}}``).
        max_tokens: The reply's token cap; with ``count``, every string and array without a
            bound gets one so that a whole call fits (see :func:`.bounds.bound_arguments`).
        count: Counts tokens with the model's tokenizer.

    Returns:
        ``anyOf`` over the tools of ``{"name": <const>, "arguments": <parameters>}``, both
        required, no other properties.

    Raises:
        ValueError: If ``tools`` is empty or a tool has no name.
    """
    if not tools:
        raise ValueError("a tool-call schema needs at least one tool")
    options = []
    for tool in tools:
        function = tool.get("function", tool)
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"tool schema without a name: {tool!r}")
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        if max_tokens is not None and count is not None:
            parameters = bound_arguments(name, parameters, max_tokens, count)
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return options[0] if len(options) == 1 else {"anyOf": options}


def tool_call_grammar(
    tools: Sequence[dict[str, Any]], max_tokens: int | None = None, count: Count | None = None
) -> str:
    """Return the ``llguidance`` grammar for one call of any of ``tools``.

    Args:
        tools: OpenAI-format tool schemas.
        max_tokens: The reply's token cap, to bound strings and arrays by (with ``count``).
        count: Counts tokens with the model's tokenizer.

    Raises:
        ValueError: If ``tools`` is empty, a tool has no name, or the schema cannot be compiled.
    """
    return _grammar(tool_call_schema(tools, max_tokens, count), "the tools' schemas")


def reply_grammar(
    schema: dict[str, Any], max_tokens: int | None = None, count: Count | None = None
) -> str:
    """Return the ``llguidance`` grammar of a reply that is one JSON value matching ``schema``.

    An object schema is bounded like a tool's arguments (given ``max_tokens`` and ``count``),
    so that a whole reply fits the cap.

    Raises:
        ValueError: If the schema cannot be compiled.
    """
    if max_tokens is not None and count is not None and schema.get("type") == "object":
        schema = bound_arguments("reply", schema, max_tokens, count)
    return _grammar(schema, "the reply schema")


def _grammar(schema: dict[str, Any], what: str) -> str:
    grammar: str = llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=_JSON_OPTIONS)
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise ValueError(f"{what} cannot be enforced: {messages[0]}")
    return grammar


class ToolCallConstraint:
    """A ``generate()`` logits processor that keeps each sequence a prefix of its grammar.

    Make a new one per ``generate()`` call: it tracks the tokens each sequence has produced.
    A sequence whose grammar is ``None`` is left unconstrained. Once a sequence's matcher has
    stopped (the call is complete, or it hit an error), only end-of-sequence is allowed, so
    that finished rows of the batch stay finished.

    Args:
        tokenizer: The ``llguidance`` view of the model's tokenizer.
        grammars: One grammar (from :func:`tool_call_grammar`) or ``None`` per batch row.
        executor: Computes the masks of all rows in parallel.

    Raises:
        ValueError: If a grammar does not compile for this tokenizer.
    """

    def __init__(
        self,
        tokenizer: llguidance.LLTokenizer,
        grammars: Sequence[str | None],
        executor: llguidance.LLExecutor,
    ) -> None:
        self._matchers: list[llguidance.LLMatcher | None] = []
        for grammar in grammars:
            matcher = None if grammar is None else llguidance.LLMatcher(tokenizer, grammar)
            if matcher is not None and matcher.is_error():
                raise ValueError(f"grammar does not compile: {matcher.get_error()}")
            self._matchers.append(matcher)
        self._executor = executor
        # numpy rather than llguidance.torch: its mask kernel is torch.compile'd, which costs
        # seconds per new batch shape on a CPU, while the numpy one is ready at once.
        self._bitmask = llguidance.numpy.allocate_token_bitmask(len(grammars), tokenizer.vocab_size)
        self._eos_only = np.zeros_like(self._bitmask[0])
        self._eos_only[tokenizer.eos_token // 32] = 1 << (tokenizer.eos_token % 32)
        self._started = False

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Advance the matchers by the last sampled tokens and mask ``scores`` in place."""
        if self._started:
            for row, matcher in enumerate(self._matchers):
                if matcher is not None and not matcher.is_stopped():
                    matcher.consume_token(int(input_ids[row, -1]))
        self._started = True
        running = []
        for row, matcher in enumerate(self._matchers):
            if matcher is None:
                self._bitmask[row] = -1
            elif matcher.is_stopped() or matcher.is_error():
                self._bitmask[row] = self._eos_only
            else:
                running.append((matcher, row))
        if running:
            llguidance.numpy.fill_next_token_bitmask_par(self._executor, running, self._bitmask)
        logits = scores if scores.dtype == torch.float32 else scores.float()
        llguidance.numpy.apply_token_bitmask_inplace(logits.numpy(), self._bitmask)
        return logits

    def errors(self) -> list[str | None]:
        """Return, per row, the matcher's error message if it entered an error state."""
        return [
            matcher.get_error() if matcher is not None and matcher.is_error() else None
            for matcher in self._matchers
        ]
