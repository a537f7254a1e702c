"""A run's own files, written never through a symbolic link.

    open_for_writing(path, mode="w")  ->  the open file; LinkedRunFileError (one line) when `path` is a link
    torch_save(obj, path)                  torch.save into such a file

A run folder may hold files someone else put there (a folder shared with other users, a copied or downloaded run):
a symbolic link named like a file trl_zoo writes (`_trl_zoo_run -> ~/.bashrc`) made the run truncate and overwrite
the file it points to, outside the folder. Every file trl_zoo itself writes into a run folder (the marker, the run
log, summary.json, the model card, the report, its checkpoint files) is opened with `O_NOFOLLOW`, so a link in the
file's place (dangling or not) is refused in one line naming it, and nothing is written. Where the platform has no
`O_NOFOLLOW` (Windows) the path is checked to be no link just before it is opened. Only the file's own name is not
followed: the folders above it are the user's to choose (`--output_dir` may be a link to a scratch disk).

Files other libraries write into the folder (transformers' and PEFT's weights, TRL's model card) are opened by them.

Tests: tests/test_run_folders.py (a linked marker, run log, summary and report file refused, the target untouched).
"""

from __future__ import annotations

import errno
import os
from typing import IO

NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
FLAGS = {
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    "a+": os.O_RDWR | os.O_CREAT | os.O_APPEND,
}


class LinkedRunFileError(ValueError):
    """A file trl_zoo would write into a run folder is a symbolic link: one line naming it and the fix."""


def _refusal(path: str) -> LinkedRunFileError:
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return LinkedRunFileError(
        f"output_dir: {path} is a symbolic link{target}, and trl_zoo writes a run's files only into the folder "
        f"itself, never through a link; remove the link, or give --output_dir a folder of its own."
    )


def open_for_writing(path, mode: str = "w", encoding: str | None = None, newline: str | None = None) -> IO:
    """`open(path, mode)` for `mode` "w", "a", "a+" (text) or the same with "b", never through a symbolic link in
    `path`'s own place (module docstring); text is UTF-8 unless `encoding` says otherwise."""
    path = os.fspath(path)
    binary = "b" in mode
    flags = FLAGS[mode.replace("b", "")] | NO_FOLLOW | getattr(os, "O_BINARY", 0)
    if not NO_FOLLOW and os.path.islink(path):
        raise _refusal(path)
    try:
        descriptor = os.open(path, flags, 0o666)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):  # EMLINK: the BSDs' O_NOFOLLOW
            raise _refusal(path) from None
        raise
    if binary:
        return os.fdopen(descriptor, mode)
    return os.fdopen(descriptor, mode, encoding=encoding or "utf-8", newline=newline)


def torch_save(obj, path) -> None:
    """`torch.save(obj, path)` through `open_for_writing`."""
    import torch  # here, not above: the CLI imports this module before any library (`trl-zoo --help`)

    with open_for_writing(path, "wb") as handle:
        torch.save(obj, handle)
