"""The `trl-zoo train` arguments: TRL's parser over dataclasses, config files, and the layered defaults.

`train` follows TRL's conventions (`trl grpo`): TRL's `TrlParser` over dataclasses — trl_zoo's `GRPOConfig`,
TRL's `ModelConfig`, `TaskArguments` below (which holds the fields of TRL's grpo script arguments and of its
`DatasetMixtureConfig`) and `PluginArguments`, made from the fields the installed plugins declare (they end up in
`GRPOConfig.plugin_args`) — so a YAML file gives values and `--field value` flags override them. Every field
`trl grpo` accepts is accepted here. Precedence, lowest first:

    TRL's defaults  <  trl_zoo's defaults  <  quickstart preset  <  model preset  <  YAML  <  flags

trl_zoo's defaults: LoRA on (`use_peft`); fp32 (`bf16` off) and no pinned memory when no GPU is present. The
quickstart preset (built-in task only) fits the built-in tasks' tiny policy (learning rate, group size, completion
length, steps), with the task's own `preset()` over it. The model preset (built-in task only): what a packaged
model's `PackagedModel.preset` sets when model_name_or_path is its short name (gemma3-270m: learning rate 5e-5, 24
new tokens), said in one line. With a dataset no preset applies, and one line names TRL's defaults the run trains
with (`DATASET_DEFAULTS`: loss_type dapo, learning_rate 1e-6, those no config value or flag sets).

Bad configuration (unknown loss, misspelt key, wrong type) raises `ConfigError`, which the CLI prints as one line
naming the field (exit status 2), never a traceback.

Tests: tests/test_cli.py (precedence of defaults, preset, YAML and flags), tests/test_configs.py (every config file),
tests/test_presets_builtin.py (the quickstart preset), tests/test_model_preset.py (a packaged model's preset),
tests/test_cli_messages.py (one-line errors).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
import yaml
from trl import DatasetMixtureConfig, ModelConfig, TrlParser
from trl.scripts.grpo import GRPOScriptArguments

from ...config import GRPOConfig, plugin_fields
from ...io.gguf_checkpoint import PACKAGED_MODELS
from ...numerics import short_repr
from ...registry import closest_name
from ...tasks import get_task
from ...tasks.bootstrap import BootstrapRecipe
from ..errors import ConfigError, one_line
from .preset_lengths import LENGTH_FIELDS, scale_preset_lengths, scaled_lengths_message
from .train_help import group_help

CONFIG_SUFFIXES = (".yaml", ".yml")

# PEFT's LoraConfig names (and common spellings) -> the names TRL's ModelConfig gives them, accepted with a note.
PEFT_ALIASES = {
    "lora_rank": "lora_r",
    "rank": "lora_r",
    "r": "lora_r",
    "alpha": "lora_alpha",
    "target_modules": "lora_target_modules",
    "lora_target": "lora_target_modules",
    "target_parameters": "lora_target_parameters",
    "modules_to_save": "lora_modules_to_save",
    "task_type": "lora_task_type",
}


# Names other libraries (or habit) give a TRL field: an unknown key or flag spelt so suggests the field, where the
# nearest spelling would mislead (group_size -> greso_step). Suggested only, never read as the field.
MEANT_FIELDS = {
    "group_size": "num_generations",
    "lr": "learning_rate",
    "batch_size": "per_device_train_batch_size",
    "train_batch_size": "per_device_train_batch_size",
    "max_new_tokens": "max_completion_length",
    "kl_coef": "beta",
    "kl_coeff": "beta",
    "epochs": "num_train_epochs",
}


def closest_field(name: str, known: list[str], prefix: str = "") -> str | None:
    """The field an unknown `name` most likely means: the one MEANT_FIELDS names, else the nearest spelling."""
    meant = MEANT_FIELDS.get(name[len(prefix):] if name.startswith(prefix) else name)
    if meant is not None and f"{prefix}{meant}" in known:
        return f"{prefix}{meant}"
    return closest_name(name, known)


def alias_note(alias: str) -> str:
    return f"{alias}: read as {PEFT_ALIASES[alias]}, the name TRL's ModelConfig gives this LoRA setting."


def with_canonical_keys(values: dict, log=None) -> dict:
    """`values` (a config file's mapping) with PEFT's names renamed to TRL's; each renaming noted through `log`."""
    renamed = {}
    for key, value in values.items():
        canonical = PEFT_ALIASES.get(key, key)
        if canonical != key:
            if canonical in values:
                raise ConfigError(f"{key}: the same field as {canonical}, which is given too; keep one ({canonical}).")
            if log:
                log(alias_note(key))
        renamed[canonical] = value
    return renamed


def canonical_flags(argv: list[str], log=None) -> list[str]:
    """`argv` with `--alias` flags (PEFT's names) renamed to TRL's, each noted through `log`."""
    renamed = []
    for arg in argv:
        flag, equals, value = arg.partition("=")
        alias = flag[2:] if flag.startswith("--") else None
        if alias in PEFT_ALIASES:
            if log:
                log(alias_note(alias))
            arg = f"--{PEFT_ALIASES[alias]}{equals}{value}"
        renamed.append(arg)
    return renamed


@dataclass
class TaskArguments(GRPOScriptArguments, DatasetMixtureConfig):
    """What to train on: a built-in task, a dataset by name or local file, or a mixture (`datasets`), and how to
    score it. The fields of `trl grpo`'s script arguments and dataset mixture are TRL's own."""

    task: str = field(
        default="addition",
        metadata={
            "help": "Built-in task (addition, addition3, scratchpad, scratchpad_small, chat_arithmetic, "
            "chat_arithmetic_medium, chat_arithmetic_hard), used when no dataset_name is given. The addition and "
            "scratchpad tasks bootstrap a tiny base policy (the bootstrap_* flags apply to the addition tasks); the "
            "chat_arithmetic tasks train a pretrained chat model, by default the packaged smollm2-135m-instruct."
        },
    )
    gguf_file: str | None = field(
        default=None,
        metadata={
            "help": "A GGUF file in the model_name_or_path folder (as transformers' from_pretrained(dir, "
            "gguf_file=...)): its weights are dequantized once into a cached float32 checkpoint, which the run "
            "trains. model_name_or_path may also name a .gguf file, or a packaged model: smollm2-135m-instruct "
            "(a chat model) or gemma3-270m (a base model; see docs/models.md)."
        },
    )
    null_reward_control: bool = field(
        default=False,
        metadata={
            "help": "Control run: every reward batch is shuffled across its completions before training sees it, "
            "so rewards carry no information about correctness (the held-out evaluation still scores truly). "
            "Compare a run with its control, paired by seed, to separate what the reward taught from format."
        },
    )
    expert_traces: bool = field(
        default=False,
        metadata={
            "help": "Built-in chat_arithmetic tasks: add the training column expert_answer, each question's own "
            "label as a worked line ('47 + 38 = 85'), for the methods that read expert answers (--expert_column "
            "expert_answer: CHORD, LUFFY). Not with a dataset or another task."
        },
    )
    train_prompts: int = field(
        default=0,
        metadata={
            "help": "Train on the first N prompts of the training set (a built-in task's or a dataset's), e.g. the "
            "prompts a short run draws, so that --reference_reward_samples samples only those. 0: all of them."
        },
    )
    reference_reward_samples: int = field(
        default=0,
        metadata={
            "help": "A*-PO (advantage_estimator a2po): before training, sample this many completions K of every "
            "training prompt from the policy as it starts (the reference) and score them with the run's rewards "
            "into the column reference_rewards (trl_zoo.sample_reference_rewards; the cost is written to "
            "reference_rewards.json). 0: none, a dataset brings its own column. One process only."
        },
    )
    prompt_column: str = field(default="prompt", metadata={"help": "Dataset column holding the prompt."})
    answer_column: str = field(
        default="answer", metadata={"help": "Dataset column holding the reference answer (for the reward)."}
    )
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Reward functions: exact_match (default without a reward model; the scratchpad tasks default to "
            "final_answer, the answer after the last ':'), final_number (GSM8K-style), a reward of TRL's registry "
            "(accuracy_reward, reasoning_accuracy_reward, think_format_reward, get_soft_overlong_punishment, as "
            "`trl grpo` configures it) or a dotted import path 'package.module.function'. The first one also scores "
            "the greedy held-out evaluation."
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
    num_heldout: int | None = field(
        default=None,
        metadata={
            "help": "Held-out prompts split off the training data when the dataset has no test split (and no "
            "test_split_size). None: a tenth of the rows, at most 200 and at least 1; a streamed dataset: 200 rows. "
            "0: no held-out set, so every row is trained on and there is no held-out evaluation."
        },
    )
    eval_every_steps: int = field(
        default=50, metadata={"help": "Measure greedy held-out accuracy every N optimizer steps."}
    )
    eval_batch_size: int = field(default=128, metadata={"help": "Prompts per greedy evaluation batch."})
    bootstrap_target_accuracy: float = field(
        default=BootstrapRecipe.target_accuracy,
        metadata={"help": "Built-in task: supervise the tiny base policy on right sums up to this probe accuracy."},
    )
    bootstrap_carry_slip_rate: float = field(
        default=BootstrapRecipe.carry_slip_rate,
        metadata={"help": "Built-in task: then teach it to forget this share of carries (0: no slip habit)."},
    )
    bootstrap_max_steps: int = field(
        default=BootstrapRecipe.max_steps,
        metadata={"help": "Built-in task: cap on the base policy's supervised steps."},
    )
    bootstrap_hidden_size: int = field(
        default=BootstrapRecipe.hidden_size, metadata={"help": "Built-in task: base policy width."}
    )
    bootstrap_num_layers: int = field(
        default=BootstrapRecipe.num_layers, metadata={"help": "Built-in task: base policy depth."}
    )
    write_report: bool = field(
        default=True, metadata={"help": "Write a report (table, CSV, plots) into output_dir/report."}
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start a fresh run in an output_dir that holds an earlier run (summary.json or checkpoints); "
            "without it `train` stops rather than replace that run. The earlier run's files that the new run "
            "does not write again stay."
        },
    )


class StrictTrlParser(TrlParser):
    """TrlParser that reports errors as exceptions and checks every YAML key and value against the fields;
    `preset_overrides` replace the config file's values (flags still win)."""

    preset_overrides: dict = {}
    log = None  # where notes on renamed keys go (None: nowhere)

    def error(self, message):  # argparse would print the whole usage and exit
        raise ConfigError(message)

    def set_defaults_with_config(self, **kwargs) -> list[str]:
        actions = {action.dest: action for action in self._actions}
        field_types = {f.name: f.type for cls in self.dataclass_types for f in dataclasses.fields(cls)}
        checked = {}
        for key, value in with_canonical_keys(kwargs, self.log).items():
            if key not in actions:
                close = closest_field(key, list(actions))
                hint = f" Did you mean {close!r}?" if close else ""
                raise ConfigError(f"{key}: unknown key in the config file.{hint}")
            checked[key] = _coerce_config_value(key, value, actions[key], str(field_types.get(key, "")))
        return super().set_defaults_with_config(**{**checked, **self.preset_overrides})


def _coerce_config_value(key: str, value, action, field_type: str):
    """Convert a YAML value the way the flag `--key value` would be converted; raise naming the key if it can't."""
    if value is None:
        return None
    if isinstance(value, dict):
        if "dict" in field_type:
            return value
        raise ConfigError(f"{key}: expected a single value, got a mapping {short_repr(value)}.")
    if action.nargs in ("+", "*"):
        items = value if isinstance(value, list) else [value]
        if dataclasses.is_dataclass(action.type):  # e.g. `datasets:`, a list of TRL's DatasetConfig mappings
            return [_coerce_dataclass_item(key, item, action.type) for item in items]
        return [_coerce_scalar(key, item, action) for item in items]
    if isinstance(value, list):
        raise ConfigError(f"{key}: expected a single value, got a list {short_repr(value)}.")
    return _coerce_scalar(key, value, action)


def _coerce_dataclass_item(key: str, item, dataclass_type):
    """One entry of a list of dataclasses: a mapping of its fields, or a bare string for its first field."""
    names = [f.name for f in dataclasses.fields(dataclass_type)]
    if not isinstance(item, dict):
        return dataclass_type(str(item))
    unknown = [name for name in item if name not in names]
    if unknown:
        close = closest_name(unknown[0], names)
        hint = f" Did you mean {close!r}?" if close else ""
        raise ConfigError(f"{key}: unknown key {unknown[0]!r} in an entry (its keys: {', '.join(names)}).{hint}")
    if names[0] not in item:
        raise ConfigError(f"{key}: every entry needs {names[0]!r}, got {short_repr(item)}.")
    return dataclass_type(**item)


def _coerce_scalar(key: str, value, action):
    convert = action.type
    if convert is not None:
        try:
            value = convert(value if isinstance(value, (str, bool)) else str(value))
        except (TypeError, ValueError, argparse.ArgumentTypeError):
            expected = getattr(convert, "__name__", "a valid value")
            raise ConfigError(f"{key}: expected {expected}, got {short_repr(value)}.") from None
    if action.choices is not None and value not in action.choices:
        raise ConfigError(f"{key}: {short_repr(value)} is not one of {', '.join(map(str, action.choices))}.")
    return value


TRAIN_USAGE = "trl-zoo train [--config FILE.yaml] [--field value ...]"
TRAIN_DESCRIPTION = (
    "Every field below can be given as a flag or as a key of the YAML --config file (flags win). trl_zoo's own "
    "fields come first, grouped; then TRL's, the same as `trl grpo` takes. Without a dataset (dataset_name or "
    "datasets), train runs a built-in --task with that task's preset, not the defaults shown below: the offline "
    "quickstart ({quickstart}; a flag or config value wins)."
)


def plugin_arguments_class() -> type:
    """A dataclass with one field per plugin field that the registered losses, estimators and samplers declare
    (`GRPOConfig.plugin_args`), so that TRL's parser makes a flag and a YAML key of each, typed and with its help."""
    specs = []
    for name, (plugin_field, owner) in sorted(plugin_fields().items()):
        metadata = {"help": f"{plugin_field.description} Declared by the {owner}."}
        if plugin_field.choices is not None:
            metadata["choices"] = list(plugin_field.choices)
        kind = plugin_field.type if plugin_field.default is not None else plugin_field.type | None
        specs.append((name, kind, field(default=plugin_field.default, metadata=metadata)))
    return dataclasses.make_dataclass("PluginArguments", specs)


def make_train_parser() -> StrictTrlParser:
    plugin_cls = plugin_arguments_class()
    parser = StrictTrlParser(
        (TaskArguments, GRPOConfig, ModelConfig, plugin_cls), prog="trl-zoo train", usage=TRAIN_USAGE,
        description=TRAIN_DESCRIPTION.format(quickstart=preset_summary(quickstart_preset(get_task("addition")))),
    )
    group_help(parser, TaskArguments, GRPOConfig, ModelConfig, plugin_cls)
    return parser


def with_plugin_values(training_args: GRPOConfig, plugin_values) -> GRPOConfig:
    """`training_args` with the plugin fields given as flags or YAML keys (those not at their default) added to its
    `plugin_args`, checked again."""
    defaults = {name: plugin_field.default for name, (plugin_field, _) in plugin_fields().items()}
    given = {name: value for name, value in vars(plugin_values).items() if value != defaults.get(name)}
    if given:
        training_args.plugin_args = {**(training_args.plugin_args or {}), **given}
        training_args.validate()
    return training_args


def trl_zoo_defaults() -> dict:
    defaults = {"use_peft": True, "output_dir": DEFAULT_OUTPUT_DIR}
    if not torch.cuda.is_available():
        defaults.update(bf16=False, dataloader_pin_memory=False)
    return defaults


# Filled in once the data and the run's name are known: the built-in task's name or the dataset's file stem, and the
# config file's stem (the preset) if there is one, else the loss_type, so presets that share a loss_type (dapo, prorl,
# vapo) get their own folders; then the speed_recipe, if one is set (runs/chat_arithmetic-grpo-lora).
DEFAULT_OUTPUT_DIR = "runs/{task}-{run_name}"


def data_name(task_args) -> str:
    """What the default output_dir calls the data: the built-in task, or the stem of the dataset's name or file (of
    the mixture's first dataset)."""
    if task_args.datasets:
        first = task_args.datasets[0]
        files = first.data_files
        return Path(str((files[0] if isinstance(files, list) else files) or first.path)).stem
    if task_args.dataset_name:
        return Path(task_args.dataset_name).stem
    return task_args.task


def quickstart_preset(task) -> dict:
    """Hyperparameters for a built-in task: those of the tiny policy (measured: see docs/quickstart.md), with what a
    task's own `preset()` changes (the chat tasks: a pretrained model on one GPU)."""
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
        **(task.preset() if hasattr(task, "preset") else {}),
    }


SUMMARY_FIELDS = ("loss_type", "learning_rate", "max_steps")  # a task preset's values that --help's defaults differ on


def preset_summary(values: dict) -> str:
    """'loss_type grpo, learning_rate 0.001': the `SUMMARY_FIELDS` among `values`."""
    return ", ".join(f"{key} {values[key]:g}" if isinstance(values[key], float) else f"{key} {values[key]}"
                     for key in SUMMARY_FIELDS if key in values)


def task_preset_message(name: str, values: dict) -> str:
    given = f": {preset_summary(values)}" if preset_summary(values) else ""
    return (f"No dataset given, so the built-in task {name!r} with its preset{given} (the defaults `trl-zoo train "
            f"--help` lists apply with a dataset); a flag or config value wins")


DATASET_DEFAULTS = ("loss_type", "learning_rate")  # TRL's defaults that a run on a dataset gets unless it sets them


def dataset_defaults_message(values: dict) -> str:
    """One line: which of TRL's defaults a run on the user's own dataset trains with (`values`: those not set)."""
    return (
        f"A dataset given, so no task preset: TRL's defaults apply, {preset_summary(values)} (TRL's learning rate is "
        f"one of full fine-tuning; LoRA, on by default, usually takes 1e-5 to 2e-4); a flag or config value wins, "
        f"e.g. --learning_rate 2e-4"
    )


def model_preset(model_name_or_path: str | None) -> dict:
    """The preset a packaged model carries (`PackagedModel.preset`, measured on that model), applied over the task's
    on a built-in task; empty for any other model."""
    packaged = PACKAGED_MODELS.get(model_name_or_path) if isinstance(model_name_or_path, str) else None
    return dict(packaged.preset) if packaged else {}


def model_preset_message(name: str, values: dict) -> str:
    given = ", ".join(f"{key} {value:g}" if isinstance(value, float) else f"{key} {value}" for key, value in
                      values.items())
    return f"{name}: {given} from the model's own preset (measured on it: docs/models.md); a flag or config value wins"


def config_path(argv: list[str]) -> str | None:
    if "--config" not in argv:
        return None
    index = argv.index("--config")
    if index + 1 >= len(argv):
        raise ConfigError("--config: expected a YAML file path.")
    return argv[index + 1]


MAX_YAML_VALUES = 100_000  # a config file's values, each alias (*name) counted as often as it is used


def expanded_size(node, sizes: dict | None = None) -> int:
    """How many values a composed YAML document holds once its aliases are expanded (a shared node counts each time
    it is referred to), counted without expanding them: a few hundred bytes of nested aliases can stand for
    billions of values, which any message or copy of the mapping would then spell out."""
    sizes = {} if sizes is None else sizes
    if node is None or id(node) in sizes:
        return sizes.get(id(node), 0)
    sizes[id(node)] = 1  # a node that refers to itself counts once
    children = node.value if isinstance(node.value, list) else []
    total = 1
    for child in children:
        for part in child if isinstance(child, tuple) else (child,):  # a mapping's (key, value) pairs
            total += expanded_size(part, sizes)
            if total > MAX_YAML_VALUES:
                break
    sizes[id(node)] = total
    return total


def load_yaml(path: str):
    """The YAML document in `path`, its aliases counted before they are expanded (`expanded_size`)."""
    if not os.path.isfile(path):
        raise ConfigError(f"--config: no such file {path!r}.")
    try:
        with open(path) as handle:
            node = yaml.compose(handle, Loader=yaml.SafeLoader)
        if expanded_size(node) > MAX_YAML_VALUES:
            raise ConfigError(
                f"--config: {path} uses YAML aliases that expand to more than {MAX_YAML_VALUES:,} values; write the "
                f"values out instead of nesting aliases (*name) of aliases."
            )
        return yaml.SafeLoader("").construct_document(node) if node is not None else None
    except yaml.YAMLError as error:
        raise ConfigError(f"--config: {path} is not valid YAML ({short_repr(one_line(error), 200)}).") from None


def read_config(path: str) -> dict:
    config = load_yaml(path)
    if not isinstance(config, dict):
        raise ConfigError(f"--config: {path} must contain a mapping of field: value.")
    config.pop("env", None)
    return config


class ParsedArguments(NamedTuple):
    """The three argument dataclasses of `trl-zoo train`; unpacks as (task_args, training_args, model_args)."""

    task: TaskArguments
    training: GRPOConfig
    model: ModelConfig


def given_as_flag(key: str, argv: list[str]) -> bool:
    return any(arg == f"--{key}" or arg.startswith(f"--{key}=") for arg in argv)


def parse_train_args(argv: list[str], log=print) -> ParsedArguments:
    """The arguments from YAML and flags, with the layered defaults described above. On the built-in task with its
    own policy, a preset's lengths are scaled to the task (`preset_lengths.py`), saying so through `log`."""
    argv = canonical_flags(list(argv), log)
    config_file = config_path(argv)
    config = with_canonical_keys(read_config(config_file)) if config_file else {}
    peek = make_train_parser()
    peek.set_defaults(**trl_zoo_defaults())
    peek.set_defaults_with_config(**config)
    without_config = [a for i, a in enumerate(argv) if a != "--config" and (i == 0 or argv[i - 1] != "--config")]
    namespace, _ = peek.parse_known_args(without_config)

    parser = make_train_parser()
    parser.log = log
    parser.set_defaults(**trl_zoo_defaults())
    notes = []  # what the presets set, said once the arguments parse
    if namespace.dataset_name is None and not namespace.datasets:
        task = get_task(namespace.task)
        task_preset = quickstart_preset(task)
        parser.set_defaults(**task_preset)
        model = namespace.model_name_or_path or task_preset.get("model_name_or_path")
        model_values = model_preset(model)
        parser.set_defaults(**model_values)  # after the task's preset; the config file and flags still win
        kept = {key: value for key, value in task_preset.items() if not (key in config or given_as_flag(key, argv))}
        notes.append(task_preset_message(namespace.task, {key: kept[key] for key in kept if key not in model_values}))
        kept = {key: value for key, value in model_values.items() if not (key in config or given_as_flag(key, argv))}
        if kept:
            notes.append(model_preset_message(model, kept))
        if namespace.model_name_or_path is None and not hasattr(task, "preset"):  # the bootstrapped tiny policy
            preset = {key: config[key] for key in LENGTH_FIELDS if key in config}
            flags = {key: getattr(namespace, key) for key in LENGTH_FIELDS if given_as_flag(key, argv)}
            parser.preset_overrides = scale_preset_lengths(task.max_completion_length, preset, flags)
            if parser.preset_overrides:
                notes.append(scaled_lengths_message(Path(config_file).name, task, preset, parser.preset_overrides))
    else:
        defaults = {item.name: item.default for item in dataclasses.fields(GRPOConfig)}
        kept = {key: defaults[key] for key in DATASET_DEFAULTS if not (key in config or given_as_flag(key, argv))}
        if kept:
            notes.append(dataset_defaults_message(kept))
    try:
        task_args, training_args, model_args, plugin_values, unknown = parser.parse_args_and_config(
            argv, return_remaining_strings=True
        )
        training_args = with_plugin_values(training_args, plugin_values)
    except (ValueError, TypeError) as error:
        raise ConfigError(one_line(error)) from None
    if unknown:
        flag = next((item for item in unknown if item.startswith("--")), unknown[0])
        known = [f"--{action.dest}" for action in parser._actions]
        close = closest_field(flag.split("=")[0], known, prefix="--")
        hint = f" Did you mean {close}?" if close else ""
        raise ConfigError(f"{flag.lstrip('-')}: unknown argument {flag}.{hint}")
    for note in notes:
        log(note)
    task_args.default_output_dir = False  # True: train.py may move a fresh run to the next free name (run_folder.py)
    if training_args.output_dir == DEFAULT_OUTPUT_DIR:
        run_name = Path(config_file).stem if config_file else training_args.loss_type
        if training_args.speed_recipe:
            run_name += f"-{training_args.speed_recipe}"
        output_dir = DEFAULT_OUTPUT_DIR.format(task=data_name(task_args), run_name=run_name)
        fresh = not training_args.resume_from_checkpoint and not task_args.overwrite_output_dir
        training_args.output_dir = next_free_directory(output_dir) if fresh else output_dir
        task_args.default_output_dir = fresh
    return ParsedArguments(task_args, training_args, model_args)


def next_free_directory(path: str) -> str:
    """`path`, or `path-2`, `path-3`, ... (`next_name`): the first that does not exist yet. Only for the default
    output_dir, so that running the quickstart again starts a new run beside the old one; a directory the user names
    is theirs."""
    candidate = path
    while os.path.exists(candidate):
        candidate = next_name(candidate)
    return candidate


NUMBERED = re.compile(r"^(.*)-(\d+)$")


def next_name(folder: str) -> str:
    """The default folder's next name: `runs/x` -> `runs/x-2`, `runs/x-2` -> `runs/x-3` (also when a run's
    claim finds it taken, run_folder.py)."""
    numbered = NUMBERED.match(folder)
    if numbered and int(numbered.group(2)) >= 2:
        return f"{numbered.group(1)}-{int(numbered.group(2)) + 1}"
    return f"{folder}-2"

