"""The cost of drawing a batch's next tokens: per-row seeded draws against ``generate()``'s own.

``RowSampler`` draws each row from its own generator by inverse CDF; ``generate()`` with
``do_sample`` draws the batch with one ``torch.multinomial`` call. Both read the logits of a
batch of 16 rows over the embedded model's 49,152-token vocabulary; the ratio is measured in
one run (this machine is noisy).

    python bench/row_sampler.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from ratchet.engine.models.decoding import RowSampler

ROWS, VOCABULARY, STEPS = 16, 49_152, 200


def per_step_ms(draw: Callable[[], object]) -> float:
    """Milliseconds per call of ``draw``, best of three runs of ``STEPS`` calls."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(STEPS):
            draw()
        best = min(best, (time.perf_counter() - started) / STEPS * 1000)
    return best


def main() -> None:
    scores = torch.randn(ROWS, VOCABULARY)
    ids = torch.zeros(ROWS, 1, dtype=torch.long)
    sampler = RowSampler([(0.7, seed) for seed in range(ROWS)])

    def multinomial() -> object:
        return torch.multinomial(torch.softmax(scores / 0.7, dim=-1), 1)

    ours = per_step_ms(lambda: sampler(ids, scores))
    theirs = per_step_ms(multinomial)
    print(f"per token step, {ROWS} rows: RowSampler {ours:.2f} ms, multinomial {theirs:.2f} ms")
    print(f"ratio multinomial / RowSampler: x{theirs / ours:.2f}")


if __name__ == "__main__":
    main()
