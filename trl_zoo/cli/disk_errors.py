"""Errors writing a run's files, each as one line naming the folder and the fix: an output_dir that cannot be
written (a file, a folder inside a file, a read-only folder) and a full disk while saving a checkpoint or the model.

    writable_output_dir(path)              creates the folder and writes a probe file in it, else ConfigError
    raise_if_disk_full(error, output_dir)  a ConfigError for an OSError "no space left"; other errors pass

Tests: tests/test_error_lines.py (a file, a folder inside a file, a read-only folder simulated; a full disk simulated).
"""

from __future__ import annotations

import errno
import os
import tempfile

from .arguments import ConfigError

NO_SPACE = {errno.ENOSPC, errno.EDQUOT}  # no space left on device; disk quota exceeded


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


def raise_if_disk_full(error: BaseException, output_dir: str) -> None:
    """Raise a one-line ConfigError when `error` (or an error it was raised from) says the disk or quota is full;
    return for any other error, which the caller re-raises."""
    while error is not None and not (isinstance(error, OSError) and error.errno in NO_SPACE):
        error = error.__cause__ or error.__context__
    if error is None:
        return
    what = "a checkpoint" if "checkpoint-" in str(error.filename or "") else "the model"
    raise ConfigError(
        f"disk full while saving {what} in {output_dir}: {error.strerror}; free space there, or save less "
        f"(--save_strategy no, or a smaller --save_total_limit), then resume from the last complete checkpoint with "
        f"--resume_from_checkpoint true."
    ) from None
