from pathlib import Path

import pytest


def test_cache_root_follows_ratchet_cache_then_xdg(monkeypatch: pytest.MonkeyPatch) -> None:
    from ratchet.engine.models.checkpoints import cache_root

    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    monkeypatch.delenv("RATCHET_CACHE", raising=False)
    assert cache_root() == Path("/xdg/ratchet/models")
    monkeypatch.setenv("RATCHET_CACHE", "/rc")
    assert cache_root() == Path("/rc/models")


@pytest.mark.parametrize(
    ("cuda", "capability", "expected"),
    [
        (True, "AVX2", "bfloat16"),
        (False, "AVX512", "bfloat16"),
        (False, "AVX2", "float32"),
        (False, "DEFAULT", "float32"),
    ],
)
def test_weights_are_bf16_only_where_the_hardware_computes_it(
    monkeypatch: pytest.MonkeyPatch, cuda: bool, capability: str, expected: str
) -> None:
    import torch

    from ratchet.engine.models.checkpoints import default_dtype

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert default_dtype() == getattr(torch, expected)


def test_embedded_model_file_is_found_in_the_installed_wheel() -> None:
    from ratchet.engine.models.checkpoints import EMBEDDED_FILE, embedded_model_file

    path = embedded_model_file()
    assert path.name == EMBEDDED_FILE
    assert path.is_file()


@pytest.mark.model
@pytest.mark.slow
def test_gguf_conversion_is_cached_and_adapters_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import peft
    import torch

    from ratchet.engine.models.checkpoints import converted_dir, embedded_model_file, load

    monkeypatch.setenv("RATCHET_CACHE", str(tmp_path / "cache"))
    model, _ = load()
    cached = converted_dir(embedded_model_file())
    assert (cached / "config.json").is_file()
    assert load(cached)[0].config.vocab_size == model.config.vocab_size

    config = peft.LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False)
    peft.get_peft_model(model, config).save_pretrained(tmp_path / "adapter")
    base, _ = load(cached)
    adapted, _ = load(cached, adapter=tmp_path / "adapter")
    name = "model.layers.0.self_attn.q_proj.weight"
    base_weight = dict(base.named_parameters())[name]
    assert not torch.equal(base_weight, dict(adapted.named_parameters())[name])


def test_weights_load_without_transformers_own_bars_which_come_back_after() -> None:
    from transformers.utils import logging

    from ratchet.engine.models.checkpoints import _no_loading_bars

    assert logging.is_progress_bar_enabled()
    with _no_loading_bars():
        assert not logging.is_progress_bar_enabled()
    assert logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        with _no_loading_bars():
            pass
        assert not logging.is_progress_bar_enabled()  # a user's own choice is kept
    finally:
        logging.enable_progress_bar()
