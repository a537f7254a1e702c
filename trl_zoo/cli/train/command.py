"""`trl-zoo train`: prepare the run, train, save, summarize and report.

    train_command(argv)                   the command: its arguments, then `run_train`
    run_train(...)         ->  RunSummary  held-out accuracy before and after RL, written to summary.json

`run_train` in steps:

    claim the run's folder                                            run_folder.py
    prepare everything up to `trainer.train()` (`TrainingSetup`)      training_setup.py (its own steps listed there)
    say what a real model on a CPU will cost                          ../environment/cpu_run_notice.py
    say where the run starts, train, save the adapter (or model)      here
    write summary.json and the model card, say the outcome, report    run_summary.py

Bad input found while setting up raises `ConfigError` (one line naming the field); under a launch, an error of one
process before training stops every process, said once (`../environment/launch_errors.py`). Errors during
training itself are not configuration errors and keep their traceback, but for an output_dir that cannot be written and
a full disk while saving (`../environment/disk_errors.py`: one line each).

Tests: tests/test_cli.py (a run end to end, resume, output folder checks), tests/test_configs.py,
tests/test_trl_grpo_fields.py (TRL's GRPOConfig fields reach the trainer), tests/test_replay_generations.py,
tests/test_run_folders.py (a refused run's folder removed).
"""

from __future__ import annotations

import os
import shutil
import time

from transformers.trainer_utils import get_last_checkpoint

from ...components.checkpoint_integrity import CheckpointError
from ...components.prompt_length import PromptTooLongError
from ...components.resume import interrupted_message as resume_interrupted_message
from ...components.reward_watchdog import RewardTimeoutError
from ...components.rewards import RewardOutputError
from ...dataset_values import DatasetValueError
from ..arguments.train_arguments import parse_train_args
from ..environment.cpu_run_notice import notice_for_run
from ..environment.cpu_threads import apply_cpu_threads
from ..environment.disk_errors import raise_if_disk_full, writable_output_dir
from ..environment.launch_errors import agreed_step
from ..errors import AnotherProcessFailed, ConfigError, TrainingInterrupted, one_line
from .resume_checkpoint import checkpoint_step, resume_checkpoint_given
from .run_folder import shared_run_folder
from .run_summary import RunSummary, record_and_report, run_summary
from .training_setup import TrainingSetup, prepare_training


def interrupted_message(step: int, output_dir: str) -> str:
    return resume_interrupted_message(step, output_dir, resume_with="--resume_from_checkpoint true")


def run_train(task_args, training_args, model_args, log=print) -> RunSummary:
    """Prepare, measure held-out accuracy, train with RL, measure again, save the adapter and a report.

    A resumed run takes its accuracy before RL from the run log (step 0) and trains on from the checkpoint;
    `train_seconds` and `total_seconds` count this process only. A run refused for bad input (ConfigError) before
    it saved a checkpoint removes the output_dir it created, so the next run of the same preset takes its name."""
    parent = os.path.dirname(os.path.abspath(training_args.output_dir))
    parent_created = not os.path.exists(parent)  # e.g. runs/ on a first run: removed too if the run is refused
    folder = None
    try:
        with agreed_step():  # launch_errors.py: the folder unwritable for one process stops them all
            folder = shared_run_folder(  # run_folder.py: claimed by the main process, the same in every process
                training_args.output_dir, rename=getattr(task_args, "default_output_dir", False),
                resuming=resume_checkpoint_given(training_args.resume_from_checkpoint), training_args=training_args,
            )
            training_args.output_dir = folder.path
            writable_output_dir(training_args.output_dir)
        return _run_train(task_args, training_args, model_args, log)
    except (ConfigError, AnotherProcessFailed):
        if folder and folder.created and os.path.isdir(folder.path) and not get_last_checkpoint(folder.path):
            shutil.rmtree(folder.path)
            if parent_created and os.path.isdir(parent) and not os.listdir(parent):
                os.rmdir(parent)
        raise
    finally:
        if folder is not None:
            folder.release()


def _run_train(task_args, training_args, model_args, log=print) -> RunSummary:
    started = time.perf_counter()
    try:
        prepared = prepare_training(task_args, training_args, model_args, log)
    except (ValueError, TypeError) as error:  # bad input found while setting up: one line, no traceback
        raise ConfigError(one_line(error)) from None
    trainer = prepared.trainer
    trainer.interrupt_notice = False  # the CLI says it in its own line (TrainingInterrupted)
    resumed_at = checkpoint_step(prepared.checkpoint) if prepared.checkpoint else 0
    notice_for_run(trainer, prepared.heldout_size, resumed_at, task_args, training_args, log)  # a real model on a CPU
    _before_training(prepared, training_args, model_args, log)
    train_seconds = _train_and_save(prepared, training_args)
    summary = run_summary(prepared, training_args, train_seconds, started)
    return record_and_report(summary, prepared, task_args, training_args, model_args, log)


def _before_training(prepared: TrainingSetup, training_args, model_args, log):
    """A resumed run's starting point and its held-out accuracy before RL (from the run log, else measured now),
    then the line saying what the run trains."""
    accuracy = prepared.accuracy
    if prepared.checkpoint:
        log(f"Resuming from {prepared.checkpoint} (step {checkpoint_step(prepared.checkpoint)}).")
    if prepared.checkpoint and accuracy is not None and 0 not in accuracy.results:
        # a run log without its step-0 record: the base policy, measured before the checkpoint is loaded (under FSDP
        # this sees the model before accelerate prepares it; a fresh run measures in on_train_begin instead)
        try:
            accuracy.measure(prepared.trainer.model, 0, prepared.trainer.state)
        except (RewardOutputError, RewardTimeoutError) as error:
            raise ConfigError(one_line(error)) from None
    elif prepared.checkpoint and accuracy is not None:
        log(f"Held-out greedy accuracy before RL: {accuracy.history[0][1]:.1%} (from the run log).")
    length = (
        f"{training_args.max_steps} step{'s' if training_args.max_steps != 1 else ''}"
        if training_args.max_steps > 0
        else f"{training_args.num_train_epochs:g} epoch{'s' if training_args.num_train_epochs != 1 else ''}"
    )
    no_heldout = "No held-out set (num_heldout 0), so no held-out evaluation. " if accuracy is None else ""
    log(
        f"{no_heldout}Training with loss_type={training_args.loss_type!r}, "
        f"{'LoRA' if model_args.use_peft else 'full'} fine-tuning, {length} ..."
    )


def _train_and_save(prepared: TrainingSetup, training_args) -> float:
    """Train (from the checkpoint, when resuming) and save the adapter (or model); the seconds training took."""
    trainer = prepared.trainer
    train_started = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=prepared.checkpoint)
    except KeyboardInterrupt:  # Ctrl-C: one line saying what was saved, no traceback (the CLI exits 130)
        raise TrainingInterrupted(interrupted_message(trainer.state.global_step, training_args.output_dir)) from None
    except (PromptTooLongError, RewardOutputError, RewardTimeoutError, CheckpointError, DatasetValueError) as error:
        # bad input only training finds (DatasetValueError: a streamed row's value)
        raise ConfigError(one_line(error)) from None
    except Exception as error:  # a full disk while saving a checkpoint: one line (other errors keep their traceback)
        raise_if_disk_full(error, training_args.output_dir, "a checkpoint")
        raise
    train_seconds = time.perf_counter() - train_started
    try:
        trainer.save_model(training_args.output_dir)
    except Exception as error:
        raise_if_disk_full(error, training_args.output_dir, "the model")
        raise
    return train_seconds


def train_command(argv: list[str]) -> int:
    log = print if os.environ.get("RANK", "0") == "0" else silent  # a launch's processes: its main one speaks
    with agreed_step(config_errors=(ValueError, TypeError)):  # launch_errors.py: a failed process stops them all
        task_args, training_args, model_args = parse_train_args(argv, log)
    apply_cpu_threads(training_args.use_cpu)  # as `trl grpo`'s launcher: see cpu_threads.py
    run_train(task_args, training_args, model_args, log)
    leave_process_group()
    return 0


def leave_process_group() -> None:
    """Under a launch, wait until every process has finished its run, then take the process group down, as torch
    asks of a program that made one. Without it a process exited while the main one still wrote the report, with the
    group alive, and a test launch once aborted at that exit ("terminate called without an active exception",
    exit -6), failing the launch."""
    import torch.distributed as distributed

    if distributed.is_available() and distributed.is_initialized():
        distributed.barrier()
        distributed.destroy_process_group()


def silent(*args, **kwargs):
    pass
