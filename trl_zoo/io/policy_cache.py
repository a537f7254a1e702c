"""The cache of policies trl_zoo builds once and loads like any local model (bootstrapped tiny policies, GGUF
checkpoints dequantized into ordinary ones): where it lives and how an entry is written.

    cache_root()  = $TRL_ZOO_CACHE, default ~/.cache/trl_zoo
    save_policy   = build_once(target, write_policy)     (one writer, atomic rename; io/cache_lock.py)

Tests: tests/test_cache_lock.py, tests/test_quickstart.py, tests/test_real_model.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .cache_lock import build_once

CACHE_ENV = "TRL_ZOO_CACHE"


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "trl_zoo")


def save_policy(model, tokenizer, target: Path, log: Callable = print) -> Path:
    """Save model and tokenizer as the cache entry `target` unless it exists (written once, atomically)."""
    has_model = lambda folder: (folder / "config.json").is_file()  # noqa: E731
    return build_once(target, lambda staging: write_policy(model, tokenizer, staging), has_model, log)


def write_policy(model, tokenizer, folder: Path, extra_files: dict[str, str] | None = None):
    """Write model, tokenizer and `extra_files` (name: text) into `folder`, from whichever process calls it.

    Once a distributed process group exists (`accelerate launch` creates it while parsing the arguments, before any
    bootstrap), transformers' `save_pretrained` writes a model's files on rank 0 only; a cache entry may be built by
    any rank, so the model is saved as rank 0 would save it. The model's config is checked to be there."""
    device = next(model.parameters()).device
    model.cpu()
    model.should_save_on_this_rank = lambda is_main_process: is_main_process
    try:
        model.save_pretrained(folder)
    finally:
        del model.should_save_on_this_rank
        model.to(device)
    tokenizer.save_pretrained(folder)
    for name, text in (extra_files or {}).items():
        (folder / name).write_text(text)
    if not (folder / "config.json").is_file():
        raise RuntimeError(f"save_pretrained wrote no config.json into {folder}; the cache entry is not written.")
