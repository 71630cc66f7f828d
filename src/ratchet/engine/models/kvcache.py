"""Reusing the keys and values of token sequences the local model has already read.

Every turn of an episode sends the whole conversation again, and every episode of an env starts
with the same system message (instructions and tool list: about 600 of shop's 950 prompt tokens
at turn 1). Without reuse all of it is prefilled again for every row of every batch, which is
most of a CPU turn on long prompts. :class:`PrefixCache` keeps the keys and values of recently
read sequences (each row's prompt and reply) and gives each row of a new batch the longest
cached prefix of its tokens, so only the rest is prefilled: the system message once per agent,
and at each later turn only the new reply and tool result. When the rows of a batch share a
prefix no entry covers yet (the first batch of a run), that prefix is prefilled once, alone,
and stored.

``generate()`` takes one rectangular cache for the batch, so each row's cached part (``m``
tokens) is left-padded to the longest cached part ``C``, and its uncached part (``u`` tokens)
left-padded to the longest uncached part ``U``::

    row: [pad x (C - m)] [cached m] [pad x (U - u)] [uncached u] -> generated

The attention mask is 0 on pads and transformers derives position ids from the mask's running
sum, so every token keeps the position it had when it was cached. Keys and values of a causal
model at a position depend only on the tokens up to it, so the result equals a fresh prefill up
to floating-point rounding: in float32, greedy replies are identical (tested); in bf16 a near
tie can come out differently, as it can when the batch's padding changes.

Only models whose cache is a plain ``DynamicCache`` of full-attention layers are supported
(sliding-window or recurrent layers cannot be stitched this way); :func:`supports` says.
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

_LOCK = threading.Lock()  # one for all caches: eviction may take from another model's cache
_CLOCK = itertools.count(1)
_CACHES: weakref.WeakSet[PrefixCache] = weakref.WeakSet()

SHARED_MIN = 32
"""A prefix shared by all rows of a batch is prefilled alone once it is this many tokens longer
than what the cache already holds for them."""


def supports(model: Any) -> bool:
    """Whether ``model``'s cache layers are all plain full-attention ``DynamicLayer`` ones."""
    try:
        layers = DynamicCache(config=model.config).layers
    except (TypeError, ValueError, AttributeError):
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` that appends into spare room instead of concatenating.

    transformers' layer copies all its keys and values into a new tensor at every decoding
    step (``torch.cat``), a fifth of a batch-16 step of the embedded model at 1,500 cached
    tokens. This one keeps them in a buffer with ``spare`` free columns and exposes the filled
    part as a view; it reallocates (with ``spare`` free columns again) only when a step does not
    fit, or when transformers replaced its keys with a new tensor (rows selected or repeated).

    Args:
        spare: Free columns each allocation leaves: the tokens a ``generate()`` call will add.
    """

    keys: torch.Tensor
    values: torch.Tensor

    def __init__(self, spare: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.spare = spare
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``key_states`` and ``value_states`` and return all keys and values."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        filled = self.get_seq_length()
        total = filled + key_states.shape[-2]
        buffers = self._buffers
        if (
            buffers is None
            or buffers[0].shape[-2] < total
            or buffers[0].shape[0] != key_states.shape[0]
            or (filled and self.keys.data_ptr() != buffers[0].data_ptr())
        ):
            buffers = (self._room(self.keys, key_states), self._room(self.values, value_states))
            self._buffers = buffers
        keys, values = buffers
        keys[:, :, filled:total] = key_states
        values[:, :, filled:total] = value_states
        self.keys, self.values = keys[:, :, :total], values[:, :, :total]
        return self.keys, self.values

    def _room(self, filled: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        """A buffer holding ``filled`` with room for ``new`` and :attr:`spare` more columns."""
        length = filled.shape[-2] if filled.numel() else 0
        rows, heads, _, dim = new.shape
        buffer = new.new_empty((rows, heads, length + new.shape[-2] + self.spare, dim))
        if length:
            buffer[:, :, :length] = filled
        return buffer


def growing_cache(model: Any, spare: int) -> DynamicCache:
    """An empty cache for ``model`` (see :func:`supports`) of :class:`GrowingLayer` layers."""
    cache = DynamicCache(config=model.config)
    cache.layers = [GrowingLayer(spare) for _ in cache.layers]
    return cache


@dataclass(eq=False)  # entries are told apart by identity: comparing their tensors would fail
class _Entry:
    """One cached sequence: its tokens and, per layer, keys and values ``(heads, n, dim)``."""

    tokens: torch.Tensor
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    used: int

    @functools.cached_property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (*self.keys, *self.values))


@dataclass(frozen=True)
class Batch:
    """The inputs of one ``generate()`` call that starts from cached keys and values.

    Attributes:
        input_ids: ``(rows, C + U)`` token ids, padded as the module docstring shows.
        attention_mask: 1 on real tokens, 0 on pads.
        cache: The cached keys and values of the first ``C`` columns; ``generate()`` extends it.
        rows: Each row's prompt tokens.
        cached: Tokens of each row taken from the cache.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    cache: DynamicCache
    rows: list[list[int]]
    cached: list[int]


class PrefixCache:
    """Keys and values of recently read sequences, reused as the prefix of new prompts.

    The memory budget holds for all caches of the process together (an improve run keeps a
    model per agent version it has tried, and only the current ones need their entries): when
    it is exceeded, the least recently used entries go first, whichever cache holds them.

    Args:
        model: A transformers causal LM for which :func:`supports` is true.
        pad_id: The token id used for padding.
        max_mb: Memory the cached keys and values of all caches in the process may take.
    """

    def __init__(self, model: Any, pad_id: int, max_mb: float = 1024.0) -> None:
        self.model = model
        self.pad_id = pad_id
        self.max_bytes = int(max_mb * 2**20)
        self._entries: list[_Entry] = []
        _CACHES.add(self)

    @property
    def nbytes(self) -> int:
        """Bytes the cached keys and values take."""
        return sum(e.nbytes for e in self._entries)

    def clear(self) -> None:
        """Drop every entry (their memory is freed)."""
        with _LOCK:
            self._entries = []

    def batch(self, rows: list[list[int]], spare: int | None = None) -> Batch:
        """Return the inputs for generating after ``rows``, reusing what the cache holds.

        Args:
            rows: Each row's prompt tokens.
            spare: The most tokens ``generate()`` will add to a row: with it, the batch's cache
                is a :func:`growing_cache` with room for the prompts' uncached part and these;
                ``None``: transformers' own ``DynamicCache``.
        """
        with _LOCK:
            matches = [self._match(row) for row in rows]
            shared = _common_prefix(rows)
            if len(rows) > 1 and shared - min(m for _, m in matches) >= SHARED_MIN:
                self._add(self._prefill(rows[0][:shared]))
                matches = [self._match(row) for row in rows]
            for entry, _ in matches:
                if entry is not None:
                    entry.used = next(_CLOCK)
            return self._assemble(rows, matches, spare)

    def remember(self, batch: Batch, sequences: torch.Tensor, eos_id: int) -> None:
        """Store each row's prompt and reply, read back from the cache ``generate()`` filled.

        Args:
            batch: What :meth:`batch` returned (its cache now extended by ``generate()``).
            sequences: ``generate()``'s output ids ``(rows, C + U + generated)``.
            eos_id: The end-of-sequence token; what a row generated after it is not stored.
        """
        width = batch.input_ids.shape[1]
        filled = batch.cache.get_seq_length()
        with _LOCK:
            for row, tokens in enumerate(batch.rows):
                reply = sequences[row, width:filled].tolist()
                if eos_id in reply:
                    reply = reply[: reply.index(eos_id) + 1]
                columns = torch.cat(
                    [
                        torch.nonzero(batch.attention_mask[row]).flatten(),
                        torch.arange(width, width + len(reply)),
                    ]
                )
                layers = _tensors(batch.cache)
                self._add(
                    _Entry(
                        torch.tensor(tokens + reply),
                        [keys[row].index_select(1, columns) for keys, _ in layers],
                        [values[row].index_select(1, columns) for _, values in layers],
                        0,
                    )
                )

    def _match(self, row: list[int]) -> tuple[_Entry | None, int]:
        """The entry sharing the longest prefix with ``row``, and that length (< len(row))."""
        best: _Entry | None = None
        longest = 0
        tokens = torch.tensor(row)
        for entry in self._entries:
            length = _shared_length(tokens, entry.tokens)
            if length > longest:
                best, longest = entry, length
        return best, min(longest, len(row) - 1)

    def _add(self, entry: _Entry) -> None:
        """Store ``entry``, drop entries it extends, and evict down to the memory budget."""
        entry.used = next(_CLOCK)
        n = len(entry.tokens)
        self._entries = [
            e
            for e in self._entries
            if not (len(e.tokens) <= n and _shared_length(entry.tokens, e.tokens) == len(e.tokens))
        ]
        self._entries.append(entry)
        caches = list(_CACHES)
        while sum(c.nbytes for c in caches) > self.max_bytes:
            owner, oldest = min(
                ((c, e) for c in caches for e in c._entries), key=lambda pair: pair[1].used
            )
            if oldest is entry:
                break  # the entry just stored is all that is left
            owner._entries.remove(oldest)

    def _prefill(self, tokens: list[int]) -> _Entry:
        """Read ``tokens`` alone and return their keys and values as an entry."""
        cache = DynamicCache(config=self.model.config)
        with torch.inference_mode():
            self.model(input_ids=torch.tensor([tokens]), cache=cache, use_cache=True)
        layers = _tensors(cache)
        return _Entry(torch.tensor(tokens), [k[0] for k, _ in layers], [v[0] for _, v in layers], 0)

    def _assemble(
        self, rows: list[list[int]], matches: list[tuple[_Entry | None, int]], spare: int | None
    ) -> Batch:
        """Lay out the batch's ids, mask and cache (see the module docstring)."""
        cached = [m for _, m in matches]
        width_cached = max(cached)
        width_new = max(len(row) - m for row, m in zip(rows, cached, strict=True))
        ids, mask = [], []
        for row, m in zip(rows, cached, strict=True):
            pad_cached, pad_new = width_cached - m, width_new - (len(row) - m)
            ids.append([self.pad_id] * pad_cached + row[:m] + [self.pad_id] * pad_new + row[m:])
            mask.append([0] * pad_cached + [1] * m + [0] * pad_new + [1] * (len(row) - m))
        if spare is None:
            cache = DynamicCache(config=self.model.config)
        else:
            cache = growing_cache(self.model, width_new + spare)
        if width_cached:
            layers: list[Any] = list(cache.layers)
            for layer, (keys, values) in zip(
                layers, self._stitch(matches, width_cached), strict=True
            ):
                layer.update(keys, values)
        return Batch(torch.tensor(ids), torch.tensor(mask), cache, rows, cached)

    def _stitch(
        self, matches: list[tuple[_Entry | None, int]], width: int
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the rows' cached keys and values right-aligned in ``width`` columns."""
        sample = next(entry for entry, _ in matches if entry is not None)
        layers = []
        for layer in range(len(sample.keys)):
            heads, _, dim = sample.keys[layer].shape
            shape = (len(matches), heads, width, dim)
            keys = torch.zeros(shape, dtype=sample.keys[layer].dtype)
            values = torch.zeros(shape, dtype=sample.values[layer].dtype)
            for row, (entry, m) in enumerate(matches):
                if entry is not None and m:
                    keys[row, :, width - m :] = entry.keys[layer][:, :m]
                    values[row, :, width - m :] = entry.values[layer][:, :m]
            layers.append((keys, values))
        return layers


def _tensors(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's keys and values ``(rows, heads, length, dim)``."""
    layers: list[Any] = list(cache.layers)
    return [(layer.keys, layer.values) for layer in layers]


def _shared_length(a: torch.Tensor, b: torch.Tensor) -> int:
    """Length of the common prefix of two 1-D token tensors."""
    n = min(len(a), len(b))
    differ = torch.nonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def _common_prefix(rows: list[list[int]]) -> int:
    """Length of the prefix all rows share."""
    first = torch.tensor(rows[0])
    return min(_shared_length(first, torch.tensor(row)) for row in rows)
