"""A run's folder: claimed when the run starts, by one process of a launch, and never shared with another run.

    claim_run_folder(output_dir, rename, resuming)         ->  RunFolder   in this process
    shared_run_folder(output_dir, rename, resuming, args)  ->  RunFolder   the main process claims, every process of
                                                                           the launch gets that folder

A folder is a run's when it holds `MARKER` (`_trl_zoo_run`; `.trl_zoo_run` before 2026-11-29), which the claim
creates; its leading underscore keeps it out of `Trainer.push_to_hub`'s upload of the folder. While the run lasts its
process holds an exclusive lock on the marker (`fcntl.flock`; the kernel releases it when the process ends, however
it ends), and the marker says which process that is. A claim:

- of the default folder (`runs/{task}-{loss or preset}[-{speed_recipe}]`, named by `train_arguments.py`; `rename`)
  creates it with `os.mkdir`, which only one process can win; a taken name is passed over for the next, `-2`, `-3`, ...
- of a folder the user named (`--output_dir`) takes the marker's lock: one run of those started together, or one
  after another while the first still runs, gets it; the others stop with one line. A folder that exists, holds
  files and has no marker is not a run's (a folder of yours, `..`): a fresh run stops with one line rather than
  write its adapter, README.md and logs among your files. A resumed run (`resuming`) needs no marker: its folder
  holds the checkpoint it resumes (a `trl grpo` run's too). Whether a run's folder already holds a finished or
  unfinished run is `resume_checkpoint.py`'s `check_output_dir`.

Under a distributed launch (`accelerate launch`, `torchrun`) every process parses its own arguments, at its own
moment, so each may see other folders taken and pick another default name; only the main process (global rank 0,
never each machine's first process) claims, and the name it claimed (or its refusal) is broadcast to the others,
which use it as it is, on every machine. Launched processes that would not train together (on a CPU without
`use_cpu`, transformers runs each alone) stop with one line.

A program that launches runs and writes beside them (a benchmark's log) makes the folder first with
`prepare_run_folder`: the marker, unlocked, says the folder is meant for a run.

A path that is a file or cannot be written is left to `disk_errors.writable_output_dir`, which says so in one line. A
marker that is a symbolic link is refused in one line, never written through (`run_files.py`), as every file
trl_zoo writes into the folder.
Where `fcntl` is missing (Windows) there is no lock: two runs given one named folder at once are not told apart.

Tests: tests/test_run_folders.py (claims started together, a folder in use, a folder of the user's, a taken default
folder, the default name), tests/test_launched_run.py (two processes started apart: one folder),
tests/test_machines.py (two machines, each with its own disk: the folder only on the first).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from typing import IO

from ...run_files import LinkedRunFileError, open_for_writing
from ..arguments.train_arguments import next_name
from ..errors import ConfigError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

MARKER = "_trl_zoo_run"
EARLIER_MARKERS = (".trl_zoo_run",)  # the same marker under an earlier name: a folder holding one is a run's too


@dataclass
class RunFolder:
    """A claimed folder: `created` by this claim (a run refused before its first checkpoint removes it), and the
    open marker whose lock this process holds until `release` (None in the processes that did not claim)."""

    path: str
    created: bool
    marker: IO | None = None

    def release(self):
        if self.marker is not None:
            self.marker.close()  # closing the file releases its lock
            self.marker = None


def claim_run_folder(output_dir: str, rename: bool, resuming: bool = False) -> RunFolder:
    """Create or take the run's folder and lock its marker (see the module docstring); ConfigError when it is in use
    by another run or, for a fresh run, holds files of no run."""
    candidate = output_dir
    while True:
        try:
            parent = os.path.dirname(candidate)
            if parent:
                os.makedirs(parent, exist_ok=True)
            os.mkdir(candidate)
            created = True
        except FileExistsError:
            if rename:
                candidate = next_name(candidate)
                continue
            created = False
        except OSError:  # a file on the way, a read-only folder: writable_output_dir says which, in one line
            return RunFolder(candidate, created=False)
        if not (created or resuming):
            refuse_other_files(candidate)
        try:
            return RunFolder(candidate, created, lock_marker(candidate))
        except OSError:
            return RunFolder(candidate, created)


def prepare_run_folder(folder) -> None:
    """Make `folder` (and its parents) a run's folder before the run starts: created with its marker, unlocked, so a
    program that launches `trl-zoo train --output_dir folder` can write its own files there first (its log, its
    records) and the run still claims it."""
    os.makedirs(folder, exist_ok=True)
    open_for_writing(os.path.join(folder, MARKER), "a").close()


def refuse_other_files(folder: str):
    """ConfigError when `folder` holds files but no marker."""
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return  # writable_output_dir says why
    if entries and not {MARKER, *EARLIER_MARKERS} & set(entries):
        shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
        raise ConfigError(
            f"output_dir: {folder} holds files of no trl-zoo run ({shown}), which the run's adapter, README.md and "
            f"logs could replace; give --output_dir a new or empty folder."
        )


def lock_marker(folder: str) -> IO:
    """The folder's marker, created if missing, opened and locked, stating this process; ConfigError when another
    process holds its lock, or when the marker is a symbolic link (`run_files.py`: never written through)."""
    try:
        marker = open_for_writing(os.path.join(folder, MARKER), "a+")
    except LinkedRunFileError as error:
        raise ConfigError(str(error)) from None
    if fcntl is not None:
        try:
            fcntl.flock(marker, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            marker.seek(0)
            holder = marker.read()
            marker.close()
            raise ConfigError(
                f"output_dir: {folder} is in use by another run{holder_text(holder)}; give this run its own "
                f"--output_dir, or wait until that run ends."
            ) from None
    marker.seek(0)
    marker.truncate()
    marker.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "started": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
    marker.flush()
    return marker


def holder_text(marker_text: str) -> str:
    """' (pid 123 on host, started 2026-01-01 12:00:00)' from a marker's text; '' when it cannot be read."""
    try:
        holder = json.loads(marker_text)
        return f" (pid {holder['pid']} on {holder['host']}, started {holder['started']})"
    except (ValueError, KeyError, TypeError):
        return ""


def shared_run_folder(output_dir: str, rename: bool, resuming: bool, training_args) -> RunFolder:
    """The folder the main process of the launch claimed (`claim_run_folder`), in every process; the main process's
    refusal (or error), raised in every process (`launch_errors.py` has one of them say it). Processes launched
    together that would each train a run of their own (no GPU and `use_cpu` false: transformers then leaves each
    process alone) are refused."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > 1 and training_args.world_size == 1:
        raise ConfigError(
            f"use_cpu: the launcher started {launched} processes, which without a GPU train together only with "
            f"use_cpu true (else each trains a run of its own); add --use_cpu true."
        )
    if training_args.world_size == 1:
        return claim_run_folder(output_dir, rename, resuming)
    from accelerate.utils import broadcast_object_list

    claimed, failure, refusal = None, None, None
    if training_args.process_index == 0:
        try:
            claimed = claim_run_folder(output_dir, rename, resuming)
        except Exception as error:  # sent on, so that no process waits for the name in vain
            failure, refusal = error, str(error)
    path, refusal = broadcast_object_list([claimed and claimed.path, refusal])
    if failure is not None:
        raise failure
    if refusal is not None:
        raise ConfigError(refusal)
    return claimed or RunFolder(path, created=False)
