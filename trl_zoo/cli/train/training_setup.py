"""A `trl-zoo train` run's preparation: everything up to `trainer.train()`, in steps.

    prepare_training(task_args, training_args, model_args)  ->  TrainingSetup

    1. what QLoRA needs; where the run starts: the checkpoint it resumes, or afresh     policy.py, resume_checkpoint.py
    2. its rewards                                                                      ../rewards/run_rewards.py
    3. its data: a built-in task's (with its expert traces), or a dataset's             here, training_data.py
    4. its policy: the path, resolved once, and its tokenizer (a tool task's template)   policy.py
    5. its prompts, formatted and checked against the policy's positions                policy_prompts.py
       A*-PO's reference samples scored into the data (--reference_reward_samples)       reference_samples.py
    6. the rewards' columns checked; shuffled for the null-reward control               ../rewards/run_rewards.py
    7. how the trainer loads the policy (init kwargs, DDP, LoRA)                        policy.py
    8. its run log and greedy held-out evaluation                         ../report/run_log.py, heldout_accuracy.py
    9. the trainer, with the run's own progress lines                                   progress.py

Bad input found on the way raises `ConfigError` (one line naming the field).

Tests: tests/test_cli.py (a run end to end, resume, output folder checks), tests/test_trl_grpo_fields.py (TRL's
GRPOConfig fields reach the trainer), tests/test_run_log.py (the run log's writer), tests/test_replay_generations.py.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from datasets import IterableDataset
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from trl import get_quantization_config

from ...tasks import get_task
from ...tasks.chat_arithmetic import ChatArithmeticTask
from ...tasks.evaluation import HeldOutAccuracyCallback
from ...trainer import GRPOTrainer
from ..environment.launch_errors import agreed_step
from ..errors import ConfigError, one_line
from ..report.run_log import METRICS_FILE, SUMMARY_FILE, RunLog, TrainLogRecorder
from ..rewards.run_rewards import RunRewards, run_rewards
from .heldout_accuracy import heldout_accuracy_callback
from .policy import check_quantization, load_tokenizer, prepare_policy_loading, resolve_policy
from .policy_prompts import policy_positions, policy_prompts
from .progress import ConciseProgress
from .reference_samples import add_reference_rewards, check_reference_samples
from .resume_checkpoint import check_output_dir, checkpoint_step, resume_checkpoint
from .training_data import _load_dataset_splits, column_names


@dataclass(frozen=True)
class TrainingSetup:
    """What `prepare_training` built: everything `run_train` needs around `trainer.train()`."""

    trainer: GRPOTrainer
    accuracy: HeldOutAccuracyCallback | None  # greedy held-out accuracy and its history; None: no held-out set
    source: str  # the built-in task's name or the dataset_name
    model_path: str  # the base policy: model_name_or_path or the bootstrapped tiny policy's directory
    heldout_size: int
    reward_names: tuple[str, ...]
    heldout_reward: str | None  # the reward function that scores the greedy held-out evaluation (None: none)
    checkpoint: str | None  # the checkpoint folder the run resumes from, None for a fresh run


def prepare_training(task_args, training_args, model_args, log=print) -> TrainingSetup:
    """Everything up to `trainer.train()`: model, data, rewards, callbacks. Raises ConfigError on bad input.

    A resumed run continues its run log: the records up to the checkpoint's step stay, and the held-out accuracy
    history starts from their evaluations. Under a launch, steps 1-8 and the trainer are each agreed on by every
    process (`launch_errors.py`): a process's error there, its data missing say, stops every process."""
    with agreed_step(config_errors=(ValueError, TypeError)):
        inputs = _trainer_inputs(task_args, training_args, model_args, log)
    accuracy_callback, rewards, heldout = inputs.accuracy, inputs.rewards, inputs.heldout
    progress = [TrainLogRecorder(inputs.run_log), ConciseProgress(accuracy_callback, log)]
    with agreed_step(config_errors=(ValueError, TypeError)):  # the trainer's construction may hold collectives
        trainer = _build_trainer(inputs.model_path, rewards.for_trainer, inputs.train, heldout, inputs.tokenizer,
                                 inputs.peft_config, [*filter(None, [accuracy_callback]), *progress], training_args,
                                 model_args, inputs.environment_factory)
    return TrainingSetup(
        trainer=trainer,
        accuracy=accuracy_callback,
        source=inputs.source,
        model_path=inputs.model_path,
        heldout_size=0 if heldout is None else len(heldout),
        reward_names=rewards.listed,
        heldout_reward=rewards.heldout_reward,
        checkpoint=inputs.checkpoint,
    )


class _TrainerInputs(NamedTuple):
    """Steps 1-8's results: what the trainer is built from."""

    checkpoint: str | None
    rewards: RunRewards
    train: object
    heldout: object
    source: str
    model_path: str
    tokenizer: object
    peft_config: object
    run_log: RunLog
    accuracy: HeldOutAccuracyCallback | None
    environment_factory: object  # TRL's, for a task whose rollouts use tools; None otherwise


def _trainer_inputs(task_args, training_args, model_args, log) -> _TrainerInputs:
    """Steps 1-8: everything the trainer is built from."""
    check_quantization(model_args)
    checkpoint = resume_checkpoint(training_args.resume_from_checkpoint, training_args.output_dir, log)
    if checkpoint is None:
        check_output_dir(training_args.output_dir, task_args.overwrite_output_dir)
    rewards = run_rewards(task_args, training_args.max_completion_length, log)
    check_reference_samples(task_args.reference_reward_samples, training_args)
    task = get_task(task_args.task) if task_args.dataset_name is None and not task_args.datasets else None
    train, heldout, source = _training_splits(task, task_args, training_args, model_args, rewards.reads, log)
    model_path = resolve_policy(task, task_args, training_args, model_args, log)
    positions = policy_positions(model_path, model_args, training_args)
    tokenizer = load_tokenizer(model_path, model_args, training_args)
    environment_factory = getattr(task, "environment_factory", None)  # a task whose rollouts use tools
    if environment_factory is not None:
        tokenizer = task.tokenizer_for_tools(tokenizer)
    train, heldout = policy_prompts(task, train, heldout, source, tokenizer, positions, task_args, training_args, log)
    rewards.check_columns(column_names(train))
    if task_args.reference_reward_samples:  # the true rewards, before the null-reward control shuffles them
        train = add_reference_rewards(train, model_path, tokenizer, rewards.functions,
                                      task_args.reference_reward_samples, training_args, model_args, log,
                                      resumed=checkpoint is not None)
    if task_args.null_reward_control:
        rewards = rewards.shuffled(training_args.seed, log)
    peft_config = prepare_policy_loading(training_args, model_args, model_path)
    run_log = _open_run_log(training_args, checkpoint)
    accuracy_callback = None if heldout is None else heldout_accuracy_callback(
        heldout, tokenizer, rewards.scorer, run_log, task_args, training_args, log, environment_factory
    )
    return _TrainerInputs(checkpoint, rewards, train, heldout, source, model_path, tokenizer, peft_config, run_log,
                         accuracy_callback, environment_factory)


def _training_splits(task, task_args, training_args, model_args, reads: dict[str, str], log):
    """(train, held-out, source): a built-in task's splits (its first `num_heldout` held-out prompts), or a
    dataset's (`training_data.py`); the held-out set is None with `num_heldout 0`."""
    if task_args.expert_traces and not isinstance(task, ChatArithmeticTask):
        raise ConfigError(f"expert_traces: the chat_arithmetic tasks build expert traces from their own labels; "
                          f"{task_args.task if task is not None else 'a dataset'} has none (give the dataset's own "
                          "expert column to --expert_column instead).")
    if task is not None:
        train = task.train_dataset(expert_traces=True) if task_args.expert_traces else task.train_dataset()
        heldout, source = task.heldout_dataset(), task.name
        if task_args.num_heldout == 0:
            log(f"{source}: num_heldout 0, so no held-out evaluation.")
            heldout = None
        elif task_args.num_heldout is not None:  # evaluate on the first N held-out prompts only
            heldout = heldout.select(range(min(task_args.num_heldout, len(heldout))))
    else:
        if model_args.model_name_or_path is None:
            field = "datasets" if task_args.datasets else "dataset_name"
            raise ConfigError(f"model_name_or_path: required with {field} (a hub name or a local directory).")
        train, heldout, source = _load_dataset_splits(task_args, training_args.seed, log, reads, training_args)
        if isinstance(train, IterableDataset) and training_args.max_steps <= 0:
            raise ConfigError("max_steps: a streamed dataset has no length to count epochs in; give --max_steps N.")
    if heldout is None and training_args.eval_strategy != "no":
        raise ConfigError("eval_strategy: TRL's evaluation needs an evaluation set, and num_heldout 0 keeps none.")
    return first_prompts(train, task_args.train_prompts, log), heldout, source


def first_prompts(train, count: int, log=print):
    """The training set's first `count` rows (`--train_prompts`; 0: all of it)."""
    if count == 0:
        return train
    if count < 0:
        raise ConfigError(f"train_prompts: must be ≥ 0 (0: the whole training set), got {count}.")
    if isinstance(train, IterableDataset):
        return train.take(count)
    if count > len(train):
        raise ConfigError(f"train_prompts: {count} is more than the training set's {len(train)} prompts; lower it "
                          f"or give 0 (all).")
    log(f"train_prompts: training on the first {count} of {len(train)} prompts.")
    return train.select(range(count))


def _open_run_log(training_args, checkpoint: str | None) -> RunLog:
    """The run log in output_dir (created here), written by the first process only; a fresh run removes an
    earlier run's summary.json (it writes its own at the end), a resumed one keeps the records up to its step."""
    output_dir = Path(training_args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    main_process = training_args.process_index == 0  # the run's files are written by the first process only
    if checkpoint is None and main_process:
        (output_dir / SUMMARY_FILE).unlink(missing_ok=True)
    return RunLog(output_dir / METRICS_FILE, resume_step=checkpoint_step(checkpoint) if checkpoint else None,
                  main_process=main_process)


def _build_trainer(model_path, rewards, train, heldout, tokenizer, peft_config, callbacks, training_args,
                   model_args, environment_factory=None) -> GRPOTrainer:
    """The trainer, printing the run's own progress lines in place of transformers' printer and progress bar."""
    try:
        trainer = GRPOTrainer(
            model=model_path,
            reward_funcs=rewards,
            args=training_args,
            train_dataset=train,
            # TRL's evaluation (eval_strategy, eval_steps) runs on the held-out split, as `trl grpo` on its test split
            eval_dataset=heldout if training_args.eval_strategy != "no" else None,
            processing_class=tokenizer,
            peft_config=peft_config,
            quantization_config=get_quantization_config(model_args),
            callbacks=callbacks,
            environment_factory=environment_factory,
        )
    except (OSError, ValueError, TypeError) as error:
        raise ConfigError(one_line(error)) from None
    output_layer = trainer.model.get_output_embeddings()
    if output_layer is not None and not output_layer.weight.requires_grad:
        # FSDP2 warns that the (tied) output layer "did not run forward before backward": TRL's fused LM head reads
        # its weight without calling it. A frozen weight (an adapter's run) gets no gradient, so the warning cannot
        # concern training. A trained one keeps the warning: its gradient under FSDP2 equals DDP's on CPU processes
        # (tests/test_fsdp_multiprocess.py), not yet compared on GPUs.
        warnings.filterwarnings("ignore", message=r".*did not run forward before backward, which is error-prone")
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer
