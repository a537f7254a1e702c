"""Checkpoint integrity: find a truncated or corrupt file in a checkpoint folder before resuming from it.

A save cut short (a full disk, a killed job, a partial copy) leaves files that transformers, torch or safetensors
reject deep inside their loaders, with messages that do not name the file. `check_checkpoint` reads only what
identifies each file as whole, never the tensors:

- ``*.safetensors``: the 8-byte header length N, the JSON header, and the file size, which must be
  8 + N + max(tensor end offset);
- ``*.pt``, ``*.pth``, ``*.bin`` written by ``torch.save`` (a zip archive, starting "PK"): the zip central
  directory, which sits at the end of the file, so any truncation removes it; an empty file is corrupt too;
- ``*.json``: parsed whole (``trainer_state.json``, configs; small files).

The first bad file raises `CorruptCheckpointError` (a ValueError), one line naming the file, what is wrong and the
newest earlier ``checkpoint-N`` folder beside it that is complete (has ``trainer_state.json``) and intact, if any.

Tests: tests/test_bad_input_more.py (a truncated file names itself and the earlier intact checkpoint, in the API and
the CLI).
"""

from __future__ import annotations

import json
import os
import re
import struct
import zipfile

from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

TORCH_SUFFIXES = (".pt", ".pth", ".bin")


class CorruptCheckpointError(ValueError):
    """A checkpoint file is truncated or corrupt; the message names it and an earlier intact checkpoint."""


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
    """The newest `checkpoint-M` folder beside `checkpoint-N` (M < N) that is complete and intact, None if none."""
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
        if os.path.isfile(os.path.join(candidate, TRAINER_STATE_NAME)) and first_corrupt_file(candidate) is None:
            return candidate
    return None


def check_checkpoint(folder: str) -> None:
    """Raise CorruptCheckpointError naming the first truncated or corrupt file of the folder, if any."""
    found = first_corrupt_file(folder)
    if found is None:
        return
    path, problem = found
    earlier = earlier_intact_checkpoint(folder)
    if earlier is not None:
        fix = (
            f"an earlier complete checkpoint is intact: resume from {earlier}, or delete {folder} and resume from "
            f"the last"
        )
    else:
        fix = "no earlier complete checkpoint beside it; start afresh without resume_from_checkpoint"
    raise CorruptCheckpointError(f"resume_from_checkpoint: {path} is corrupt ({problem}); {fix}.")
