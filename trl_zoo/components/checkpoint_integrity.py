"""Checkpoint integrity: find a truncated, corrupt, missing or non-finite file in a checkpoint folder before resuming.

A save cut short (a full disk, a killed job, a partial copy) leaves files that transformers, torch or safetensors
reject deep inside their loaders, with messages that do not name the file. `check_checkpoint` reads only what
identifies each file as whole, never the tensors:

- ``*.safetensors``: the 8-byte header length N, the JSON header, and the file size, which must be
  8 + N + max(tensor end offset);
- ``*.pt``, ``*.pth``, ``*.bin`` written by ``torch.save`` (a zip archive, starting "PK"): the zip central
  directory, which sits at the end of the file, so any truncation removes it; an empty file is corrupt too;
- ``*.json``: parsed whole (``trainer_state.json``, configs; small files).

`check_resumable`: a folder without ``trainer_state.json`` (which transformers reads, raising a bare
FileNotFoundError) or without weights (``model.safetensors``, ``adapter_model.safetensors``, ...: transformers' "Can't
find a valid checkpoint"). `check_training_state`: a folder without ``optimizer.pt`` or ``scheduler.pt`` (deleted, or
saved with ``save_only_model``), which transformers resumes from silently with a fresh optimizer and the
learning-rate schedule from its start. `check_finite_state`, once transformers has loaded the checkpoint: weights or
optimizer moments overwritten with NaN or ±inf keep the file's size, so only their values tell; a run would die in
generation. `check_finite_file`: the same of trl_zoo's own files as they are loaded (``trl_zoo_state.pt``, the
buffered batch ``trl_zoo_buffer_{process}.pt``, ``trl_zoo_reference.pt``), which would fail the first step in words
naming none of them.

Each raises `CorruptCheckpointError` (a ValueError), one line naming the file, what is wrong and the newest earlier
``checkpoint-N`` folder beside it that is complete (has ``trainer_state.json``, the optimizer's and the scheduler's
state) and intact, if any.

Tests: tests/test_bad_input_more.py (a truncated file names itself and the earlier intact checkpoint, in the API and
the CLI), tests/test_resume_refusals.py (missing and non-finite files, trl_zoo's own among them).
"""

from __future__ import annotations

import json
import os
import re
import struct
import zipfile

import torch
from safetensors import safe_open
from transformers.trainer import FSDP_MODEL_NAME, OPTIMIZER_NAME, SCHEDULER_NAME, TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import (
    ADAPTER_SAFE_WEIGHTS_NAME,
    ADAPTER_WEIGHTS_NAME,
    CONFIG_NAME,
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
)

from ..numerics import nonfinite_names

TORCH_SUFFIXES = (".pt", ".pth", ".bin")


class CheckpointError(ValueError):
    """A checkpoint cannot be resumed from as asked; the message names the file or setting and the fix."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file is truncated, corrupt, missing or not finite; the message names it and an earlier intact
    checkpoint."""


def _safetensors_problem(path: str) -> str | None:
    size = os.path.getsize(path)
    with open(path, "rb") as file:
        head = file.read(8)
        if len(head) < 8:
            return f"{size} bytes, shorter than the 8-byte header length"
        (header_length,) = struct.unpack("<Q", head)
        if 8 + header_length > size:
            return f"truncated: the header alone needs {8 + header_length} bytes, the file has {size}"
        try:
            header = json.loads(file.read(header_length))
        except ValueError:
            return "its header is not valid JSON"
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    expected = 8 + header_length + max(ends, default=0)
    if size != expected:
        return f"truncated: its header describes {expected} bytes, the file has {size}"
    return None


def _torch_file_problem(path: str) -> str | None:
    size = os.path.getsize(path)
    if size == 0:
        return "empty"
    with open(path, "rb") as file:
        if file.read(2) != b"PK":
            return None  # torch's legacy (pre-zip) format: not checked
    try:
        with zipfile.ZipFile(path):
            return None
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        return f"truncated: not a whole torch.save archive ({error})"


def _json_problem(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as file:
            json.load(file)
    except (ValueError, UnicodeDecodeError) as error:
        return f"not valid JSON ({error})"
    return None


def file_problem(path: str) -> str | None:
    """Why the file at `path` is not whole, None when it looks whole (or is of a kind not checked)."""
    if path.endswith(".safetensors"):
        return _safetensors_problem(path)
    if path.endswith(TORCH_SUFFIXES):
        return _torch_file_problem(path)
    if path.endswith(".json"):
        return _json_problem(path)
    return None


def first_corrupt_file(folder: str) -> tuple[str, str] | None:
    """(path, why) of the first bad file in the checkpoint folder (sub-folders included), None if all are whole."""
    for root, _, names in sorted(os.walk(folder)):
        for name in sorted(names):
            path = os.path.join(root, name)
            problem = file_problem(path)
            if problem is not None:
                return path, problem
    return None


def earlier_intact_checkpoint(folder: str) -> str | None:
    """The newest `checkpoint-M` folder beside `checkpoint-N` (M < N) that is complete (trainer_state.json, the
    optimizer's and the scheduler's state) and intact, None if none."""
    match = re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", os.path.basename(os.path.normpath(folder)))
    parent = os.path.dirname(os.path.normpath(folder))
    if match is None or not os.path.isdir(parent):
        return None
    steps = {}
    for name in os.listdir(parent):
        other = re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", name)
        if other and int(other.group(1)) < int(match.group(1)):
            steps[os.path.join(parent, name)] = int(other.group(1))
    for candidate in sorted(steps, key=steps.get, reverse=True):
        finished = os.path.isfile(os.path.join(candidate, TRAINER_STATE_NAME)) and missing_weights(candidate) is None
        if finished and missing_training_state(candidate) is None and first_corrupt_file(candidate) is None:
            return candidate
    return None


def _earlier_or_afresh(folder: str) -> str:
    earlier = earlier_intact_checkpoint(folder)
    if earlier is not None:
        return (
            f"an earlier complete checkpoint is intact: resume from {earlier}, or delete {folder} and resume from "
            f"the last"
        )
    return "no earlier complete checkpoint beside it; start afresh without resume_from_checkpoint"


def check_checkpoint(folder: str) -> None:
    """Raise CorruptCheckpointError naming the first truncated or corrupt file of the folder, if any."""
    found = first_corrupt_file(folder)
    if found is not None:
        path, problem = found
        fix = _earlier_or_afresh(folder)
        raise CorruptCheckpointError(f"resume_from_checkpoint: {path} is corrupt ({problem}); {fix}.")


ADAPTER_FILES = (ADAPTER_SAFE_WEIGHTS_NAME, ADAPTER_WEIGHTS_NAME)
WEIGHT_FILES = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME, *ADAPTER_FILES)


def missing_weights(folder: str, adapter: bool = False) -> str | None:
    """The weights' file the checkpoint folder lacks (``adapter_model.safetensors`` for an `adapter`, else
    ``model.safetensors``) when it holds none of those transformers resumes from (`WEIGHT_FILES`, FSDP's, adapters in
    sub-folders); None when it holds one."""
    names = os.listdir(folder)
    if any(name in WEIGHT_FILES or FSDP_MODEL_NAME in name for name in names):
        return None
    for name in names:
        if any(os.path.isfile(os.path.join(folder, name, adapter_file)) for adapter_file in ADAPTER_FILES):
            return None
    return os.path.join(folder, ADAPTER_SAFE_WEIGHTS_NAME if adapter else SAFE_WEIGHTS_NAME)


def check_resumable(folder: str, adapter: bool, weights: bool = True) -> None:
    """Raise CheckpointError when `folder` is not a folder, CorruptCheckpointError when it lacks
    ``trainer_state.json`` (written last by every save) or, with `weights` (not DeepSpeed's, which keeps its own), the
    weights (`missing_weights`); one line naming the file."""
    if not os.path.isdir(folder):
        raise CheckpointError(
            f"resume_from_checkpoint: {folder} is not a folder; point it at a checkpoint-N folder, or pass True to "
            f"resume from the last complete one in output_dir."
        )
    state = os.path.join(folder, TRAINER_STATE_NAME)
    if not os.path.isfile(state):
        raise CorruptCheckpointError(
            f"resume_from_checkpoint: {state} is missing (each save writes it last: the save did not finish, or the "
            f"file was deleted), so transformers cannot tell the step; {_earlier_or_afresh(folder)}."
        )
    missing = missing_weights(folder, adapter) if weights else None
    if missing is not None:
        raise CorruptCheckpointError(
            f"resume_from_checkpoint: {missing} is missing, so the checkpoint holds no weights to resume; "
            f"{_earlier_or_afresh(folder)}."
        )


def missing_training_state(folder: str) -> str | None:
    """The path of the optimizer's or the scheduler's file the checkpoint folder lacks, None when it has both (or
    is DeepSpeed's, which keeps them in its own global_step folder)."""
    names = os.listdir(folder)
    if any(name.startswith("global_step") for name in names):
        return None
    if not any(name.startswith("optimizer") for name in names):  # optimizer.pt; under FSDP optimizer.bin or a folder
        return os.path.join(folder, OPTIMIZER_NAME)
    if SCHEDULER_NAME not in names:
        return os.path.join(folder, SCHEDULER_NAME)
    return None


def check_training_state(folder: str) -> None:
    """Raise CorruptCheckpointError when the folder lacks the optimizer's or the scheduler's state: transformers
    would resume without either, silently, with a fresh optimizer and the learning-rate schedule from its start."""
    missing = missing_training_state(folder)
    if missing is None:
        return
    fix = _earlier_or_afresh(folder)
    if os.path.isfile(os.path.join(folder, CONFIG_NAME)):  # a whole model, which a new run can start from
        fix += f", or start a new run from its weights only (--model_name_or_path {folder}, or GRPOTrainer(model=...))"
    raise CorruptCheckpointError(
        f"resume_from_checkpoint: {missing} is missing, so the optimizer would start afresh and the learning-rate "
        f"schedule from its start; {fix}."
    )


NOT_WEIGHTS = (OPTIMIZER_NAME, SCHEDULER_NAME)


def first_nonfinite_file(folder: str) -> str | None:
    """The first weight file of the folder (sub-folders included) holding NaN or ±inf, None if none: a
    ``*.safetensors`` file, or a ``*.pt`` file of weights (trl_zoo's critic and moved reference; the optimizer's,
    scheduler's and random states are not weights)."""
    for root, _, names in sorted(os.walk(folder)):
        for name in sorted(names):
            path = os.path.join(root, name)
            if name.endswith(".safetensors"):
                with safe_open(path, framework="pt") as weights:
                    if nonfinite_names((key, weights.get_tensor(key)) for key in weights.keys()):
                        return path
            elif name.endswith(".pt") and name not in NOT_WEIGHTS and not name.startswith("rng_state"):
                if nonfinite_names(_named_tensors(torch.load(path, map_location="cpu", weights_only=True))):
                    return path
    return None


def _named_tensors(saved, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """(dotted name, tensor) of every floating-point tensor and float in a saved nest of dicts and lists."""
    if torch.is_tensor(saved):
        return [(prefix.rstrip("."), saved)] if saved.is_floating_point() else []
    if isinstance(saved, float):
        return [(prefix.rstrip("."), torch.tensor(saved))]
    if isinstance(saved, dict):
        items = saved.items()
    elif isinstance(saved, (list, tuple)):
        items = enumerate(saved)
    else:
        return []
    return [pair for key, value in items for pair in _named_tensors(value, f"{prefix}{key}.")]


def check_finite_file(path: str, saved, folder: str) -> None:
    """Raise CorruptCheckpointError naming `path` and its first bad entry when `saved`, what was just loaded from it
    (a nest of dicts, lists, tensors and numbers), holds NaN or ±inf; one host sync."""
    bad = nonfinite_names(_named_tensors(saved))
    if bad:
        raise CorruptCheckpointError(
            f"resume_from_checkpoint: {path} holds NaN or ±inf (first: {bad[0]}); {_earlier_or_afresh(folder)}."
        )


def check_finite_state(folder: str, model, optimizer) -> None:
    """Raise CorruptCheckpointError naming the file when the weights (every adapter, or the whole model) or the
    optimizer state just loaded from the folder hold NaN or ±inf. One host sync each; the weight files are read
    again only to name the bad one."""
    bad = nonfinite_names(model.named_parameters())
    if bad:
        path = first_nonfinite_file(folder) or folder
        fix = _earlier_or_afresh(folder)
        raise CorruptCheckpointError(
            f"resume_from_checkpoint: {path} holds NaN or ±inf weights (first: {bad[0]}); {fix}."
        )
    moments = [
        (key, value) for state in optimizer.state.values() for key, value in state.items() if torch.is_tensor(value)
    ]
    if nonfinite_names(moments):
        raise CorruptCheckpointError(
            f"resume_from_checkpoint: {os.path.join(folder, OPTIMIZER_NAME)} holds NaN or ±inf (the optimizer's "
            f"state); {_earlier_or_afresh(folder)}."
        )


def missing_rng_state(folder: str, process_index: int, world_size: int) -> str | None:
    """The random-number state file this process would resume from (transformers writes `rng_state_{rank}.pth` on
    every process of a launch, `rng_state.pth` on one), when the checkpoint lacks it but holds another's: a process
    of another machine left it there. transformers then goes on with other random numbers, saying so at info level
    only."""
    names = os.listdir(folder)
    if not any(name.startswith("rng_state") for name in names):
        return None
    name = f"rng_state_{process_index}.pth" if world_size > 1 else "rng_state.pth"
    return None if name in names else os.path.join(folder, name)
