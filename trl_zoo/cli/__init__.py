"""`trl-zoo`: train, list, compare.

    trl-zoo train [--config configs/X.yaml] [--field value ...]     (no arguments: the offline quickstart)
    trl-zoo list                                                    every plugin table: name, description, paper;
                                                                    the reward functions and reward shaping
    trl-zoo compare --losses grpo,dapo [--report_dir DIR] [train flags ...]

`trl-zoo COMMAND --help` shows a command's options; `trl-zoo --version` the version.

This package is the command line; its `__init__` only dispatches, to each command's modules, one folder a part
(each folder's `__init__` maps its files):

    errors.py       the errors a command ends with (a one-line ConfigError: status 2; Ctrl-C: 130)
    arguments/      train's arguments, which compare passes on: the parser, config files and presets
                    (`train_arguments.py`), `--help`'s layout, a preset's lengths, a config file's `env:`
    train/          the train command (`command.py`) and the steps of its run: the run folder, the preparation
                    up to `trainer.train()`, the resumed checkpoint, data, policy, prompts, the held-out
                    evaluation, the progress lines, summary.json and the model card
    rewards/        a run's rewards: `--reward_funcs` names, the reward functions and held-out scorer, the
                    null-reward control; the reward section `list` shows
    report/         finished runs read back and compared: the run log, the verdict, the report, and the compare
                    command (`compare.py`)
    environment/    what a command meets on its machine: CPU threads and the cost of a CPU run, one GPU without
                    a launcher, DDP's unused-parameter search, an error of one launched process, the disk

`train` reads arguments/, rewards/, report/ (its run log and report) and environment/; `compare` reads
arguments/ and runs `train` once per loss and seed; `list` reads only the tables and `rewards/listed_rewards.py`.

A command's modules are imported when it runs: `--help` and `--version` import no library, `list` torch alone (the
tables), `train --help` TRL's config (its fields' help). `python -m trl_zoo.cli` runs `__main__.py`. Bad configuration
exits with status 2 and a one-line message naming the field, never a traceback; Ctrl-C exits with status 130 and one
line (for `train`: the step reached and the last checkpoint to resume from).

Tests: tests/test_cli.py (the commands, `trl-zoo list`), tests/test_layout.py (the console script and `python -m
trl_zoo.cli`, the modules `--help`, `--version` and `list` import), tests/test_broken_plugin.py (a broken plugin
listed).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from importlib import metadata

from .. import __version__
from .errors import ONE_LINE_ERRORS, AnotherProcessFailed, ConfigError, TrainingInterrupted, error_line, one_line

USAGE = "usage: trl-zoo COMMAND [options]\n\n" + "\n\n".join(__doc__.split("\n\n")[1:3])
LIST_USAGE = """usage: trl-zoo list

Every plugin table (losses, aggregations, advantage estimators, KL estimators, samplers, plugins included): each
entry's name, one-line description and source paper, and under it the entry's own hyperparameters (flag, default,
allowed range; `trl-zoo train --help` has their full help). Then the built-in reward functions (--reward_funcs) and
the fields that shape rewards."""


def package_version() -> str:
    """The installed distribution's version; trl_zoo.__version__ when running from a source tree."""
    try:
        return metadata.version("trl-zoo")
    except metadata.PackageNotFoundError:
        return __version__


def library_versions() -> str:
    """The versions of the libraries trl_zoo runs on, for bug reports."""
    return ", ".join(f"{name} {metadata.version(name)}" for name in ("trl", "transformers", "torch"))


def list_command(argv: list[str]) -> int:
    if argv in (["-h"], ["--help"]):
        print(LIST_USAGE)
        return 0
    if argv:
        raise ConfigError(f"list: takes no arguments, got {' '.join(argv)}.")
    from ..registry import TABLES
    from .rewards.listed_rewards import listed_rewards

    for table_name, table in TABLES.items():
        entries = table.entries()
        print(f"{table_name} ({len(entries)})")
        width = max((len(entry.name) for entry in entries), default=0)
        for entry in entries:
            source = f"  [{entry.source}]" if entry.source else ""
            print(f"  {entry.name:<{width}}  {entry.description}{source}")
            for plugin_field in getattr(entry.spec, "fields", ()):
                print(f"      {field_line(plugin_field)}")
        print()
    print(listed_rewards())
    return 0


def field_line(plugin_field) -> str:
    """'--m2po_threshold 0.04  (float, > 0)': a plugin hyperparameter as `trl-zoo list` shows it."""
    kind = ", ".join(part for part in (plugin_field.type.__name__, plugin_field.allowed) if part)
    return f"--{plugin_field.name} {plugin_field.default}  ({kind})"


def silence_library_progress_bars():
    """The libraries' own progress bars (weights loading and saving, dataset maps) would interleave with the run's
    lines; the run prints its own progress."""
    import datasets
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    datasets.disable_progress_bars()


def imported_when_run(module: str, name: str):
    """The command `name` of `module`, imported when it runs: `--help`, `--version` and `list` import no more than
    they need."""

    def command(argv: list[str]) -> int:
        return getattr(importlib.import_module(module, __name__), name)(argv)

    return command


COMMANDS = {
    "train": imported_when_run(".train.command", "train_command"),
    "list": list_command,
    "compare": imported_when_run(".report.compare", "compare_command"),
}


def main(argv: list[str] | None = None) -> int:
    entry = argv is None  # the `trl-zoo` command itself, not a call from Python
    argv = sys.argv[1:] if argv is None else list(argv)
    for category in (FutureWarning, DeprecationWarning):  # libraries' notices to developers, not to CLI users
        warnings.filterwarnings("ignore", category=category)
    if argv and argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if argv and argv[0] == "--version":
        print(f"trl-zoo {package_version()} ({library_versions()})")
        return 0
    command, rest = ("train", argv) if not argv or argv[0].startswith("-") else (argv[0], argv[1:])
    if command not in COMMANDS:
        from ..registry import closest_name

        close = closest_name(command, COMMANDS)
        hint = f" Did you mean {close!r}?" if close else ""
        print(f"trl-zoo: unknown command {command!r}.{hint} Commands: {', '.join(COMMANDS)}.", file=sys.stderr)
        return 2
    if command in ("train", "compare") and not any(flag in rest for flag in ("-h", "--help")):
        from .environment.one_gpu import use_one_gpu_unless_launched

        silence_library_progress_bars()
        use_one_gpu_unless_launched(command=command)  # several GPUs and no launcher: one (TRL refuses DataParallel)
    try:
        if entry and command in ("train", "compare"):
            from .arguments.config_env import apply_config_env

            apply_config_env(rest)  # a config file's env: set before the libraries read it (config_env.py)
        return COMMANDS[command](rest)
    except ONE_LINE_ERRORS as error:
        print(error_line(command, error), file=sys.stderr)
        return 2
    except TrainingInterrupted as error:
        print(f"trl-zoo {command}: {one_line(error)}", file=sys.stderr)
        return 130
    except AnotherProcessFailed as error:  # under a launch: one process has said it (launch_errors.py)
        return error.status
    except KeyboardInterrupt:
        print(f"trl-zoo {command}: interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`trl-zoo list | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes stdout
        return 141
