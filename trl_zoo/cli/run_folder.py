"""A run's folder, claimed atomically when the run starts.

    claim_run_folder(output_dir, rename, existed)  ->  (folder, created)

Two runs started at the same moment must not share a folder (their checkpoints and run logs would overwrite each
other). A check that a folder is free followed by its creation leaves a gap another run can fall into, so the
folder is claimed by `os.mkdir`, which only one process can win:

- the default folder (`runs/{task}-{loss or preset}[-{speed_recipe}]`, named by `arguments.py`) that is taken meanwhile
  is not shared: the run moves to the next free name, `-2`, `-3`, ... (`rename`);
- a folder the user named (`--output_dir`) that did not exist when the run parsed its arguments (`existed` False)
  but exists now was created by another run starting at the same time: the run stops with one line. One that
  existed already is the user's, used as before (a finished or unfinished run in it is refused by `train.py`'s
  `check_output_dir` unless `--overwrite_output_dir`).

A launched run of several processes (`accelerate launch`, `torchrun`: `WORLD_SIZE` > 1) keeps the name every process
parsed, since the processes cannot agree on a renamed one; `train.py` claims only in a single process. A path that
is a file or cannot be written is left to `disk_errors.writable_output_dir`, which says so in one line.

Tests: tests/test_run_folders.py (claims started together in threads, a taken default folder, the default name).
"""

from __future__ import annotations

import os

from .arguments import ConfigError, next_name


def claim_run_folder(output_dir: str, rename: bool, existed: bool = False) -> tuple[str, bool]:
    """Create the run's folder with `os.mkdir` (parents as needed): (the folder, whether this call created it).
    `rename`: a taken folder is passed over for the next free `-N` name; else see the module docstring."""
    candidate = output_dir
    while True:
        try:
            parent = os.path.dirname(candidate)
            if parent:
                os.makedirs(parent, exist_ok=True)
            os.mkdir(candidate)
            return candidate, True
        except FileExistsError:
            if rename:
                candidate = next_name(candidate)
                continue
            if not existed and os.path.isdir(candidate):
                raise ConfigError(
                    f"output_dir: {candidate} was created by another run starting at the same time; give each run its "
                    f"own --output_dir (or leave it out: each run then gets a new folder under runs/)."
                ) from None
            return candidate, False
        except OSError:  # a file on the way, a read-only folder: writable_output_dir says which, in one line
            return candidate, False
