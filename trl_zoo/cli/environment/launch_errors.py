"""An error before training under a distributed launch: every process learns of it, all exit alike, one says it.

    with agreed_step():      a step of the run's setup, run by every process of the launch
        ...

`trl-zoo train` sets up in steps (its arguments; the run folder's claim and check; its data and policy; its
trainer), each run by every process. A process that failed in one used to stop alone: the others went on building
the run and died in their next collective with a gloo or NCCL traceback (the folder unwritable on machine 0 only),
or every process printed the same line (a bad setting). At the end of each step every process now tells the others
whether it failed (one `all_gather_object` over the launch's process group, made for it when the error came before
transformers made one): when one did, the failed process of the lowest rank prints its error (the CLI's one line, or
its traceback), every process waits for that at a barrier (a launcher stops the others as soon as one process ends),
the process group is taken down, and every process raises `AnotherProcessFailed`, which the CLI turns into that
process's exit status without a word.

A step must hold no other collective, or a failed process would meet the others' collective with this one: the
steps end before each (the folder's broadcast is inside its step, which every process runs to its end; the
trainer's construction is a step of its own). Launched processes that have no process group (on a CPU without
`use_cpu`, transformers runs each alone) cannot tell each other: there only the first process (`RANK` 0) speaks.
Errors during training are not agreed on (the others are inside TRL's collectives then).

Tests: tests/test_launched_errors.py (two processes: a folder unwritable on process 0 only, data missing on process 1
only, a bad setting on both).
"""

from __future__ import annotations

import os
import sys
import traceback
from contextlib import contextmanager

from ..errors import ONE_LINE_ERRORS, AnotherProcessFailed, ConfigError, TrainingInterrupted, error_line, one_line

COMMAND = "train"  # the command whose steps are agreed on


def exit_status(error: BaseException) -> int:
    """The status the CLI exits with for `error` (`cli/__init__.py`)."""
    if isinstance(error, TrainingInterrupted):
        return 130
    return 2 if isinstance(error, ONE_LINE_ERRORS) else 1


def launched() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def _process_group(failed: bool):
    """torch.distributed when the launch's processes share a process group of more than one process, None when they
    do not (or no launch started this one); made here (`PartialState`, as transformers makes it) for a process that
    failed before its arguments made one, so that it can meet the others."""
    import torch.distributed as distributed

    if failed and not distributed.is_initialized():
        from accelerate import PartialState
        from accelerate.utils import parse_flag_from_env
        from torch import cuda

        try:
            PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU") or not cuda.is_available())
        except Exception:  # no rendezvous to reach: this process speaks for itself
            return None
    if distributed.is_initialized() and distributed.get_world_size() > 1:
        return distributed
    return None


def _say(error: Exception) -> None:
    """The error as the CLI says it: its one line, or its traceback."""
    if isinstance(error, ONE_LINE_ERRORS):
        print(error_line(COMMAND, error), file=sys.stderr)
    else:
        traceback.print_exception(error)
    sys.stderr.flush()


def _settle(error: Exception | None) -> None:
    """Return when no process of the launch failed; else, once the failed process of the lowest rank has said its
    error, raise `AnotherProcessFailed` with that process's exit status in every process."""
    group = _process_group(failed=error is not None)
    if group is None:
        if error is not None and os.environ.get("RANK", "0") != "0":
            raise AnotherProcessFailed(exit_status(error)) from None  # the first process has failed alike
        if error is not None:
            raise error
        return
    statuses = [None] * group.get_world_size()
    group.all_gather_object(statuses, None if error is None else exit_status(error))
    failed = [(rank, status) for rank, status in enumerate(statuses) if status is not None]
    if not failed:
        return
    speaker, status = failed[0]
    if group.get_rank() == speaker:
        _say(error)
    group.barrier()
    group.destroy_process_group()  # every process stops here: none is left to meet in a collective
    raise AnotherProcessFailed(status) from None


@contextmanager
def agreed_step(config_errors: tuple[type[Exception], ...] = ()):
    """Run a step of the setup; at its end, every process of the launch agrees on whether one failed (module
    docstring). An error of a type in `config_errors` counts as a `ConfigError` of its one line (bad input found by a
    library). Outside a launch, the step's error goes on as it is."""
    try:
        yield
    except AnotherProcessFailed:
        raise
    except Exception as error:
        failure = error
        if config_errors and isinstance(error, config_errors) and not isinstance(error, ONE_LINE_ERRORS):
            failure = ConfigError(one_line(error))
        if not launched():
            if failure is error:
                raise
            raise failure from None
        _settle(failure)
    else:
        if launched():
            _settle(None)
