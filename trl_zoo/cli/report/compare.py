"""`trl-zoo compare`: train one run per loss (and per seed), each in a fresh `trl-zoo train` process, then write
the comparison report (`report.py`).

    trl-zoo compare --losses grpo,dapo [--seeds 0,1,2] [--report_dir DIR] [train flags ...]

Runs go to `<report_dir>/<loss>` (one seed) or `<report_dir>/<loss>/seed<s>`; a loss may also be a YAML config
path, named by its file stem. A report_dir that already holds finished runs is refused before anything runs, unless
`--overwrite_output_dir true` is given.

Tests: tests/test_cli.py (`trl-zoo compare` end to end), tests/test_compare_identical.py (identical runs said so),
tests/test_trl_grpo_fields.py (TRL's fields passed through).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from ...registry import LOSSES
from ..arguments.train_arguments import CONFIG_SUFFIXES, config_path, make_train_parser, read_config
from ..errors import ConfigError
from .report import headline, write_report
from .run_log import SUMMARY_FILE, load_run

DEFAULT_COMPARE_SEEDS = "0,1,2"


def _compare_parser() -> argparse.ArgumentParser:
    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise ConfigError(message)

    parser = Parser(
        prog="trl-zoo compare",
        allow_abbrev=False,  # "--seed" is a train flag, not a prefix of "--seeds"
        description="Train one run per loss (same task, model and seed; or several seeds) and compare. Every other "
        "flag is a `trl-zoo train` flag (`trl-zoo train --help` lists them: --task, --max_steps, --dataset_name, "
        "...) and applies to every run.",
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



def compare_seeds(
    seeds: str | None, train_argv: list[str], configs: list[dict] | None = None
) -> tuple[list[int | None], str]:
    """The seeds every loss runs with, and a line to log when they are the default (else "").

    On a built-in task (no dataset_name or datasets among the train flags or the config files `configs`) with no
    seed given (neither --seeds nor --seed nor a config's seed), compare runs DEFAULT_COMPARE_SEEDS: a run takes
    minutes there, and one seed cannot separate losses whose gap is below the seed-to-seed spread."""

    def given(key: str) -> bool:
        flag = f"--{key}"
        in_flags = any(arg == flag or arg.startswith(flag + "=") for arg in train_argv)
        return in_flags or any(config.get(key) is not None for config in configs or [])

    if seeds is not None or given("seed") or given("dataset_name") or given("datasets"):
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
    config_paths = [path for path in [config_path(train_argv)] if path]
    config_paths += [selection[1] for _, selection in selections if selection[0] == "--config"]
    configs = [read_config(path) for path in config_paths]
    num_heldout = make_train_parser().parse_known_args(train_argv)[0].num_heldout
    if num_heldout == 0 or any(config.get("num_heldout") == 0 for config in configs):
        raise ConfigError("num_heldout: compare ranks runs by held-out accuracy, so it needs a held-out set; drop 0.")
    seed_list, default_message = compare_seeds(seeds, train_argv, configs)
    if default_message:
        log(default_message)

    directory = Path(report_dir or "runs/compare")
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    runs = []  # (run name, loss name, output directory, train arguments)
    for seed in seed_list:
        for name, selection in selections:
            if seed is None:
                runs.append((name, name, directory / name, selection))
            else:
                seeded = [*selection, "--seed", str(seed)]
                runs.append((f"{name} seed {seed}", name, directory / name / f"seed{seed}", seeded))
    earlier = [run_name for run_name, _, output_dir, _ in runs if (output_dir / SUMMARY_FILE).is_file()]
    overwrite = make_train_parser().parse_known_args(train_argv)[0].overwrite_output_dir
    if earlier and not (overwrite or any(config.get("overwrite_output_dir") for config in configs)):
        raise ConfigError(
            f"report_dir: {directory} already holds finished runs ({', '.join(earlier)}); give --report_dir NEW or "
            f"--overwrite_output_dir true to replace them."
        )
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
