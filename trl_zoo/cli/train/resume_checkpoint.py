"""Where a `trl-zoo train` run starts: the checkpoint it resumes from, or afresh in an output_dir no earlier run holds.

    resume_checkpoint(value, output_dir)  ->  the checkpoint folder, or None for a fresh run
    check_output_dir(output_dir, overwrite)   a fresh run never replaces an earlier one silently

`resume_from_checkpoint` is read as `trl grpo` users write it (a checkpoint path, or `true` for the last complete one);
a checkpoint with a truncated or corrupt file is refused naming the file. Bad input raises `ConfigError` (one line).

Tests: tests/test_cli.py (resume, an output folder holding a run), tests/test_resume_refusals.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import TrainerState
from transformers.trainer_utils import get_last_checkpoint

from ...components.checkpoint_integrity import check_checkpoint
from ...components.resume import last_complete_checkpoint
from ..errors import ConfigError
from ..report.run_log import SUMMARY_FILE


def resume_checkpoint_given(value: str | bool | None) -> bool:
    """Whether `resume_from_checkpoint` asks to resume (a path or `true`), not a fresh run (None or `false`)."""
    return value is not None and str(value).lower() != "false"


def resume_checkpoint(value: str | bool | None, output_dir: str, log=print) -> str | None:
    """The checkpoint folder `resume_from_checkpoint` names, read as `trl grpo` users write it: a checkpoint path,
    or `true` for the last complete `checkpoint-N` folder in output_dir (one with trainer_state.json; a newer one
    whose save did not finish is skipped, saying so); None or `false` for a fresh run. A checkpoint with a truncated
    or corrupt file raises CorruptCheckpointError naming the file."""
    if not resume_checkpoint_given(value):
        return None
    if str(value).lower() == "true":
        last = last_complete_checkpoint(output_dir, log)
        if last is None:
            unfinished = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
            why = f" (only unfinished saves: no {TRAINER_STATE_NAME})" if unfinished else ""
            overwrite = " and give --overwrite_output_dir true" if unfinished else ""
            raise ConfigError(
                f"resume_from_checkpoint: no complete checkpoint-N folder in {output_dir} to resume from{why}; "
                f"to start afresh, drop --resume_from_checkpoint{overwrite}."
            )
        check_checkpoint(last)
        return last
    if not os.path.isfile(os.path.join(value, TRAINER_STATE_NAME)):
        raise ConfigError(f"resume_from_checkpoint: {value} is not a checkpoint folder (no {TRAINER_STATE_NAME}).")
    check_checkpoint(value)
    return value


def check_output_dir(output_dir: str, overwrite: bool):
    """A fresh run never replaces an earlier one silently: an output_dir holding a finished run (summary.json) or
    an unfinished run's checkpoints is reused only to resume it or with `overwrite_output_dir`."""
    finished = os.path.isfile(os.path.join(output_dir, SUMMARY_FILE))
    last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
    if overwrite or not (finished or last):
        return
    earlier = "a finished run (summary.json)" if finished else f"an unfinished run ({Path(last).name})"
    resume = " --resume_from_checkpoint true to continue it," if last else ""
    raise ConfigError(
        f"output_dir: {output_dir} already holds {earlier}; give --output_dir NEW,{resume} or "
        f"--overwrite_output_dir true to replace it."
    )


def checkpoint_step(checkpoint: str) -> int:
    """The training step a checkpoint was saved at."""
    return TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME)).global_step
