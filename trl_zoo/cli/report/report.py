"""The report that compares finished runs.

`write_report(directory, runs)` writes, for one or many runs:

    results.md            table: final and best held-out accuracy, reward, entropy, completion length,
                          clip fraction, train wall time; with several seeds per loss a table of means over
                          seeds and a table of paired differences; then the verdict
    metrics.csv / .jsonl  every record of every run, with a `run` column
    curves.png            held-out accuracy, reward, entropy, completion length, clip fraction and the share
                          of zero-spread groups vs step (needs matplotlib)
    heldout_accuracy.png  the headline curve alone

"Final" reward/entropy/length/clip fraction are the last logged values (TRL averages each over its logging
window).

The runs it reads (metrics.jsonl, summary.json) are `run_log.py`'s; the verdict's statistics (winner, identical
runs, paired differences over seeds, evaluation noise) are `verdict.py`'s.

Tests: tests/test_cli.py (results.md, curves), tests/test_report_significance.py (tables and verdict lines),
tests/test_heldout_mean_reward.py (the graded reward's column).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from ...run_files import open_for_writing
from ...tasks.evaluation import format_mean_reward
from .run_log import TRAIN_METRICS, Run
from .verdict import (
    PAIRED_METHOD,
    _mean,
    _rank_runs,
    identical_runs,
    identical_sentence,
    paired_differences,
    paired_table,
    seed_winner_sentence,
    single_seed_sentence,
    winner_sentence,
)


def _format(value: float | None, percent: bool = False, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.1%}" if percent else f"{value:.{digits}g}"


def markdown_table(runs: list[Run]) -> str:
    header = ["run", "loss_type", "held-out acc before", "final held-out acc", "best held-out acc (step)",
              "final held-out mean reward"]
    header += list(TRAIN_METRICS) + ["train wall time (s)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in runs:
        best, best_step = run.best
        cells = [
            run.name,
            run.summary.get("loss_type", ""),
            _format(run.summary["accuracy_before"], percent=True),
            _format(run.final_accuracy, percent=True),
            f"{best:.1%} ({best_step})",
            format_mean_reward(run.summary.get("mean_reward_after")),
        ]
        cells += [_format(run.final(column)) for column in TRAIN_METRICS]
        cells.append(f"{run.summary['train_seconds']:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _write_records(directory: Path, runs: list[Run]):
    rows = [{"run": run.name, **record} for run in runs for record in run.records]
    with open_for_writing(directory / "metrics.jsonl") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    columns = ["run", "kind", "step"] + sorted({key for row in rows for key in row} - {"run", "kind", "step"})
    with open_for_writing(directory / "metrics.csv", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "x")


def plot_styles(runs: list[Run]) -> list[dict]:
    """Each run's line style, marker and legend label: every run its own style, so a curve drawn exactly over an
    earlier one stays visible, and a run identical to an earlier one (`identical_runs`) says so in its label."""
    styles = []
    for index, run in enumerate(runs):
        twin = next((earlier for earlier in runs[:index] if identical_runs(earlier, run)), None)
        label = f"{run.name} (identical to {twin.name})" if twin else run.name
        styles.append({"label": label, "linestyle": LINE_STYLES[index % len(LINE_STYLES)],
                       "marker": MARKERS[index % len(MARKERS)]})
    return styles


def _plot(directory: Path, runs: list[Run]) -> bool:
    """Write the PNG curves; False (and no files) when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("held-out accuracy", None)] + list(TRAIN_METRICS.items())
    panels.append(("groups with zero reward spread", ("frac_reward_zero_std",)))
    styles = plot_styles(runs)
    figure, axes = plt.subplots(2, 3, figsize=(13, 7))
    axes = axes.flatten()
    for axis, (title, metric_names) in zip(axes, panels):
        for run, style in zip(runs, styles):
            points = run.accuracy() if metric_names is None else next(
                (run.series(name) for name in metric_names if run.series(name)), []
            )
            if points:
                marker = style["marker"] if len(points) < 30 else None
                axis.plot(*zip(*points), **{**style, "marker": marker}, fillstyle="none")
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    figure.tight_layout()
    with open_for_writing(directory / "curves.png", "wb") as handle:
        figure.savefig(handle, format="png", dpi=100)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(6, 4))
    for run, style in zip(runs, styles):
        axis.plot(*zip(*run.accuracy()), **style, fillstyle="none")
    axis.set_xlabel("step")
    axis.set_ylabel("greedy held-out accuracy")
    axis.set_ylim(0, 1)
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    with open_for_writing(directory / "heldout_accuracy.png", "wb") as handle:
        figure.savefig(handle, format="png", dpi=100)
    plt.close(figure)
    return True


def seed_table(groups: dict[str, list[Run]]) -> str:
    """One row per loss: means over its seeds, and the range of its final accuracy."""
    header = ["loss", "seeds", "held-out acc before", "final held-out acc", "final range", "gain (points)",
              "best held-out acc", "train wall time (s)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, runs in groups.items():
        finals = [run.final_accuracy for run in runs]
        befores = [run.summary["accuracy_before"] for run in runs]
        cells = [
            name,
            ", ".join(str(run.summary.get("seed", "")) for run in runs),
            f"{_mean(befores):.1%}",
            f"{_mean(finals):.1%}",
            f"{min(finals):.1%}–{max(finals):.1%}",
            f"{100 * (_mean(finals) - _mean(befores)):+.1f}",
            f"{_mean([run.best[0] for run in runs]):.1%}",
            f"{_mean([run.summary['train_seconds'] for run in runs]):.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def headline(runs: list[Run], groups: dict[str, list[Run]] | None = None) -> str:
    """The report's verdict: per loss over seeds when some loss ran with several seeds, else per run; a comparison
    of runs on one seed adds that one seed cannot separate losses (single_seed_sentence)."""
    if _over_seeds(groups):
        return seed_winner_sentence(groups)
    if len(runs) == 1:
        return winner_sentence(runs)
    first, second = _rank_runs(runs)[:2]
    if identical_runs(first, second):
        order = {id(run): index for index, run in enumerate(runs)}  # as given, not by wall time
        first, second = sorted((first, second), key=lambda run: order[id(run)])
        names = {id(run): name for name, group in (groups or {}).items() for run in group}
        first_name, second_name = (names.get(id(run), run.name) for run in (first, second))
        return identical_sentence(first_name, second_name, [(first, second)])
    return f"{winner_sentence(runs)} {single_seed_sentence(runs)}"


def _over_seeds(groups: dict[str, list[Run]] | None) -> bool:
    return bool(groups) and len(groups) > 1 and any(len(group) > 1 for group in groups.values())


def base_policy(run: Run) -> str:
    """The run's base policy as its summary names it (a model name, or which bootstrapped policy); older summaries
    have only the model's path, named by its last folder."""
    return run.summary.get("base_policy") or Path(str(run.summary.get("model", ""))).name


def write_report(
    directory: str | Path, runs: list[Run], title: str | None = None, groups: dict[str, list[Run]] | None = None
) -> Path:
    """Write the Markdown table, CSV/JSONL metrics and PNG curves for `runs`; returns the Markdown file.

    `groups` (loss name -> its runs, one per seed) adds a table of means over seeds, and the verdict then ranks
    losses by their mean final accuracy."""
    if not runs:
        raise ValueError("runs: nothing to report; give at least one finished run.")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    first = runs[0].summary
    seeds = sorted({str(run.summary.get("seed", "")) for run in runs})
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(seeds)}"
    policies = {}  # seed -> its base policy, in seed order
    for run in sorted(runs, key=lambda run: str(run.summary.get("seed", ""))):
        policies.setdefault(str(run.summary.get("seed", "")), base_policy(run))
    if len(set(policies.values())) == 1:
        title = title or f"trl-zoo: {first.get('task', '')} with {next(iter(policies.values()))}, {seed_text}"
        policy_line = []
    else:
        title = title or f"trl-zoo: {first.get('task', '')}, {seed_text}, one base policy per seed"
        policy_line = ["Base policy: " + "; ".join(f"seed {seed} {policy}" for seed, policy in policies.items()) + "."]
    reward = (first.get("reward_funcs") or ["exact_match"])[0]
    _write_records(directory, runs)
    plotted = _plot(directory, runs)
    curves = "Curves: curves.png, heldout_accuracy.png." if plotted else "No curves: pip install matplotlib."
    sections = [f"# {title}", *policy_line, markdown_table(runs)]
    if _over_seeds(groups):
        sections += ["## Over seeds", seed_table(groups)]
        sections += ["## Paired differences over seeds", paired_table(paired_differences(groups)), PAIRED_METHOD]
    sections += [
        headline(runs, groups),
        f"Held-out accuracy: the share of held-out prompts whose greedy completion earns reward 1 from "
        f"`{reward}`, measured before RL (step 0) and every few steps; with a graded reward (values other than 0 and "
        "±1) read the mean reward, as accuracy then counts only perfect scores. Final reward, entropy, completion "
        "length and clip fraction are the last logged values (TRL averages each over its logging window). "
        f"{curves} Every record: metrics.csv, metrics.jsonl.",
    ]
    path = directory / "results.md"
    with open_for_writing(path) as handle:
        handle.write("\n\n".join(sections) + "\n")
    return path
