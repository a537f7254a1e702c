"""`trl-zoo train`: set up the trainer from the parsed arguments, train, measure, save and report.

    prepare_training(...)  ->  TrainingSetup   the trainer, its held-out accuracy callback, what was loaded
    run_train(...)         ->  RunSummary      held-out accuracy before and after RL, written to summary.json

The data a run loads from a dataset, and its held-out split, come from `training_data.py`. Bad input found while
setting up raises `ConfigError` (one line naming the field). Errors during training itself are not configuration
errors and keep their traceback, but for an output_dir that cannot be written and a full disk while saving
(`disk_errors.py`: one line each).

Tests: tests/test_cli.py (a run end to end, resume, output folder checks), tests/test_configs.py,
tests/test_trl_grpo_fields.py (TRL's GRPOConfig fields reach the trainer), tests/test_replay_generations.py.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from datasets import IterableDataset
from transformers import AutoTokenizer, TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerState
from transformers.trainer_utils import get_last_checkpoint
from trl import get_peft_config, get_quantization_config

from ..config.generation_buffer import generation_cycle
from ..hooks.checkpoint_integrity import CheckpointError, check_checkpoint
from ..hooks.prompt_length import PromptTooLongError, characters_per_token, check_prompt_characters
from ..hooks.resume import interrupted_message as resume_interrupted_message
from ..hooks.resume import last_complete_checkpoint
from ..hooks.rewards import RewardOutputError
from ..io.gguf_checkpoint import GGUFError, policy_path
from ..registry import LOSSES
from ..tasks import get_task
from ..tasks.bootstrap import BootstrapRecipe, bootstrap_policy
from ..tasks.chat_arithmetic import ChatArithmeticTask
from ..tasks.evaluation import (
    EvaluationProgress,
    HeldOutAccuracyCallback,
    HeldOutResult,
    greedy_evaluation,
    render_prompt,
)
from ..tasks.evaluation import format_mean_reward as mean_text
from ..tasks.scratchpad import ScratchpadAdditionTask
from ..tasks.scratchpad_bootstrap import bootstrap_scratchpad_policy, scratchpad_recipe
from ..trainer import GRPOTrainer, training_method
from .arguments import ConfigError, one_line, parse_train_args
from .cpu_run_notice import notice_for_run
from .cpu_threads import apply_cpu_threads
from .ddp_unused_parameters import find_unused_parameters
from .disk_errors import raise_if_disk_full, writable_output_dir
from .errors import TrainingInterrupted
from .model_card import model_card
from .null_reward_control import permuted_reward
from .preset_lengths import completion_room_error, position_limit_of
from .report import write_report
from .reward_names import check_reward_columns, heldout_scorer, read_columns, resolve_reward
from .run_folder import shared_run_folder
from .run_log import METRICS_FILE, SUMMARY_FILE, RunLog, TrainLogRecorder, load_run
from .training_data import (  # noqa: F401  (re-exported: they were this module's before the split)
    DATA_FILE_BUILDERS,
    STREAMED_HELDOUT,
    _load_dataset_splits,
    chat_prompts,
    column_names,
    heldout_count,
    mixture_test_entries,
    split_size,
)


def interrupted_message(step: int, output_dir: str) -> str:
    return resume_interrupted_message(step, output_dir, resume_with="--resume_from_checkpoint true")


@dataclass(frozen=True)
class TrainingSetup:
    """What `prepare_training` built: everything `run_train` needs around `trainer.train()`."""

    trainer: GRPOTrainer
    accuracy: HeldOutAccuracyCallback | None  # greedy held-out accuracy and its history; None: no held-out set
    source: str  # the built-in task's name or the dataset_name
    model_path: str  # the base policy: model_name_or_path or the bootstrapped tiny policy's directory
    heldout_size: int
    reward_names: tuple[str, ...]
    heldout_reward: str  # the reward function that scores the greedy held-out evaluation
    checkpoint: str | None  # the checkpoint folder the run resumes from, None for a fresh run


@dataclass(frozen=True)
class RunSummary:
    """A finished run, as written to output_dir/summary.json (`to_json`); `report` is where the run's own report
    went, when one was written (it is not in summary.json, which the report reads)."""

    name: str
    loss_type: str
    task: str
    model: str
    reward_funcs: tuple[str, ...]
    seed: int
    steps: int
    accuracy_before: float | None  # the accuracies are None when the run has no held-out set (heldout_size 0)
    accuracy_after: float | None
    mean_reward_before: float | None  # the held-out mean reward (accuracy counts rewards exactly 1)
    mean_reward_after: float | None
    base_policy: str  # model_name_or_path, or which bootstrapped policy (`base_policy_name`)
    updates_per_batch: int  # optimizer updates per generation batch; 1 is on-policy (every ratio 1)
    heldout_size: int
    best_accuracy: float | None
    best_step: int | None
    train_seconds: float
    total_seconds: float
    adapter_dir: str
    report: str | None = None

    def to_json(self) -> dict:
        return {key: value for key, value in dataclasses.asdict(self).items() if key != "report"}


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


def base_policy_name(model_path: str) -> str:
    """The base policy as a report names it: a bootstrapped built-in policy by its task and recipe (its folder is
    a cache path), any other model by the name or path it was given."""
    bootstrap = Path(model_path, "bootstrap.json")
    if not bootstrap.is_file():
        return model_path
    made = json.loads(bootstrap.read_text())
    recipe = made.get("recipe", {})
    return (
        f"{made.get('task', 'the task')}'s bootstrapped policy (hidden {recipe.get('hidden_size')}, "
        f"{recipe.get('num_layers')} layers, seed {recipe.get('seed')})"
    )


def checkpoint_step(checkpoint: str) -> int:
    return TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME)).global_step


class ConciseProgress(TrainerCallback):
    """One line per logging step: step, sampled reward, latest held-out accuracy and mean reward with the step they
    were measured at, elapsed time. The trainer also logs the last step, so a run shorter than logging_steps (or not
    a multiple of it) shows and records its end."""

    def __init__(self, accuracy_callback: HeldOutAccuracyCallback | None, log=print):
        self.accuracy_callback = accuracy_callback
        self.log = log
        self.started = time.perf_counter()

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= state.max_steps:
            control.should_log = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "eval_reward" in logs:
            self.log(f"  step {state.global_step:>4}/{state.max_steps}  TRL eval reward {logs['eval_reward']:.3f}")
        if logs and "reward" in logs:
            self.log(
                f"  step {state.global_step:>4}/{state.max_steps}  reward {logs['reward']:.3f}  "
                f"{self.latest_heldout()}({time.perf_counter() - self.started:.0f} s)"
            )

    def latest_heldout(self) -> str:
        """The latest held-out measurement and the step it was made at (evaluations are rarer than log lines); nothing
        without a held-out set."""
        if self.accuracy_callback is None:
            return ""
        history = self.accuracy_callback.history
        if not history:
            return "held-out —  "
        step, accuracy = history[-1]
        result = self.accuracy_callback.results[step]
        mean = f", mean reward {mean_text(result.mean_reward)}" if isinstance(result, HeldOutResult) else ""
        return f"held-out {accuracy:.1%}{mean} (at step {step})  "


def prepare_training(task_args, training_args, model_args, log=print) -> TrainingSetup:
    """Everything up to `trainer.train()`: model, data, rewards, callbacks. Raises ConfigError on bad input.

    A resumed run continues its run log: the records up to the checkpoint's step stay, and the held-out accuracy
    history starts from their evaluations."""
    if model_args.load_in_4bit or model_args.load_in_8bit:
        flag = "load_in_4bit" if model_args.load_in_4bit else "load_in_8bit"
        try:
            importlib.import_module("bitsandbytes")
        except ImportError:
            raise ConfigError(f"{flag}: QLoRA needs bitsandbytes; pip install bitsandbytes.") from None
        if not torch.cuda.is_available():
            raise ConfigError(f"{flag}: QLoRA needs a CUDA GPU; drop --{flag} to train with plain LoRA here.")
        if not model_args.use_peft:
            raise ConfigError(f"{flag}: a quantized model can only be fine-tuned with an adapter; set use_peft true.")
    checkpoint = resume_checkpoint(training_args.resume_from_checkpoint, training_args.output_dir, log)
    if checkpoint is None:
        check_output_dir(training_args.output_dir, task_args.overwrite_output_dir)

    builtin = task_args.dataset_name is None and not task_args.datasets
    default_reward = get_task(task_args.task).reward_name if builtin else "exact_match"
    # As `trl grpo`: the reward model (if any) first, then the reward functions.
    reward_names = task_args.reward_funcs or ([] if task_args.reward_model_name_or_path else [default_reward])
    functions = [resolve_reward(name, training_args.max_completion_length, log) for name in reward_names]
    scorer = heldout_scorer(functions)
    readers = [*zip(reward_names, functions), ("exact_match (the held-out evaluation's scorer)", scorer)]
    reads = {column: name for name, function in reversed(readers) for column in read_columns(function)}

    if builtin:
        task = get_task(task_args.task)
        train, heldout = task.train_dataset(), task.heldout_dataset()
        source = task.name
        model_path = model_args.model_name_or_path
        if task_args.num_heldout == 0:
            log(f"{source}: num_heldout 0, so no held-out evaluation.")
            heldout = None
        elif task_args.num_heldout is not None:  # evaluate on the first N held-out prompts only
            heldout = heldout.select(range(min(task_args.num_heldout, len(heldout))))
        if model_path is None and isinstance(task, ChatArithmeticTask):
            model_path = task.default_model
        if model_path is None and LOSSES.get(training_args.loss_type).spec.requires_moe:
            raise ConfigError(
                f"loss_type: {training_args.loss_type!r} needs a Mixture-of-Experts model and the built-in task's "
                "policy is dense; give --model_name_or_path of an MoE model (Qwen2-MoE, Qwen3-MoE, Mixtral, ...) or "
                "use a dense loss such as 'gmpo'."
            )
        if model_path is None and isinstance(task, ScratchpadAdditionTask):
            model_path = str(bootstrap_scratchpad_policy(task, scratchpad_recipe(task, training_args.seed), log=log))
        elif model_path is None:
            recipe = BootstrapRecipe(
                hidden_size=task_args.bootstrap_hidden_size,
                num_layers=task_args.bootstrap_num_layers,
                target_accuracy=task_args.bootstrap_target_accuracy,
                carry_slip_rate=task_args.bootstrap_carry_slip_rate,
                max_steps=task_args.bootstrap_max_steps,
                check_every=min(50, task_args.bootstrap_max_steps),
                seed=training_args.seed,
            )
            model_path = str(bootstrap_policy(task, recipe, log=log))
    else:
        if model_args.model_name_or_path is None:
            field = "datasets" if task_args.datasets else "dataset_name"
            raise ConfigError(f"model_name_or_path: required with {field} (a hub name or a local directory).")
        train, heldout, source = _load_dataset_splits(task_args, training_args.seed, log, reads)
        model_path = model_args.model_name_or_path
        if isinstance(train, IterableDataset) and training_args.max_steps <= 0:
            raise ConfigError("max_steps: a streamed dataset has no length to count epochs in; give --max_steps N.")
    if heldout is None and training_args.eval_strategy != "no":
        raise ConfigError("eval_strategy: TRL's evaluation needs an evaluation set, and num_heldout 0 keeps none.")

    try:
        model_path = policy_path(model_path, task_args.gguf_file, log)
    except GGUFError as error:
        raise ConfigError(str(error)) from None
    positions = position_limit_of(model_path, model_args.model_revision, training_args.trust_remote_code)
    too_long = completion_room_error(training_args.max_completion_length, positions)
    if too_long:
        raise ConfigError(too_long)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            model_path, revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code
        )
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"model_name_or_path: cannot load a tokenizer from {model_path!r} ({one_line(error)})."
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if builtin and isinstance(task, ChatArithmeticTask):  # a base model (no chat template): a plain-text format
        train, heldout = task.prompts_for(train, heldout, tokenizer, log)
    train, heldout = (
        chat_prompts(d, task_args, tokenizer, f"the {name} split of {source}", log) if d is not None else d
        for d, name in ((train, "training"), (heldout, "held-out"))
    )
    for d, name in ((train, "training"), (heldout, "held-out")):  # a stream's rows: at each generation batch
        if d is not None and not isinstance(d, IterableDataset):  # counted before any is tokenized
            check_prompt_characters(d["prompt"], training_args.max_completion_length, positions,
                                    characters_per_token(tokenizer), f"the {name} split of {source}")
    if builtin:  # a built-in task's prompts are few and short
        prompts = (*train["prompt"], *(heldout["prompt"] if heldout is not None else ()))
        texts = [render_prompt(tokenizer, prompt) for prompt in prompts]
        longest = max(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])
        too_long = completion_room_error(training_args.max_completion_length, positions, longest)
        if too_long:
            raise ConfigError(too_long)

    columns = column_names(train)
    for name, function in zip(reward_names, functions):
        check_reward_columns(name, function, columns)
    if scorer not in functions:
        check_reward_columns("exact_match (the greedy held-out evaluation's scorer)", scorer, columns)
    if task_args.null_reward_control:
        log("null_reward_control: training rewards are shuffled across each batch (a control run); the held-out "
            "evaluation scores with the real reward.")
        functions = [permuted_reward(function, training_args.seed + k) for k, function in enumerate(functions)]
    rewards = [task_args.reward_model_name_or_path] if task_args.reward_model_name_or_path else []
    rewards += functions
    model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
        **(training_args.model_init_kwargs or {}),
    }
    if model_args.load_in_4bit or model_args.load_in_8bit:
        model_init_kwargs["device_map"] = {"": torch.cuda.current_device()}  # quantized weights live on this GPU
    training_args.model_init_kwargs = model_init_kwargs

    training_args.ddp_find_unused_parameters = find_unused_parameters(training_args, model_args, model_path)
    peft_config = get_peft_config(model_args)
    if peft_config is not None and peft_config.target_modules == {"all-linear"}:
        peft_config.target_modules = "all-linear"  # peft's shorthand must be a string, not a one-item list

    output_dir = Path(training_args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    main_process = training_args.process_index == 0  # the run's files are written by the first process only
    if checkpoint is None and main_process:
        (output_dir / SUMMARY_FILE).unlink(missing_ok=True)  # an earlier run's; this run writes its own at the end
    run_log = RunLog(output_dir / METRICS_FILE, resume_step=checkpoint_step(checkpoint) if checkpoint else None,
                     main_process=main_process)
    accuracy_callback = None if heldout is None else _heldout_accuracy(
        heldout, tokenizer, scorer, run_log, task_args, training_args, log
    )
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
            callbacks=[
                *filter(None, [accuracy_callback]), TrainLogRecorder(run_log), ConciseProgress(accuracy_callback, log)
            ],
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
    return TrainingSetup(
        trainer=trainer,
        accuracy=accuracy_callback,
        source=source,
        model_path=model_path,
        heldout_size=0 if heldout is None else len(heldout),
        reward_names=tuple(filter(None, [task_args.reward_model_name_or_path, *reward_names])),
        heldout_reward=reward_names[functions.index(scorer)] if scorer in functions else "exact_match",
        checkpoint=checkpoint,
    )


def _heldout_accuracy(heldout, tokenizer, scorer, run_log, task_args, training_args, log) -> HeldOutAccuracyCallback:
    """The greedy held-out evaluation, every `eval_every_steps`, recorded in the run log (a resumed run's earlier
    evaluations start its history)."""
    heldout_columns = {name: heldout[name] for name in heldout.column_names if name != "prompt"}

    def evaluate(model) -> HeldOutResult:  # every process of a distributed run takes part and gets the same result
        return greedy_evaluation(
            model,
            tokenizer,
            heldout["prompt"],
            max_new_tokens=training_args.max_completion_length,
            reward=scorer,
            reward_kwargs=heldout_columns,
            batch_size=task_args.eval_batch_size,
            across_processes=True,
            progress=EvaluationProgress(log) if training_args.process_index == 0 else None,
            trainer_state=accuracy_callback.state,  # the trainer's, as TRL hands it to a reward
            nan_rewards=training_args.nan_rewards,  # training's reward checks and watchdog
            reward_timeout_warning=training_args.reward_timeout_warning,
        )

    def record(step: int, result: HeldOutResult):
        if step == 0:
            graded = (
                "; the reward is graded: accuracy counts completions with reward exactly 1" if result.graded else ""
            )
            log(f"Held-out greedy accuracy before RL: {result.accuracy:.1%}, mean reward "
                f"{mean_text(result.mean_reward)} ({len(heldout)} prompts{graded}).")
        if training_args.process_index == 0:  # one record per measurement, however many processes measured
            run_log.write({"kind": "eval", "step": step, "heldout_accuracy": result.accuracy,
                           "heldout_mean_reward": result.mean_reward, "heldout_reward_graded": result.graded})

    earlier = [
        (record["step"], HeldOutResult(record["heldout_accuracy"], record.get("heldout_mean_reward"),
                                       record.get("heldout_reward_graded", False)))
        for record in run_log.kept
        if record["kind"] == "eval"
    ]
    accuracy_callback = HeldOutAccuracyCallback(
        evaluate, task_args.eval_every_steps, on_result=record, history=earlier
    )
    return accuracy_callback


def run_train(task_args, training_args, model_args, log=print) -> RunSummary:
    """Prepare, measure held-out accuracy, train with RL, measure again, save the adapter and a report.

    A resumed run takes its accuracy before RL from the run log (step 0) and trains on from the checkpoint;
    `train_seconds` and `total_seconds` count this process only. A run refused for bad input (ConfigError) before
    it saved a checkpoint removes the output_dir it created, so the next run of the same preset takes its name."""
    parent = os.path.dirname(os.path.abspath(training_args.output_dir))
    parent_created = not os.path.exists(parent)  # e.g. runs/ on a first run: removed too if the run is refused
    folder = shared_run_folder(  # run_folder.py: claimed by the main process, the same in every process
        training_args.output_dir, rename=getattr(task_args, "default_output_dir", False),
        resuming=resume_checkpoint_given(training_args.resume_from_checkpoint), training_args=training_args,
    )
    training_args.output_dir = folder.path
    writable_output_dir(training_args.output_dir)
    try:
        return _run_train(task_args, training_args, model_args, log)
    except ConfigError:
        if folder.created and os.path.isdir(folder.path) and not get_last_checkpoint(folder.path):
            shutil.rmtree(folder.path)
            if parent_created and os.path.isdir(parent) and not os.listdir(parent):
                os.rmdir(parent)
        raise
    finally:
        folder.release()


def _run_train(task_args, training_args, model_args, log=print) -> RunSummary:
    started = time.perf_counter()
    try:
        prepared = prepare_training(task_args, training_args, model_args, log)
    except (ValueError, TypeError) as error:  # bad input found while setting up: one line, no traceback
        raise ConfigError(one_line(error)) from None
    trainer, accuracy = prepared.trainer, prepared.accuracy
    trainer.interrupt_notice = False  # the CLI says it in its own line (TrainingInterrupted)
    resumed_at = checkpoint_step(prepared.checkpoint) if prepared.checkpoint else 0
    notice_for_run(trainer, prepared.heldout_size, resumed_at, task_args, training_args, log)  # a real model on a CPU
    if prepared.checkpoint:
        log(f"Resuming from {prepared.checkpoint} (step {checkpoint_step(prepared.checkpoint)}).")
    if prepared.checkpoint and accuracy is not None and 0 not in accuracy.results:
        # a run log without its step-0 record: the base policy, measured before the checkpoint is loaded (under FSDP
        # this sees the model before accelerate prepares it; a fresh run measures in on_train_begin instead)
        try:
            accuracy.measure(trainer.model, 0, trainer.state)
        except RewardOutputError as error:
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
    train_started = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=prepared.checkpoint)
    except KeyboardInterrupt:  # Ctrl-C: one line saying what was saved, no traceback (the CLI exits 130)
        raise TrainingInterrupted(interrupted_message(trainer.state.global_step, training_args.output_dir)) from None
    except (PromptTooLongError, RewardOutputError, CheckpointError) as error:  # bad input found only by training
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
    before = after = best = best_step = measured = last = None
    if accuracy is not None:
        history = accuracy.history
        before, after = next(value for step, value in history if step == 0), history[-1][1]
        measured, last = accuracy.results[0], accuracy.results[history[-1][0]]
        best_step, best = max(history, key=lambda point: (point[1], -point[0]))
    summary = RunSummary(
        name=Path(training_args.output_dir).name,
        loss_type=training_args.loss_type,
        task=prepared.source,
        model=prepared.model_path,
        reward_funcs=prepared.reward_names,
        seed=training_args.seed,
        steps=trainer.state.global_step,
        accuracy_before=before,
        accuracy_after=after,
        mean_reward_before=measured and measured.mean_reward,
        mean_reward_after=last and last.mean_reward,
        base_policy=base_policy_name(prepared.model_path),
        updates_per_batch=generation_cycle(training_args) // training_args.gradient_accumulation_steps,
        heldout_size=prepared.heldout_size,
        best_accuracy=best,
        best_step=best_step,
        train_seconds=train_seconds,
        total_seconds=time.perf_counter() - started,
        adapter_dir=str(training_args.output_dir),
    )
    main_process = trainer.accelerator.is_main_process  # the run's files are written once, by the first process
    if main_process:
        Path(training_args.output_dir, SUMMARY_FILE).write_text(json.dumps(summary.to_json(), indent=2))
        save_model_card(summary, prepared, trainer, training_args, model_args,
                        builtin_task=task_args.dataset_name is None and not task_args.datasets)
    outcome = "No held-out evaluation" if accuracy is None else (
        f"Held-out greedy accuracy after RL: {after:.1%}, mean reward {mean_text(last.mean_reward)} (before "
        f"{before:.1%}, {mean_text(measured.mean_reward)}; best accuracy {best:.1%} at step {best_step})"
    )
    log(f"{outcome}; RL took {train_seconds:.0f} s, the whole run {summary.total_seconds:.0f} s.")
    log(f"{'Adapter' if model_args.use_peft else 'Model'} saved to {training_args.output_dir}")
    if task_args.write_report and accuracy is None:
        log("No report: it compares held-out accuracy, and this run has no held-out set.")
    elif task_args.write_report and main_process:
        report = write_report(Path(training_args.output_dir) / "report", [load_run(training_args.output_dir)])
        summary = dataclasses.replace(summary, report=str(report))
        log(f"Report: {report}")
    return summary


def save_model_card(summary: RunSummary, prepared: TrainingSetup, trainer, training_args, model_args,
                    builtin_task: bool):
    """README.md beside the saved adapter (or model): the run's own card (`model_card.py`), replacing PEFT's blank
    template and TRL's card."""
    settings = {
        "steps": f"{summary.steps} (seed {summary.seed})",
        "learning rate": f"{training_args.learning_rate:g}",
        "completions per prompt": training_args.num_generations,
        "max completion length": training_args.max_completion_length,
        "KL coefficient β": f"{training_args.beta:g}",
    }
    if model_args.use_peft:
        settings["LoRA"] = f"r {model_args.lora_r}, alpha {model_args.lora_alpha}"
    method, paper = training_method(trainer.args)  # what the trainer gave TRL's model card
    card = model_card(
        summary.to_json(), method, paper.get("citation"), settings, adapter=model_args.use_peft,
        heldout_reward=prepared.heldout_reward, builtin_task=builtin_task,
    )
    card.save(os.path.join(training_args.output_dir, "README.md"))


def train_command(argv: list[str]) -> int:
    log = print if os.environ.get("RANK", "0") == "0" else silent  # a launch's processes: its main one speaks
    try:
        task_args, training_args, model_args = parse_train_args(argv, log)
    except (ValueError, TypeError) as error:
        raise ConfigError(one_line(error)) from None
    apply_cpu_threads(training_args.use_cpu)  # as `trl grpo`'s launcher: see cpu_threads.py
    run_train(task_args, training_args, model_args, log)
    return 0


def silent(*args, **kwargs):
    pass

