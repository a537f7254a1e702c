"""`trl-zoo`: train, list, compare.

    trl-zoo train [--config configs/X.yaml] [--field value ...]     (no arguments: the offline quickstart)
    trl-zoo list                                                    every plugin table: name, description, paper
    trl-zoo compare --losses grpo,dapo [--report_dir DIR] [train flags ...]

`train` follows TRL's conventions (`trl grpo`): TRL's `TrlParser` over dataclasses — trl_zoo's `GRPOConfig`,
TRL's `ModelConfig` and `TaskArguments` below — so a YAML file gives values and `--field value` flags override
them. Precedence, lowest first:

    TRL's defaults  <  trl_zoo's defaults  <  quickstart preset (built-in task only)  <  YAML  <  flags

trl_zoo's defaults: LoRA on (`use_peft`); fp32 (`bf16` off) and no pinned memory when no GPU is present. The
quickstart preset fits the built-in tasks' tiny policy (learning rate, group size, completion length, steps).

Bad configuration (unknown loss, misspelt key, wrong type) exits with status 2 and a one-line message naming the
field, never a traceback. Errors during training itself are not configuration errors and keep their traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import json
import os
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml
from datasets import DatasetDict, load_dataset
from transformers import AutoTokenizer, TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from trl import ModelConfig, ScriptArguments, TrlParser, get_peft_config, get_quantization_config

from .config import GRPOConfig
from .registry import LOSSES, TABLES
from .report import SUMMARY_FILE, RunLog, TrainLogRecorder, headline, load_run, write_report
from .tasks import get_task
from .tasks.bootstrap import BootstrapRecipe, bootstrap_policy
from .tasks.evaluation import HeldOutAccuracyCallback, greedy_accuracy
from .tasks.rewards import REWARDS
from .trainer import GRPOTrainer

USAGE = __doc__.split("\n\n")[1]
CONFIG_SUFFIXES = (".yaml", ".yml")
DATA_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


class ConfigError(Exception):
    """A configuration problem, reported as one line naming the field."""


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


# ---------------------------------------------------------------------------------------------------- arguments
@dataclass
class TaskArguments(ScriptArguments):
    """What to train on: a built-in task, or a dataset by name or local file, and how to score it."""

    task: str = field(
        default="addition",
        metadata={"help": "Built-in task (addition, addition3), used when no dataset_name is given."},
    )
    prompt_column: str = field(default="prompt", metadata={"help": "Dataset column holding the prompt."})
    answer_column: str = field(
        default="answer", metadata={"help": "Dataset column holding the reference answer (for the reward)."}
    )
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Reward functions: exact_match (default), final_number (GSM8K-style), a TRL reward "
            "(accuracy_reward, think_format_reward, ...) or a dotted import path 'package.module.function'."
        },
    )
    conversational: bool | None = field(
        default=None,
        metadata={
            "help": "Wrap prompts as chat messages. None: yes when the tokenizer has a chat template."
        },
    )
    system_prompt: str | None = field(
        default=None, metadata={"help": "System message for conversational prompts."}
    )
    num_heldout: int = field(
        default=200,
        metadata={"help": "Held-out prompts split off the training data when the dataset has no test split."},
    )
    eval_every_steps: int = field(
        default=50, metadata={"help": "Measure greedy held-out accuracy every N optimizer steps."}
    )
    eval_batch_size: int = field(default=128, metadata={"help": "Prompts per greedy evaluation batch."})
    bootstrap_target_accuracy: float = field(
        default=0.95, metadata={"help": "Built-in task: supervise the tiny base policy on right sums up to this accuracy."}
    )
    bootstrap_carry_slip_rate: float = field(
        default=0.8,
        metadata={"help": "Built-in task: then teach it to forget this share of carries (0: no slip habit)."},
    )
    bootstrap_max_steps: int = field(
        default=800, metadata={"help": "Built-in task: cap on the base policy's supervised steps."}
    )
    bootstrap_hidden_size: int = field(default=128, metadata={"help": "Built-in task: base policy width."})
    bootstrap_num_layers: int = field(default=2, metadata={"help": "Built-in task: base policy depth."})
    write_report: bool = field(
        default=True, metadata={"help": "Write a report (table, CSV, plots) into output_dir/report."}
    )


class StrictTrlParser(TrlParser):
    """TrlParser that reports errors as exceptions and checks every YAML key and value against the fields."""

    def error(self, message):  # argparse would print the whole usage and exit
        raise ConfigError(message)

    def set_defaults_with_config(self, **kwargs) -> list[str]:
        actions = {action.dest: action for action in self._actions}
        field_types = {f.name: f.type for cls in self.dataclass_types for f in dataclasses.fields(cls)}
        checked = {}
        for key, value in kwargs.items():
            if key not in actions:
                close = difflib.get_close_matches(key, list(actions), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"{key}: unknown key in the config file.{hint}")
            checked[key] = _coerce_config_value(key, value, actions[key], str(field_types.get(key, "")))
        return super().set_defaults_with_config(**checked)


def _coerce_config_value(key: str, value, action, field_type: str):
    """Convert a YAML value the way the flag `--key value` would be converted; raise naming the key if it can't."""
    if value is None:
        return None
    if isinstance(value, dict):
        if "dict" in field_type:
            return value
        raise ConfigError(f"{key}: expected a single value, got a mapping {value!r}.")
    if action.nargs in ("+", "*"):
        return [_coerce_scalar(key, item, action) for item in (value if isinstance(value, list) else [value])]
    if isinstance(value, list):
        raise ConfigError(f"{key}: expected a single value, got a list {value!r}.")
    return _coerce_scalar(key, value, action)


def _coerce_scalar(key: str, value, action):
    convert = action.type
    if convert is not None:
        try:
            value = convert(value if isinstance(value, (str, bool)) else str(value))
        except (TypeError, ValueError, argparse.ArgumentTypeError):
            expected = getattr(convert, "__name__", "a valid value")
            raise ConfigError(f"{key}: expected {expected}, got {value!r}.") from None
    if action.choices is not None and value not in action.choices:
        raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(str, action.choices))}.")
    return value


def make_train_parser() -> StrictTrlParser:
    return StrictTrlParser((TaskArguments, GRPOConfig, ModelConfig), prog="trl-zoo train")


def trl_zoo_defaults() -> dict:
    defaults = {"use_peft": True}
    if not torch.cuda.is_available():
        defaults.update(bf16=False, dataloader_pin_memory=False)
    return defaults


DEFAULT_OUTPUT_DIR = "runs/{task}-{loss_type}"  # filled in once the loss is known (YAML or flag may set it)


def quickstart_preset(task) -> dict:
    """Hyperparameters for the built-in tasks' tiny policy (measured: see docs/quickstart.md)."""
    return {
        "loss_type": "grpo",
        "learning_rate": 1e-3,
        "max_steps": 200,
        "per_device_train_batch_size": 64,
        "num_generations": 8,
        "max_completion_length": task.max_completion_length,
        "temperature": 1.0,
        "beta": 0.0,
        "logging_steps": 10,
        "save_strategy": "no",
        "report_to": "none",
        "seed": 0,
        "lora_r": 16,
        "lora_alpha": 32,
        "lora_dropout": 0.0,
        "lora_target_modules": ["all-linear"],
        "gradient_checkpointing": False,  # TRL turns it on; on a tiny model recomputation only costs time
        "output_dir": DEFAULT_OUTPUT_DIR,
    }


def _config_path(argv: list[str]) -> str | None:
    if "--config" not in argv:
        return None
    index = argv.index("--config")
    if index + 1 >= len(argv):
        raise ConfigError("--config: expected a YAML file path.")
    return argv[index + 1]


def _read_config(path: str) -> dict:
    if not os.path.isfile(path):
        raise ConfigError(f"--config: no such file {path!r}.")
    try:
        with open(path) as handle:
            config = yaml.safe_load(handle)
    except yaml.YAMLError as error:
        raise ConfigError(f"--config: {path} is not valid YAML ({_one_line(error)}).") from None
    if not isinstance(config, dict):
        raise ConfigError(f"--config: {path} must contain a mapping of field: value.")
    config.pop("env", None)
    return config


def parse_train_args(argv: list[str]):
    """(task_args, training_args, model_args) from YAML and flags, with the layered defaults described above."""
    argv = list(argv)
    config_path = _config_path(argv)
    peek = make_train_parser()
    peek.set_defaults(**trl_zoo_defaults())
    if config_path:
        peek.set_defaults_with_config(**_read_config(config_path))
    without_config = [a for i, a in enumerate(argv) if a != "--config" and (i == 0 or argv[i - 1] != "--config")]
    namespace, _ = peek.parse_known_args(without_config)

    parser = make_train_parser()
    parser.set_defaults(**trl_zoo_defaults())
    if namespace.dataset_name is None:
        parser.set_defaults(**quickstart_preset(get_task(namespace.task)))
    try:
        task_args, training_args, model_args, unknown = parser.parse_args_and_config(argv, return_remaining_strings=True)
    except (ValueError, TypeError) as error:
        raise ConfigError(_one_line(error)) from None
    if unknown:
        flag = next((item for item in unknown if item.startswith("--")), unknown[0])
        known = [f"--{action.dest}" for action in parser._actions]
        close = difflib.get_close_matches(flag.split("=")[0], known, n=1)
        hint = f" Did you mean {close[0]}?" if close else ""
        raise ConfigError(f"{flag.lstrip('-')}: unknown argument {flag}.{hint}")
    if training_args.output_dir == DEFAULT_OUTPUT_DIR:
        training_args.output_dir = DEFAULT_OUTPUT_DIR.format(task=task_args.task, loss_type=training_args.loss_type)
    return task_args, training_args, model_args


# ---------------------------------------------------------------------------------------------------- train
def resolve_reward(name: str):
    if name in REWARDS:
        return REWARDS[name]
    import trl.rewards

    if hasattr(trl.rewards, name):
        return getattr(trl.rewards, name)
    if "." in name:
        module_name, function_name = name.rsplit(".", 1)
        sys.path.insert(0, os.getcwd())
        try:
            return getattr(importlib.import_module(module_name), function_name)
        except (ImportError, AttributeError) as error:
            raise ConfigError(f"reward_funcs: cannot import {name!r} ({_one_line(error)}).") from None
    raise ConfigError(
        f"reward_funcs: unknown reward {name!r}; use one of {', '.join(REWARDS)}, a TRL reward such as "
        f"accuracy_reward, or a dotted import path."
    )


def _load_dataset_splits(task_args, seed: int):
    source = task_args.dataset_name
    suffix = Path(source).suffix.lower()
    if suffix in DATA_FILE_BUILDERS and not os.path.isfile(source):
        raise ConfigError(f"dataset_name: no such file {source!r}.")
    try:
        if os.path.isfile(source):
            if suffix not in DATA_FILE_BUILDERS:
                raise ConfigError(
                    f"dataset_name: cannot read {suffix or 'extension-less'} files; use {', '.join(DATA_FILE_BUILDERS)}."
                )
            dataset = load_dataset(DATA_FILE_BUILDERS[suffix], data_files=source)
        else:
            dataset = load_dataset(source, name=task_args.dataset_config)
    except ConfigError:
        raise
    except Exception as error:  # hub, file-format and network errors all mean "this dataset cannot be loaded"
        raise ConfigError(f"dataset_name: cannot load {source!r} ({_one_line(error)}).") from None
    if not isinstance(dataset, DatasetDict):
        dataset = DatasetDict({task_args.dataset_train_split: dataset})
    if task_args.dataset_train_split not in dataset:
        raise ConfigError(
            f"dataset_train_split: no split {task_args.dataset_train_split!r}; the dataset has {', '.join(dataset)}."
        )
    train = dataset[task_args.dataset_train_split]
    if task_args.dataset_test_split in dataset:
        heldout = dataset[task_args.dataset_test_split]
    else:
        if not 0 < task_args.num_heldout < len(train):
            raise ConfigError(f"num_heldout: must be between 1 and {len(train) - 1} for this dataset.")
        split = train.train_test_split(test_size=task_args.num_heldout, seed=seed)
        train, heldout = split["train"], split["test"]
    for column_arg, target in (("prompt_column", "prompt"), ("answer_column", "answer")):
        column = getattr(task_args, column_arg)
        if column not in train.column_names:
            if target == "answer":
                continue  # a custom reward may not need one
            raise ConfigError(f"{column_arg}: no column {column!r}; the dataset has {', '.join(train.column_names)}.")
        if column != target:
            train, heldout = (d.rename_column(column, target) if target not in d.column_names else d for d in (train, heldout))
    return train, heldout


def _conversational_prompts(dataset, system_prompt: str | None):
    def wrap(prompt):
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return messages + [{"role": "user", "content": prompt}]

    return dataset.map(lambda row: {"prompt": wrap(row["prompt"])})


class ConciseProgress(TrainerCallback):
    """One line per logging step: step, sampled reward, latest held-out accuracy, elapsed time."""

    def __init__(self, accuracy_callback: HeldOutAccuracyCallback, log=print):
        self.accuracy_callback = accuracy_callback
        self.log = log
        self.started = time.perf_counter()

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            history = self.accuracy_callback.history
            accuracy = f"{history[-1][1]:.1%}" if history else "—"
            self.log(
                f"  step {state.global_step:>4}/{state.max_steps}  reward {logs['reward']:.3f}  "
                f"held-out {accuracy}  ({time.perf_counter() - self.started:.0f} s)"
            )


def prepare_training(task_args, training_args, model_args, log=print) -> dict:
    """Everything up to `trainer.train()`: model, data, rewards, callbacks. Raises ConfigError on bad input."""
    if model_args.load_in_4bit or model_args.load_in_8bit:
        flag = "load_in_4bit" if model_args.load_in_4bit else "load_in_8bit"
        try:
            importlib.import_module("bitsandbytes")
        except ImportError:
            raise ConfigError(f"{flag}: QLoRA needs bitsandbytes; pip install 'trl-zoo[quantization]'.") from None
        if not torch.cuda.is_available():
            raise ConfigError(f"{flag}: QLoRA needs a CUDA GPU; drop --{flag} to train with plain LoRA here.")
        if not model_args.use_peft:
            raise ConfigError(f"{flag}: a quantized model can only be fine-tuned with an adapter; set use_peft true.")

    if task_args.dataset_name is None:
        task = get_task(task_args.task)
        train, heldout = task.train_dataset(), task.heldout_dataset()
        source = task.name
        model_path = model_args.model_name_or_path
        if model_path is None:
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
            raise ConfigError("model_name_or_path: required with dataset_name (a hub name or a local directory).")
        train, heldout = _load_dataset_splits(task_args, training_args.seed)
        source, model_path = task_args.dataset_name, model_args.model_name_or_path

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path, revision=model_args.model_revision)
    except (OSError, ValueError) as error:
        raise ConfigError(f"model_name_or_path: cannot load a tokenizer from {model_path!r} ({_one_line(error)}).") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    conversational = task_args.conversational
    if conversational is None:
        conversational = getattr(tokenizer, "chat_template", None) is not None
    if conversational:
        train, heldout = (_conversational_prompts(d, task_args.system_prompt) for d in (train, heldout))

    reward_names = task_args.reward_funcs or ["exact_match"]
    rewards = [resolve_reward(name) for name in reward_names]
    model_init_kwargs = {
        "revision": model_args.model_revision,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
        **(training_args.model_init_kwargs or {}),
    }
    if model_args.load_in_4bit or model_args.load_in_8bit:
        model_init_kwargs["device_map"] = {"": torch.cuda.current_device()}  # quantized weights live on this GPU
    training_args.model_init_kwargs = model_init_kwargs

    peft_config = get_peft_config(model_args)
    if peft_config is not None and peft_config.target_modules == {"all-linear"}:
        peft_config.target_modules = "all-linear"  # peft's shorthand must be a string, not a one-item list

    output_dir = Path(training_args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    run_log = RunLog(output_dir / "metrics.jsonl")
    heldout_columns = {name: heldout[name] for name in heldout.column_names if name != "prompt"}

    def evaluate(model) -> float:
        return greedy_accuracy(
            model,
            tokenizer,
            heldout["prompt"],
            max_new_tokens=training_args.max_completion_length,
            reward=rewards[0],
            reward_kwargs=heldout_columns,
            batch_size=task_args.eval_batch_size,
        )

    def record(step: int, accuracy: float):
        run_log.write({"kind": "eval", "step": step, "heldout_accuracy": accuracy})

    accuracy_callback = HeldOutAccuracyCallback(evaluate, task_args.eval_every_steps, on_result=record)
    try:
        trainer = GRPOTrainer(
            model=model_path,
            reward_funcs=rewards,
            args=training_args,
            train_dataset=train,
            processing_class=tokenizer,
            peft_config=peft_config,
            quantization_config=get_quantization_config(model_args),
            callbacks=[accuracy_callback, TrainLogRecorder(run_log), ConciseProgress(accuracy_callback, log)],
        )
    except (OSError, ValueError, TypeError) as error:
        raise ConfigError(_one_line(error)) from None
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return {
        "trainer": trainer,
        "accuracy": accuracy_callback,
        "source": source,
        "model_path": model_path,
        "heldout_size": len(heldout),
        "reward_names": reward_names,
    }


def run_train(task_args, training_args, model_args, log=print) -> dict:
    """Prepare, measure held-out accuracy, train with RL, measure again, save the adapter and a report."""
    started = time.perf_counter()
    try:
        prepared = prepare_training(task_args, training_args, model_args, log)
    except (ValueError, TypeError) as error:  # bad input found while setting up: one line, no traceback
        raise ConfigError(_one_line(error)) from None
    trainer, accuracy = prepared["trainer"], prepared["accuracy"]
    before = accuracy.measure(trainer.model, 0)
    length = (
        f"{training_args.max_steps} steps" if training_args.max_steps > 0 else f"{training_args.num_train_epochs:g} epochs"
    )
    log(
        f"Held-out greedy accuracy before RL: {before:.1%} ({prepared['heldout_size']} prompts). "
        f"Training with loss_type={training_args.loss_type!r}, {'LoRA' if model_args.use_peft else 'full'} "
        f"fine-tuning, {length} ..."
    )
    train_started = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - train_started
    trainer.save_model(training_args.output_dir)
    history = accuracy.history
    best_step, best = max(history, key=lambda point: (point[1], -point[0]))
    summary = {
        "name": Path(training_args.output_dir).name,
        "loss_type": training_args.loss_type,
        "task": prepared["source"],
        "model": prepared["model_path"],
        "reward_funcs": prepared["reward_names"],
        "seed": training_args.seed,
        "steps": trainer.state.global_step,
        "accuracy_before": before,
        "accuracy_after": history[-1][1],
        "heldout_size": prepared["heldout_size"],
        "best_accuracy": best,
        "best_step": best_step,
        "train_seconds": train_seconds,
        "total_seconds": time.perf_counter() - started,
        "adapter_dir": str(training_args.output_dir),
    }
    Path(training_args.output_dir, SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    log(
        f"Held-out greedy accuracy after RL: {summary['accuracy_after']:.1%} (before {before:.1%}, best "
        f"{best:.1%} at step {best_step}); RL took {train_seconds:.0f} s, the whole run {summary['total_seconds']:.0f} s."
    )
    log(f"{'Adapter' if model_args.use_peft else 'Model'} saved to {training_args.output_dir}")
    if task_args.write_report:
        report = write_report(Path(training_args.output_dir) / "report", [load_run(training_args.output_dir)])
        summary["report"] = str(report)
        log(f"Report: {report}")
    return summary


def train_command(argv: list[str]) -> int:
    try:
        task_args, training_args, model_args = parse_train_args(argv)
    except (ValueError, TypeError) as error:
        raise ConfigError(_one_line(error)) from None
    run_train(task_args, training_args, model_args)
    return 0


# ---------------------------------------------------------------------------------------------------- list
def list_command(argv: list[str]) -> int:
    if argv:
        raise ConfigError(f"list: takes no arguments, got {' '.join(argv)}.")
    for table_name, table in TABLES.items():
        entries = table.entries()
        print(f"{table_name} ({len(entries)})")
        width = max((len(entry.name) for entry in entries), default=0)
        for entry in entries:
            source = f"  [{entry.source}]" if entry.source else ""
            print(f"  {entry.name:<{width}}  {entry.description}{source}")
        print()
    return 0


# ---------------------------------------------------------------------------------------------------- compare
def _compare_parser() -> argparse.ArgumentParser:
    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise ConfigError(message)

    parser = Parser(
        prog="trl-zoo compare",
        allow_abbrev=False,  # "--seed" is a train flag, not a prefix of "--seeds"
        description="Train one run per loss (same task, model and seed; or several seeds) and compare.",
    )
    parser.add_argument("--losses", required=True, help="Comma-separated loss names or YAML config paths.")
    parser.add_argument("--report_dir", default=None, help="Where runs and the report go (default runs/compare).")
    parser.add_argument(
        "--seeds",
        default=None,
        help="Comma-separated seeds, e.g. 0,1,2: every loss runs once per seed (on the built-in tasks each seed also "
        "bootstraps its own base policy), the report ranks the losses by their mean over seeds and says whether the "
        f"first is ahead of each other loss beyond seed noise. Default on a built-in task: {DEFAULT_COMPARE_SEEDS} "
        "(--seeds 0 for one); otherwise one run per loss.",
    )
    return parser


def _parse_seeds(seeds: str | None, train_argv: list[str]) -> list[int | None]:
    if seeds is None:
        return [None]
    if any(arg == "--seed" or arg.startswith("--seed=") for arg in train_argv):
        raise ConfigError("seeds: give the seeds with --seeds only; remove --seed.")
    try:
        parsed = [int(item) for item in seeds.split(",") if item.strip()]
    except ValueError:
        raise ConfigError(f"seeds: expected comma-separated integers, got {seeds!r}.") from None
    if not parsed or len(set(parsed)) != len(parsed):
        raise ConfigError(f"seeds: expected distinct comma-separated integers, got {seeds!r}.")
    return parsed


DEFAULT_COMPARE_SEEDS = "0,1,2"


def compare_seeds(
    seeds: str | None, train_argv: list[str], configs: list[dict] | None = None
) -> tuple[list[int | None], str]:
    """The seeds every loss runs with, and a line to log when they are the default (else "").

    On a built-in task (no dataset_name among the train flags or the config files `configs`) with no seed given
    (neither --seeds nor --seed nor a config's seed), compare runs DEFAULT_COMPARE_SEEDS: a run takes minutes there,
    and one seed cannot separate losses whose gap is below the seed-to-seed spread."""

    def given(key: str) -> bool:
        flag = f"--{key}"
        in_flags = any(arg == flag or arg.startswith(flag + "=") for arg in train_argv)
        return in_flags or any(config.get(key) is not None for config in configs or [])

    if seeds is not None or given("seed") or given("dataset_name"):
        return _parse_seeds(seeds, train_argv), ""
    message = (
        f"compare: no --seeds on a built-in task, so every loss runs with seeds {DEFAULT_COMPARE_SEEDS} and the "
        "report pairs them by seed; give --seeds 0 for a single seed."
    )
    return _parse_seeds(DEFAULT_COMPARE_SEEDS, train_argv), message


def compare_runs(
    losses: str, report_dir: str | None, train_argv: list[str], log=print, seeds: str | None = None
) -> tuple[Path, list[str]]:
    """Run `trl-zoo train` once per loss (and per seed) in a fresh subprocess, then write the comparison report."""
    items = [item.strip() for item in losses.split(",") if item.strip()]
    if len(items) < 2:
        raise ConfigError("losses: give at least two comma-separated losses to compare.")
    for flag in ("--loss_type", "--output_dir"):
        if any(arg == flag or arg.startswith(flag + "=") for arg in train_argv):
            raise ConfigError(f"{flag.lstrip('-')}: set per run by compare; remove {flag}.")
    selections = []
    for item in items:
        if item.endswith(CONFIG_SUFFIXES):
            if "--config" in train_argv:
                raise ConfigError(f"losses: {item} is a config file, so --config cannot be given as well.")
            if not os.path.isfile(item):
                raise ConfigError(f"losses: no such config file {item!r}.")
            selections.append((Path(item).stem, ["--config", item]))
        elif item not in LOSSES:
            raise ConfigError(LOSSES.unknown_message(item, "losses"))
        else:
            selections.append((item, ["--loss_type", item]))
    names = [name for name, _ in selections]
    if len(set(names)) != len(names):
        raise ConfigError(f"losses: names must be distinct, got {', '.join(names)}.")
    config_paths = [path for path in [_config_path(train_argv)] if path]
    config_paths += [selection[1] for _, selection in selections if selection[0] == "--config"]
    seed_list, default_message = compare_seeds(seeds, train_argv, [_read_config(path) for path in config_paths])
    if default_message:
        log(default_message)

    directory = Path(report_dir or "runs/compare")
    package_root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    runs = []  # (run name, loss name, output directory, train arguments)
    for seed in seed_list:
        for name, selection in selections:
            if seed is None:
                runs.append((name, name, directory / name, selection))
            else:
                seeded = [*selection, "--seed", str(seed)]
                runs.append((f"{name} seed {seed}", name, directory / name / f"seed{seed}", seeded))
    failed, finished = [], {}
    for run_name, loss_name, output_dir, selection in runs:
        log(f"=== {run_name} ===")
        command = [sys.executable, "-m", "trl_zoo.cli", "train", *train_argv, *selection,
                   "--output_dir", str(output_dir), "--write_report", "false"]
        completed = subprocess.run(command, env=env)
        if completed.returncode != 0:
            failed.append(run_name)
            log(f"run {run_name!r} failed with exit status {completed.returncode}")
        else:
            finished.setdefault(loss_name, []).append(load_run(output_dir, run_name))
    if not finished:
        raise ConfigError(f"losses: every run failed ({', '.join(failed)}); see the output above.")
    all_runs = [run for group in finished.values() for run in group]
    report = write_report(directory, all_runs, groups=finished)
    log(f"Report: {report}")
    log(headline(all_runs, finished))
    return report, failed


def compare_command(argv: list[str]) -> int:
    own, train_argv = _compare_parser().parse_known_args(argv)
    _, failed = compare_runs(own.losses, own.report_dir, train_argv, seeds=own.seeds)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------------- entry
COMMANDS = {"train": train_command, "list": list_command, "compare": compare_command}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    for category in (FutureWarning, DeprecationWarning):  # libraries' notices to developers, not to CLI users
        warnings.filterwarnings("ignore", category=category)
    if argv and argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = ("train", argv) if not argv or argv[0].startswith("-") else (argv[0], argv[1:])
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, list(COMMANDS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        print(f"trl-zoo: unknown command {command!r}.{hint} Commands: {', '.join(COMMANDS)}.", file=sys.stderr)
        return 2
    try:
        return COMMANDS[command](rest)
    except ConfigError as error:
        print(f"trl-zoo {command}: error: {_one_line(error)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
