"""Per-request decoding features of the ``local`` backend, as ``generate()`` plug-ins.

:class:`RowSampler` draws each batch row's next token at its own temperature and seed,
:func:`nucleus` restricts a row's draw to its top-p tokens, :class:`TokenLogprobs` records what
each generated token's log-probability was (and the likeliest alternatives) for
token-faithful recording and OpenAI's ``logprobs``, and :class:`AbandonedRows` stops the rows
whose asker has gone (see :mod:`ratchet.engine.cancel`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import transformers

import ratchet.engine.models.metadata as keys
from ratchet.engine.cancel import abandoned_rows


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` with every token outside its row's nucleus set to 0.

    A row's nucleus is its likeliest tokens whose probabilities, taken in order, first reach
    ``top_p`` of the row's mass; the likeliest token is always in it.
    """
    ordered, order = probs.sort(dim=-1, descending=True)
    mass = ordered.sum(dim=-1, keepdim=True)
    before = ordered.cumsum(dim=-1) - ordered
    kept = torch.where(before < top_p * mass, ordered, torch.zeros_like(ordered))
    return torch.zeros_like(probs).scatter(-1, order, kept)


class TokenLogprobs:
    """A logits processor, first in line, that records each generated token's log-probability.

    Log-probabilities are those of the model's own distribution, before temperature, nucleus
    and grammar (as vLLM's default ``raw_logprobs``). The processor sees the scores for the
    next token and, at the following call, which token was taken; :meth:`finish` takes the
    last one from the output.

    Args:
        top: Also record this many likeliest alternatives per position (0: none).
    """

    def __init__(self, top: int = 0) -> None:
        self._top = top
        self._last: torch.Tensor | None = None
        self._chosen: list[torch.Tensor] = []
        self._alternatives: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Record the previous step's token; keep this step's distribution; pass ``scores`` on."""
        if self._last is not None:
            self._take(input_ids[:, -1])
        self._last = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, last_tokens: torch.Tensor) -> None:
        """Record the last generated token of each row (the output's last column)."""
        if self._last is not None:
            self._take(last_tokens)
            self._last = None

    def logprobs(self, row: int, count: int) -> list[float]:
        """The log-probabilities of row ``row``'s first ``count`` generated tokens."""
        return [float(step[row]) for step in self._chosen[:count]]

    def alternatives(self, row: int, count: int) -> list[list[tuple[int, float]]]:
        """The likeliest ``top`` tokens and their log-probabilities at each of the positions."""
        return [
            [(int(i), float(v)) for v, i in zip(values[row], ids[row], strict=True)]
            for values, ids in self._alternatives[:count]
        ]

    def _take(self, tokens: torch.Tensor) -> None:
        assert self._last is not None
        self._chosen.append(self._last.gather(1, tokens.unsqueeze(1)).squeeze(1))
        if self._top:
            values, ids = self._last.topk(self._top, dim=-1)
            self._alternatives.append((values, ids))


def openai_logprobs(
    ids: Sequence[int],
    logprobs: Sequence[float],
    alternatives: Sequence[Sequence[tuple[int, float]]],
    decode: Callable[[list[list[int]]], list[str]],
) -> list[dict[str, Any]]:
    """Tokens with their log-probabilities in OpenAI's ``logprobs.content`` shape.

    Args:
        ids: Generated token ids (without the end-of-turn token).
        logprobs: One per id.
        alternatives: Per id, the likeliest tokens and log-probabilities (may be empty).
        decode: Decodes each single-token list to its text (a tokenizer's ``batch_decode``).
    """
    others = [[token for token, _ in top] for top in alternatives]
    texts = iter(decode([[token] for token in [*ids, *(t for top in others for t in top)]]))
    shown = [next(texts) for _ in ids]
    entries = []
    for index, (text, logprob) in enumerate(zip(shown, logprobs, strict=True)):
        top = alternatives[index] if index < len(alternatives) else ()
        entries.append(
            {
                "token": text,
                "logprob": logprob,
                "bytes": list(text.encode()),
                "top_logprobs": [
                    {"token": other, "logprob": value, "bytes": list(other.encode())}
                    for (_, value), other in zip(top, texts, strict=False)
                ],
            }
        )
    return entries


class AbandonedRows(transformers.StoppingCriteria):
    """Stops the rows of a batch whose asker has gone; the other rows go on.

    Args:
        abandoned: Tells, per row, whether it is abandoned (see
            :func:`ratchet.engine.cancel.abandoned_rows`).
    """

    def __init__(self, abandoned: Callable[[], list[bool]]) -> None:
        self._abandoned = abandoned

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> Any:
        """One flag per row: ``True`` stops it."""
        return torch.tensor(self._abandoned(), dtype=torch.bool, device=input_ids.device)


def stopping_criteria(positions: list[int]) -> transformers.StoppingCriteriaList:
    """Stop the rows at ``positions`` of the ``complete()`` call whose asker has gone.

    Empty when nobody watches (see :mod:`ratchet.engine.cancel`).
    """
    abandoned = abandoned_rows(positions)
    return transformers.StoppingCriteriaList(
        [] if abandoned is None else [AbandonedRows(abandoned)]
    )


def turn_record(
    recorder: TokenLogprobs,
    row: int,
    prompt: list[int],
    completion: list[int],
    grammar: str | None,
    eos_id: int,
    decode: Callable[[list[list[int]]], list[str]],
) -> dict[str, Any]:
    """One row's turn token for token, as completion metadata (see :mod:`.metadata`).

    Args:
        recorder: The batch's log-probabilities.
        row: The row.
        prompt: Its prompt's token ids.
        completion: Its generated token ids (the end-of-turn token included if it stopped).
        grammar: The grammar it was decoded under.
        eos_id: The end-of-turn token, left out of the OpenAI-shaped tokens.
        decode: Decodes single-token lists to text (the tokenizer's ``batch_decode``).
    """
    logprobs = recorder.logprobs(row, len(completion))
    shown = len(completion) - (completion[-1:] == [eos_id])
    return {
        keys.PROMPT_IDS: prompt,
        keys.COMPLETION_IDS: completion,
        keys.TOKEN_LOGPROBS: logprobs,
        keys.GRAMMAR: grammar,
        keys.LOGPROBS: openai_logprobs(
            completion[:shown], logprobs[:shown], recorder.alternatives(row, shown), decode
        ),
    }


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
        top_p: Draw within each row's nucleus of this much probability (see :func:`nucleus`).
    """

    def __init__(self, draws: Sequence[tuple[float, int | None]], top_p: float = 1.0) -> None:
        self._top_p = top_p
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
        probs = torch.softmax(logits / self._divisor, dim=-1)
        cumulative = (probs if self._top_p >= 1 else nucleus(probs, self._top_p)).cumsum(dim=-1)
        uniform = torch.stack([torch.rand((), generator=g) for g in self._generators])
        target = uniform.unsqueeze(1) * cumulative[:, -1:]
        drawn = torch.searchsorted(cumulative, target, right=True).clamp_max(logits.shape[1] - 1)
        # Greedy rows, rows with nothing allowed (NaN weights) and a draw rounded onto a
        # masked token all take the best allowed token.
        usable = torch.isfinite(logits.gather(1, drawn)) & ~self._greedy.unsqueeze(1)
        picked = torch.where(usable, drawn, best)
        return torch.full_like(scores, float("-inf")).scatter(1, picked, 0.0)
