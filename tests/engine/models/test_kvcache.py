import random
from typing import Any

import pytest
import torch
import transformers

from ratchet.engine.models.kvcache import GrowingLayer, PrefixCache, growing_cache, supports

PAD, EOS = 0, 1


@pytest.fixture(scope="module")
def tiny() -> Any:
    """A randomly initialised two-layer Llama (float32): same cache layout as SmolLM2."""
    config = transformers.LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def generate(model: Any, inputs: dict[str, Any], cache: Any = None) -> torch.Tensor:
    with torch.inference_mode():
        return model.generate(
            **inputs,
            cache=cache,
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=PAD,
            eos_token_id=EOS,
        )


def plain(model: Any, rows: list[list[int]]) -> list[list[int]]:
    """Replies from an ordinary left-padded generate(), without any reuse."""
    width = max(map(len, rows))
    ids = torch.tensor([[PAD] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    output = generate(model, {"input_ids": ids, "attention_mask": mask})
    return [output[i, width:].tolist() for i in range(len(rows))]


def reused(
    model: Any, cache: PrefixCache, rows: list[list[int]], spare: int | None = None
) -> tuple[list[list[int]], Any]:
    batch = cache.batch(rows, spare)
    inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
    output = generate(model, inputs, batch.cache)
    cache.remember(batch, output, EOS)
    width = batch.input_ids.shape[1]
    return [output[i, width:].tolist() for i in range(len(rows))], batch


def tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(2, 96) for _ in range(n)]


def test_reused_prefixes_give_the_replies_of_a_fresh_prefill(tiny: Any) -> None:
    assert supports(tiny)
    rng = random.Random(1)
    system = tokens(rng, 48)
    rows = [system + tokens(rng, n) for n in (5, 17, 9)]
    cache = PrefixCache(tiny, PAD)
    first, batch = reused(tiny, cache, rows)
    assert first == plain(tiny, rows)
    assert batch.cached == [48, 48, 48]  # the shared system prefix, prefilled once
    # The next turn: each conversation goes on after its reply, as the harness sends it.
    turn_two = [r + reply + tokens(rng, 7) for r, reply in zip(rows, first, strict=True)]
    turn_two.append(system + tokens(rng, 30))  # a new episode joins the batch
    second, batch = reused(tiny, cache, turn_two)
    assert second == plain(tiny, turn_two)
    assert all(c >= len(r) for c, r in zip(batch.cached[:3], rows, strict=True))
    assert batch.cached[3] == 48


def test_a_cache_that_grows_in_place_gives_the_same_replies_with_and_without_reuse(
    tiny: Any,
) -> None:
    rng = random.Random(4)
    system = tokens(rng, 40)
    rows = [system + tokens(rng, n) for n in (3, 11)]
    width = max(map(len, rows))
    inputs = {
        "input_ids": torch.tensor([[PAD] * (width - len(r)) + r for r in rows]),
        "attention_mask": torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows]),
    }
    cache = growing_cache(tiny, spare=6)
    grown = generate(tiny, inputs, cache)[:, width:].tolist()
    assert grown == plain(tiny, rows)
    assert all(isinstance(layer, GrowingLayer) for layer in cache.layers)
    prefixes = PrefixCache(tiny, PAD)
    first, batch = reused(tiny, prefixes, rows, spare=6)
    assert first == grown and isinstance(batch.cache.layers[0], GrowingLayer)
    turn_two = [r + reply + tokens(rng, 5) for r, reply in zip(rows, first, strict=True)]
    second, _ = reused(tiny, prefixes, turn_two, spare=6)
    assert second == plain(tiny, turn_two)


def test_a_growing_layer_writes_in_place_until_it_runs_out_of_room() -> None:
    grown, plain_layer = GrowingLayer(spare=2), transformers.cache_utils.DynamicLayer()
    torch.manual_seed(5)
    steps = [torch.randn(2, 3, n, 4) for n in (5, 1, 1, 1, 2)]
    storage = []
    for step in steps:
        keys, values = grown.update(step, -step)
        expected_keys, expected_values = plain_layer.update(step, -step)
        assert torch.equal(keys, expected_keys) and torch.equal(values, expected_values)
        storage.append(keys.data_ptr())
    # 5 tokens and room for 2: the two single steps fit, the third does not, then 2 more fit.
    assert storage[0] == storage[1] == storage[2] != storage[3] == storage[4]
    assert grown.get_seq_length() == 10


def test_a_growing_layer_follows_keys_replaced_from_outside() -> None:
    layer = GrowingLayer(spare=8)
    first = torch.arange(2 * 1 * 3 * 2, dtype=torch.float32).reshape(2, 1, 3, 2)
    layer.update(first, first)
    layer.batch_select_indices(torch.tensor([1, 0]))  # transformers reorders rows by assignment
    new = torch.full((2, 1, 1, 2), -1.0)
    keys, _ = layer.update(new, new)
    assert torch.equal(keys, torch.cat([first.flip(0), new], dim=2))


def test_an_identical_prompt_still_leaves_one_token_to_read(tiny: Any) -> None:
    rows = [tokens(random.Random(2), 20)]
    cache = PrefixCache(tiny, PAD)
    reused(tiny, cache, rows)
    again, batch = reused(tiny, cache, rows)
    assert batch.cached == [19] and again == plain(tiny, rows)


def test_extended_entries_are_dropped_and_memory_is_bounded_across_caches(tiny: Any) -> None:
    rng = random.Random(3)
    cache = PrefixCache(tiny, PAD)
    row = tokens(rng, 30)
    reply, _ = reused(tiny, cache, [row])
    reused(tiny, cache, [row + reply[0] + tokens(rng, 4)])
    assert len(cache._entries) == 1  # the first turn's entry is a prefix of the second's
    small = PrefixCache(tiny, PAD, max_mb=0.02)
    for _ in range(6):
        reused(tiny, small, [tokens(rng, 40)])
    assert len(small._entries) < 6 and small.nbytes <= 0.02 * 2**20
    assert cache.nbytes == 0  # the budget holds across caches: the idle one's entry went first
    small.clear()
    assert small.nbytes == 0


def test_eviction_takes_the_least_recently_used_entry_wherever_it_stands() -> None:
    """The oldest entry is not first in its list and entries differ in length: found by identity.

    An improve run hit this once its caches filled up: list.remove compared entries field by
    field, i.e. token tensors of different lengths, and the whole batch failed.
    """
    from ratchet.engine.models.kvcache import _Entry

    def entry(length: int, used: int) -> _Entry:
        keys = [torch.zeros(2, length, 8)]
        return _Entry(torch.arange(length) + 100 * length, keys, [torch.zeros(2, length, 8)], used)

    # 128 bytes a token: room for three of these four entries (2,816 bytes in all).
    cache = PrefixCache(model=None, pad_id=PAD, max_mb=2000 / 2**20)
    cache._entries = [entry(5, used=3), entry(7, used=1), entry(6, used=2)]
    cache._add(entry(4, used=0))
    lengths = sorted(len(e.tokens) for e in cache._entries)
    assert 7 not in lengths and 4 in lengths  # the least recently used went, the new one stayed


def shop_prompts() -> list[Any]:
    from ratchet.core.agent import Agent
    from ratchet.engine.harness import system_message
    from ratchet.engine.models.base import Prompt
    from ratchet.envs.registry import load_env_reference

    shop = load_env_reference("shop")
    system = system_message(Agent())
    prompts = []
    for task in shop.tasks("train", 3, seed=0, difficulty=1):
        observation = shop.session(task).reset()
        user = {"role": "user", "content": observation.text}
        prompts.append(Prompt((system, user), observation.tools))
    return prompts


@pytest.mark.model
@pytest.mark.slow
def test_embedded_model_greedy_replies_are_the_same_with_and_without_reuse() -> None:
    """In float32, where rounding cannot flip a near tie between the two computations."""
    from ratchet.engine.models.base import Prompt, Sampling
    from ratchet.engine.models.local import LocalModel

    model = LocalModel(threads=1, max_batch_size=4)
    model.model = model.model.float()
    greedy = Sampling(temperature=0, max_tokens=96)
    first = shop_prompts()

    def turns(reuse: bool) -> tuple[list[str], list[int]]:
        model.kv_reuse = reuse
        replies = model.complete(first, greedy)
        follow = [
            Prompt(
                (
                    *p.messages,
                    {"role": "assistant", "content": r.text},
                    {"role": "user", "content": "Error: try again"},
                ),
                p.tools,
            )
            for p, r in zip(first, replies, strict=True)
        ]
        again = model.complete(follow, greedy)
        return [c.text for c in replies + again], [c.metadata["cached_tokens"] for c in again]

    plain, nothing = turns(False)
    reused, cached = turns(True)
    assert reused == plain and set(nothing) == {0}
    assert all(c > 600 for c in cached)  # at least the system message came from the cache
