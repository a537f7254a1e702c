"""Errors writing a run's files, each as one line naming the folder and the fix: an output_dir that cannot be
written (a file, a folder inside a file, a read-only folder) and a full disk while saving a checkpoint or the model.

    writable_output_dir(path)                    creates the folder and writes a probe file in it, else ConfigError
    raise_if_disk_full(error, output_dir, what)  a ConfigError when the error says the disk or quota is full; other
                                                 errors pass

A full disk reaches the caller in three forms, by the writer: Python's own writes raise OSError(ENOSPC); safetensors
(the weights) raises its SafetensorError, whose message ends in Rust's "(os error 28)"; torch.save (optimizer.pt,
trl_zoo's files) raises a RuntimeError from its stream writer that carries no error number, so it counts as a full
disk when the output folder has less than a MiB left.

Tests: tests/test_error_lines.py (a file, a folder inside a file, a read-only folder simulated; a full disk
simulated), tests/test_disk_full.py (a checkpoint's weights and torch files on a full disk).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile

from ..errors import ConfigError

NO_SPACE = {errno.ENOSPC, errno.EDQUOT}  # no space left on device; disk quota exceeded
RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")
TORCH_WRITE_FAILED = ("PytorchStreamWriter failed writing", "unexpected pos")
NEARLY_FULL = 2**20  # bytes


def writable_output_dir(path: str) -> None:
    """Create `path` (with its parents) and write and remove a probe file in it; one line when that fails."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise ConfigError(
            f"output_dir: cannot write to {path} ({error.strerror or type(error).__name__}); give --output_dir a "
            f"folder you can write to."
        ) from None


def _no_space(error: BaseException, output_dir: str) -> str | None:
    """What `error` says about a full disk or quota (its strerror), None when it says nothing of one."""
    if isinstance(error, OSError):
        return error.strerror if error.errno in NO_SPACE else None
    rust = RUST_OS_ERROR.search(str(error))
    if rust is not None:
        return os.strerror(int(rust.group(1))) if int(rust.group(1)) in NO_SPACE else None
    if isinstance(error, RuntimeError) and any(words in str(error) for words in TORCH_WRITE_FAILED):
        if shutil.disk_usage(output_dir).free < NEARLY_FULL:
            return os.strerror(errno.ENOSPC)
    return None


def raise_if_disk_full(error: BaseException, output_dir: str, what: str) -> None:
    """Raise a one-line ConfigError when `error` (or an error it was raised from) says the disk or quota is full
    while saving `what` ("a checkpoint", "the model"); return for any other error, which the caller re-raises."""
    while error is not None:
        why = _no_space(error, output_dir)
        if why is not None:
            raise ConfigError(
                f"disk full while saving {what} in {output_dir}: {why}; free space there, or save less "
                f"(--save_strategy no, or a smaller --save_total_limit), then resume from the last complete "
                f"checkpoint with --resume_from_checkpoint true."
            ) from None
        error = error.__cause__ or error.__context__
