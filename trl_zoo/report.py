"""What a training run records, and the report that compares runs.

A run directory holds `metrics.jsonl` (one JSON record per line: `{"kind": "train", "step", ...TRL's logged
metrics}` every `logging_steps`, `{"kind": "eval", "step", "heldout_accuracy"}` every evaluation, step 0 being
the policy before RL, and `{"kind": "end", ...}` with the trainer's closing runtime numbers) and `summary.json` (accuracy before/after, best, wall time, adapter location).

`write_report(directory, runs)` writes, for one or many runs:

    results.md            table: final and best held-out accuracy, reward, entropy, completion length,
                          clip fraction, train wall time; with several seeds per loss a second table of means
                          over seeds; then a sentence naming the winner
    metrics.csv / .jsonl  every record of every run, with a `run` column
    curves.png            held-out accuracy, reward, entropy, completion length, clip fraction and the share
                          of zero-spread groups vs step (needs matplotlib)
    heldout_accuracy.png  the headline curve alone

"Final" reward/entropy/length/clip fraction are the last logged values (TRL averages each over its logging
window). The winner has the highest final held-out accuracy; a tie goes to the higher best accuracy; runs equal on both
are reported as tied. With several seeds per loss, losses are ranked by mean final accuracy over their seeds and the
verdict says on how many shared seeds the first beat the second (the order can flip between seeds).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

from transformers import TrainerCallback

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"

# Table column -> TRL metric names to try, in order (losses log their clip diagnostics under different names).
TRAIN_METRICS = {
    "reward": ("reward",),
    "entropy": ("entropy",),
    "completion length": ("completions/mean_length",),
    "clip fraction": ("clip_ratio/region_mean", "cispo_clip_ratio"),
}


class RunLog:
    """Appends JSON records to a run's metrics file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")

    def write(self, record: dict):
        with self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")


class TrainLogRecorder(TrainerCallback):
    """Copies every training log TRL emits (reward, entropy, clip ratios, ...) into the run log; the trainer's
    closing log (runtime, mean loss) is recorded as kind "end"."""

    def __init__(self, run_log: RunLog):
        self.run_log = run_log

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and state.is_world_process_zero:
            numbers = {key: value for key, value in logs.items() if isinstance(value, (int, float))}
            kind = "end" if "train_runtime" in logs else "train"
            self.run_log.write({"kind": kind, "step": state.global_step, **numbers})
        return control


@dataclass
class Run:
    """One finished run: its name, its summary and every record it logged."""

    name: str
    summary: dict
    records: list[dict]

    def series(self, metric: str, kind: str = "train") -> list[tuple[int, float]]:
        return [
            (record["step"], record[metric])
            for record in self.records
            if record.get("kind") == kind and isinstance(record.get(metric), (int, float))
        ]

    def accuracy(self) -> list[tuple[int, float]]:
        return self.series("heldout_accuracy", kind="eval")

    def final(self, column: str) -> float | None:
        for metric in TRAIN_METRICS[column]:
            points = self.series(metric)
            if points:
                return points[-1][1]
        return None

    @property
    def final_accuracy(self) -> float:
        return self.summary["accuracy_after"]

    @property
    def best(self) -> tuple[float, int]:
        step, accuracy = max(self.accuracy(), key=lambda point: (point[1], -point[0]))
        return accuracy, step


def load_run(directory: str | Path, name: str | None = None) -> Run:
    directory = Path(directory)
    summary = json.loads((directory / SUMMARY_FILE).read_text())
    records = [json.loads(line) for line in (directory / METRICS_FILE).read_text().splitlines() if line.strip()]
    return Run(name or summary.get("name") or directory.name, summary, records)


def _format(value: float | None, percent: bool = False, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.1%}" if percent else f"{value:.{digits}g}"


def winner_sentence(runs: list[Run]) -> str:
    if len(runs) == 1:
        run = runs[0]
        return (
            f"{run.name} took held-out accuracy from {run.summary['accuracy_before']:.1%} to "
            f"{run.final_accuracy:.1%} in {run.summary['train_seconds']:.0f} s."
        )
    ranked = sorted(runs, key=lambda run: (-run.final_accuracy, -run.best[0], run.summary["train_seconds"]))
    winner, runner_up = ranked[0], ranked[1]
    if (winner.final_accuracy, winner.best[0]) == (runner_up.final_accuracy, runner_up.best[0]):
        tied = [run.name for run in ranked if (run.final_accuracy, run.best[0]) == (winner.final_accuracy, winner.best[0])]
        return (
            f"**No winner: {', '.join(tied)} tied** at {winner.final_accuracy:.1%} final and {winner.best[0]:.1%} "
            f"best held-out accuracy; {winner.name} was the fastest of them."
        )
    tied = winner.final_accuracy == runner_up.final_accuracy
    reason = "tied on final accuracy, ahead on best accuracy" if tied else "highest final held-out accuracy"
    return (
        f"**{winner.name} won** ({reason}): {winner.final_accuracy:.1%} final, {winner.best[0]:.1%} best, against "
        f"{runner_up.name}'s {runner_up.final_accuracy:.1%} (all from {winner.summary['accuracy_before']:.1%})."
    )


def markdown_table(runs: list[Run]) -> str:
    header = ["run", "loss_type", "held-out acc before", "final held-out acc", "best held-out acc (step)"]
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
        ]
        cells += [_format(run.final(column)) for column in TRAIN_METRICS]
        cells.append(f"{run.summary['train_seconds']:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _write_records(directory: Path, runs: list[Run]):
    rows = [{"run": run.name, **record} for run in runs for record in run.records]
    with (directory / "metrics.jsonl").open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    columns = ["run", "kind", "step"] + sorted({key for row in rows for key in row} - {"run", "kind", "step"})
    with (directory / "metrics.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


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
    figure, axes = plt.subplots(2, 3, figsize=(13, 7))
    axes = axes.flatten()
    for axis, (title, metric_names) in zip(axes, panels):
        for run in runs:
            points = run.accuracy() if metric_names is None else next(
                (run.series(name) for name in metric_names if run.series(name)), []
            )
            if points:
                axis.plot(*zip(*points), marker="." if len(points) < 30 else None, label=run.name)
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(directory / "curves.png", dpi=100)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(6, 4))
    for run in runs:
        axis.plot(*zip(*run.accuracy()), marker=".", label=run.name)
    axis.set_xlabel("step")
    axis.set_ylabel("greedy held-out accuracy")
    axis.set_ylim(0, 1)
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(directory / "heldout_accuracy.png", dpi=100)
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


def seed_winner_sentence(groups: dict[str, list[Run]]) -> str:
    """The loss with the highest mean final accuracy, and on how many shared seeds it beat the runner-up."""
    means = {name: _mean([run.final_accuracy for run in runs]) for name, runs in groups.items()}
    ranked = sorted(means, key=lambda name: -means[name])
    winner, runner_up = ranked[0], ranked[1]
    if means[winner] == means[runner_up]:
        tied = [name for name in ranked if means[name] == means[winner]]
        return f"**No winner: {', '.join(tied)} tied** at {means[winner]:.1%} mean final held-out accuracy."
    finals = {name: {run.summary.get("seed"): run.final_accuracy for run in runs} for name, runs in groups.items()}
    shared = sorted(set(finals[winner]) & set(finals[runner_up]), key=str)
    ahead = sum(finals[winner][seed] > finals[runner_up][seed] for seed in shared)
    sentence = (
        f"**{winner} ranks first** on mean final held-out accuracy over {len(groups[winner])} seeds: "
        f"{means[winner]:.1%}, ahead of {runner_up}'s {means[runner_up]:.1%} by "
        f"{100 * (means[winner] - means[runner_up]):.1f} points; it was ahead on {ahead} of {len(shared)} shared seeds."
    )
    if ahead < len(shared):
        sentence += " The order is not the same on every seed: read the gap as noise, or add seeds."
    return sentence


def headline(runs: list[Run], groups: dict[str, list[Run]] | None = None) -> str:
    """The report's verdict: per loss over seeds when some loss ran with several seeds, else per run."""
    return seed_winner_sentence(groups) if _over_seeds(groups) else winner_sentence(runs)


def _over_seeds(groups: dict[str, list[Run]] | None) -> bool:
    return bool(groups) and len(groups) > 1 and any(len(group) > 1 for group in groups.values())


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


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
    model = Path(str(first.get("model", ""))).name
    seeds = sorted({str(run.summary.get("seed", "")) for run in runs})
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(seeds)}"
    title = title or f"trl-zoo: {first.get('task', '')} with {model}, {seed_text}"
    reward = (first.get("reward_funcs") or ["exact_match"])[0]
    _write_records(directory, runs)
    plotted = _plot(directory, runs)
    curves = "Curves: curves.png, heldout_accuracy.png." if plotted else "No curves: pip install 'trl-zoo[plot]'."
    sections = [f"# {title}", markdown_table(runs)]
    if _over_seeds(groups):
        sections += ["## Over seeds", seed_table(groups)]
    sections += [
        headline(runs, groups),
        f"Held-out accuracy: the share of held-out prompts whose greedy completion earns reward 1 from "
        f"`{reward}`, measured before RL (step 0) and every few steps. Final reward, entropy, completion length "
        f"and clip fraction are the last logged values (TRL averages each over its logging window). {curves} "
        "Every record: metrics.csv, metrics.jsonl.",
    ]
    path = directory / "results.md"
    path.write_text("\n\n".join(sections) + "\n")
    return path
