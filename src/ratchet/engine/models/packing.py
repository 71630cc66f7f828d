"""How the ``local`` backend packs prompts into ``generate()`` batches, and frees their memory.

:func:`token_batches` splits prompts into batches that fit a memory budget, :func:`left_padded`
builds a batch's inputs, and :func:`release_freed_memory` gives the heap back to the operating
system once a call's batches are done.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import torch


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
    ``malloc_trim(0)`` returned 4.3 GB at once. ``LocalModel.complete`` calls this after its
    batches; it does nothing where the C library has no ``malloc_trim``.
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


def left_padded(rows: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """``generate()`` inputs for ``rows``, left-padded to the longest."""
    width = max(len(row) for row in rows)
    ids = [[pad_id] * (width - len(row)) + row for row in rows]
    mask = [[0] * (width - len(row)) + [1] * len(row) for row in rows]
    return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}
