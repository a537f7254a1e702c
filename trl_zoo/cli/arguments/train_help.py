"""The layout of `trl-zoo train --help`: trl_zoo's fields first, in groups, then TRL's, every field reachable.

    trl_zoo: loss  |  advantages and KL  |  sampling and reward shaping  |  compute and numerics  |  plugin fields
             |  task and data
    TRL: script and data  |  model  |  training

trl_zoo's fields are the ones its dataclasses declare themselves (`GRPOConfig`, `TaskArguments`), TRL fields whose
meaning trl_zoo widens included (`loss_type`, `reward_funcs`). Each `GRPOConfig` group starts at the field named
in `CONFIG_SECTIONS` and runs, in declaration order, to the next one, so a new field joins the group it is declared
in. The fields that installed plugins declare (the `PluginArguments` dataclass of `train_arguments.py`) join
`plugin_args` in "trl_zoo: plugin fields". Parsing is untouched: only argparse's help groups are rearranged.

Tests: tests/test_cli.py (`--help`), tests/test_table_fields.py (plugins' own fields in the help).
"""

from __future__ import annotations

import argparse
import dataclasses

# (group title, the first GRPOConfig field declared in it)
CONFIG_SECTIONS = (
    ("trl_zoo: loss", "loss_type"),
    ("trl_zoo: advantages and KL", "advantage_estimator"),
    ("trl_zoo: sampling and reward shaping", "dynamic_sampling"),
    ("trl_zoo: compute and numerics", "skip_zero_advantage"),
    ("trl_zoo: plugin fields", "plugin_args"),
)
PLUGIN_GROUP = CONFIG_SECTIONS[-1][0]
TASK_GROUP = "trl_zoo: task and data"
TRL_SCRIPT_GROUP = "TRL: script and data (as `trl grpo`)"
TRL_MODEL_GROUP = "TRL: model (ModelConfig)"
TRL_TRAINING_GROUP = "TRL: training (GRPOConfig and transformers' TrainingArguments)"
GROUP_ORDER = (*(title for title, _ in CONFIG_SECTIONS), TASK_GROUP, TRL_SCRIPT_GROUP, TRL_MODEL_GROUP,
               TRL_TRAINING_GROUP)


def own_fields(cls) -> list[str]:
    """The fields trl_zoo's dataclass `cls` declares, in its body or in the field groups it is composed of (its
    trl_zoo bases, as `GRPOConfig`'s), in field order; TRL's and transformers' fields are not its own."""
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        if klass is cls or klass.__module__.startswith("trl_zoo."):
            names += [name for name in vars(klass).get("__annotations__", {}) if name not in names]
    return names


def field_groups(task_cls, config_cls, model_cls, plugin_cls=None) -> dict[str, str]:
    """field name -> help group title."""
    groups = {field.name: PLUGIN_GROUP for field in dataclasses.fields(plugin_cls)} if plugin_cls else {}
    starts = {first: title for title, first in CONFIG_SECTIONS}
    title = CONFIG_SECTIONS[0][0]
    for name in own_fields(config_cls):
        title = starts.get(name, title)
        groups[name] = title
    for name in own_fields(task_cls):
        groups[name] = TASK_GROUP
    for field in dataclasses.fields(model_cls):
        groups.setdefault(field.name, TRL_MODEL_GROUP)
    for field in dataclasses.fields(task_cls):
        groups.setdefault(field.name, TRL_SCRIPT_GROUP)
    for field in dataclasses.fields(config_cls):
        groups.setdefault(field.name, TRL_TRAINING_GROUP)
    return groups


def group_help(parser: argparse.ArgumentParser, task_cls, config_cls, model_cls, plugin_cls=None) -> None:
    """Move every field's options (`--x` and its `--no_x`) from argparse's single options group into its group."""
    groups = field_groups(task_cls, config_cls, model_cls, plugin_cls)
    sections = {title: parser.add_argument_group(title) for title in GROUP_ORDER}
    for action in list(parser._optionals._group_actions):
        if action.dest in groups:
            parser._optionals._group_actions.remove(action)
            sections[groups[action.dest]]._group_actions.append(action)
