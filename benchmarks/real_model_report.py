"""Tables and figures of the real-model study from its run folders (benchmarks/real_model.py).

    python benchmarks/real_model_report.py RUNS [RUNS ...] --out DIR

Each RUNS folder holds <task>/<configuration>/seed<s>/ with summary.json, metrics.jsonl, completions.jsonl and
costs.json. A configuration run twice for one seed (e.g. in two batches) keeps its later copy, and the earlier one is
listed as a replicate. Writes DIR/tables.md — per task: held-out accuracy before and after per seed, gain over that
task's null-reward control paired by seed, time and memory, `trl-zoo compare`'s paired verdict, the paired
difference of each of the study's own questions (`QUESTIONS`) — and DIR/*.png
(training reward, entropy of dapo with clip-higher against a symmetric clip, length of wrong answers of dr_grpo
against grpo, trl_zoo against TRL's trainer, held-out accuracy of the eight-updates-per-batch losses per seed, and
of the methods plan's methods against grpo and the control per seed).
Configurations are compared only within a task: "control" of one task is not the control of another.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Run:
    task: str
    name: str
    seed: int
    folder: Path
    summary: dict
    costs: dict
    train: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    completions: list[dict] = field(default_factory=list)

    @property
    def after(self) -> float:
        return self.summary["accuracy_after"]

    def series(self, key: str) -> list[float | None]:
        return [record.get(key) for record in self.train]


def load_runs(roots: list[Path]) -> tuple[dict[tuple[str, str, int], Run], list[Run]]:
    runs, replicates = {}, []
    for root in roots:
        for summary_file in sorted(root.glob("*/*/seed*/summary.json")):
            folder = summary_file.parent
            records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line]
            completions = folder / "completions.jsonl"
            run = Run(
                task=folder.parent.parent.name,
                name=folder.parent.name,
                seed=int(folder.name.removeprefix("seed")),
                folder=folder,
                summary=json.loads(summary_file.read_text()),
                costs=json.loads((folder / "costs.json").read_text()),
                train=[r for r in records if r["kind"] == "train"],
                evals=[r for r in records if r["kind"] == "eval"],
                completions=[json.loads(line) for line in completions.read_text().splitlines()] if completions.exists()
                else [],
            )
            key = (run.task, run.name, run.seed)
            if key in runs:
                replicates.append(runs[key])
            runs[key] = run
    return runs, replicates


def mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def window_mean(values: list, start: int, stop: int) -> float | None:
    return mean(values[start:stop])


def of_task(runs: dict[tuple[str, str, int], Run], task: str) -> dict[tuple[str, int], Run]:
    """One task's runs, keyed by (configuration, seed)."""
    return {(name, seed): run for (t, name, seed), run in runs.items() if t == task}


def configurations(runs: dict[tuple[str, int], Run]) -> list[str]:
    """The configurations present, those of ORDER first, the control last."""
    present = {name for name, _ in runs}
    return ([n for n in ORDER if n in present] + sorted(present - set(ORDER) - {"control"})
            + (["control"] if "control" in present else []))


ORDER = ["grpo", "dr_grpo", "dapo", "gspo", "cispo", "sapo", "grpo_resample", "grpo_greso", "maxrl", "grpo_teacher",
         "grpo_teacher_no_context", "dapo_symmetric", "dapo_clip_higher", "dppo", "topr", "m2po", "ipo", "passk",
         "grpo_passk", "luffy", "chord", "a2po", "dler", "ttrl", "gdpo", "trl_grpo", "trl_dapo"]
# the methods plan's configurations beyond its anchors (grpo, control), as real_model.py's method_runs names them
METHODS = ["maxrl", "passk", "grpo_passk", "dppo", "topr", "m2po", "ipo", "luffy", "chord", "a2po", "grpo_teacher",
           "dler", "ttrl", "gdpo"]


def table(runs: dict[tuple[str, int], Run], names: list[str], seeds: list[int]) -> str:
    controls = {seed: runs[("control", seed)].after for seed in seeds if ("control", seed) in runs}
    lines = [
        "| configuration | before | after, seed " + " / ".join(map(str, seeds)) + " | mean gain | over the control, "
        "paired by seed | worst seed over the control | median step (s) | peak memory (GiB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        present = [runs[(name, s)] for s in seeds if (name, s) in runs]
        if not present:
            continue
        afters = " / ".join(f"{runs[(name, s)].after:.1%}" if (name, s) in runs else "—" for s in seeds)
        gain = mean(r.after - r.summary["accuracy_before"] for r in present)
        over = [r.after - controls[r.seed] for r in present if r.seed in controls and name != "control"]
        over_text = " / ".join(f"{100 * d:+.1f}" for d in over) if over else "—"
        worst = f"{100 * min(over):+.1f}" if over else "—"
        step = statistics.median(r.costs["median_step_seconds"] for r in present)
        memory = max(r.costs["peak_memory_gib"] for r in present)
        lines.append(
            f"| {name} | {present[0].summary['accuracy_before']:.1%} | {afters} | {100 * gain:+.1f} | {over_text} | "
            f"{worst} | {step:.2f} | {memory:.2f} |"
        )
    return "\n".join(lines)


def compare_groups(runs: dict[tuple[str, int], Run]) -> dict[str, list]:
    """One task's runs as `trl-zoo compare` reads them: configuration -> its runs over seeds."""
    from trl_zoo.cli.report.run_log import load_run

    groups: dict[str, list] = {}
    for (name, _), run in sorted(runs.items()):
        groups.setdefault(name, []).append(load_run(run.folder, name))
    return groups


def verdict_lines(groups: dict[str, list]) -> list[str]:
    """`trl-zoo compare`'s verdict on one task's configurations (`compare_groups`): the first by mean held-out
    accuracy against each other, paired by seed, with a 95 % t-interval (`trl_zoo/cli/report/verdict.py`)."""
    from trl_zoo.cli.report.verdict import paired_differences, paired_table, seed_winner_sentence

    if len(groups) < 2:
        return []
    return [seed_winner_sentence(groups), "", paired_table(paired_differences(groups))]


# the study's own questions, each a paired difference of final held-out accuracy (first − second) where both ran
QUESTIONS = (
    ("grpo_teacher", "grpo_teacher_no_context", "what the teacher's privileged context (the answer) adds"),
    ("grpo_teacher", "grpo", "the teacher signal against rewards alone"),
    ("maxrl", "grpo", "MaxRL against GRPO"),
    ("dapo_clip_higher", "dapo_symmetric", "clip-higher against a symmetric clip"),
    *((name, "grpo", f"{name} against GRPO") for name in METHODS if name not in ("maxrl", "grpo_teacher")),
)


def question_lines(groups: dict[str, list]) -> list[str]:
    """The QUESTIONS whose two configurations both ran on this task (`compare_groups`), as `trl-zoo compare`'s paired
    table with the question named; [] when none did."""
    from trl_zoo.cli.report.verdict import paired_difference, paired_table

    asked = [(first, second, text) for first, second, text in QUESTIONS if first in groups and second in groups]
    if not asked:
        return []
    pairs = [paired_difference(groups, first, second) for first, second, _ in asked]
    return ["Questions:", *(f"- {first} − {second}: {text}" for first, second, text in asked), "",
            paired_table(pairs)]


def mechanism_lines(runs, seeds) -> list[str]:
    lines = []
    for first, second, key, label, source in (
        ("dapo", "dapo_symmetric", "entropy", "entropy (nats) over the second half", "train"),
        ("dapo_clip_higher", "dapo_symmetric", "entropy", "entropy (nats) over the second half", "train"),
        (
            "grpo", "dr_grpo", "length_wrong", "mean length of wrong answers (tokens) over the second half",
            "completions",
        ),
    ):
        pairs = []
        for seed in seeds:
            if (first, seed) in runs and (second, seed) in runs:
                values = []
                for name in (first, second):
                    run = runs[(name, seed)]
                    series = run.series(key) if source == "train" else [c.get(key) for c in run.completions]
                    half = len(series) // 2
                    values.append(window_mean(series, half, len(series)))
                pairs.append((seed, *values))
        if pairs:
            text = "; ".join(f"seed {s}: {a:.3f} vs {b:.3f}" for s, a, b in pairs)
            higher = sum(a > b for _, a, b in pairs)
            lines.append(f"- {label}, {first} vs {second}: {text} ({first} higher on {higher} of {len(pairs)} seeds)")
    return lines


def figures(runs, seeds, out: Path, prefix: str = "") -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = []

    def ran(names):
        """The configurations of `names` with a run of some seed, in that order."""
        return [name for name in names if any((name, seed) in runs for seed in seeds)]

    def draw(filename, title, ylabel, groups, key, source="train", compare=True):
        if compare and len(ran(groups)) < 2:
            return  # a comparison needs both sides
        fig, ax = plt.subplots(figsize=(7, 4))
        for index, name in enumerate(groups):
            for seed in seeds:
                run = runs.get((name, seed))
                if run is None:
                    continue
                series = run.series(key) if source == "train" else [c.get(key) for c in run.completions]
                ax.plot(range(1, len(series) + 1), series, color=f"C{index}", alpha=0.8, linewidth=1.2,
                        linestyle=["-", "--", ":"][seed % 3], label=f"{name} seed {seed}")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        if not ax.lines:
            plt.close(fig)
            return
        ax.legend(fontsize=6, ncol=3)
        fig.tight_layout()
        fig.savefig(out / (prefix + filename), dpi=110)
        plt.close(fig)
        drawn.append(prefix + filename)

    draw("reward.png", "batch reward (final_number) per step", "mean reward",
         [n for n in configurations(runs) if not n.startswith("trl_")], "reward", compare=False)
    draw("entropy_clip_higher.png", "entropy: dapo with ε_high 0.28 vs a symmetric clip (0.2)", "entropy (nats)",
         ["dapo_clip_higher", "dapo_symmetric"], "entropy")
    draw("wrong_length_dr_grpo.png", "mean length of wrong completions: grpo vs dr_grpo", "tokens",
         ["grpo", "dr_grpo"], "length_wrong", source="completions")
    draw("trl_side_by_side.png", "batch reward: trl_zoo vs trl.GRPOTrainer", "mean reward",
         ["grpo", "trl_grpo", "dapo", "trl_dapo"], "reward")

    def heldout_panels(filename, title, names):
        """Held-out accuracy of `names` against the step, one panel per seed (each seed its own base policy)."""
        present = ran(names)
        if len(present) < 2:
            return
        fig, axes = plt.subplots(1, len(seeds), figsize=(4 * len(seeds), 3.6), sharey=True, squeeze=False)
        for ax, seed in zip(axes[0], seeds):
            for name in present:
                run = runs.get((name, seed))
                if run is not None:
                    ax.plot([r["step"] for r in run.evals], [100 * r["heldout_accuracy"] for r in run.evals],
                            marker="o", markersize=3, label=name,
                            color=f"C{names.index(name)}" if len(names) <= 10 else plt.cm.tab20(names.index(name)))
            ax.set_title(f"seed {seed}", fontsize=10)
            ax.set_xlabel("optimizer step")
        axes[0][0].set_ylabel("held-out accuracy (%), greedy")
        axes[0][0].legend(fontsize=7)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(out / (prefix + filename), dpi=110)
        plt.close(fig)
        drawn.append(prefix + filename)

    if ran(["dapo_symmetric"]):  # the offpolicy plan's anchor (the methods plan's dppo, topr, m2po take 4 updates)
        heldout_panels("heldout_offpolicy.png", "held-out accuracy, eight updates per generation batch",
                       [n for n in ORDER if n in ("dapo_symmetric", "dapo_clip_higher", "dppo", "topr", "m2po")])
    if ran(["ipo", "luffy", "chord", "a2po", "passk", "grpo_passk", "dler", "ttrl", "gdpo"]):  # the methods plan
        heldout_panels("heldout_methods.png", "held-out accuracy: each method against grpo and the control",
                       ["grpo", *METHODS, "control"])
    heldout_panels("heldout_teacher.png", "held-out accuracy: the teacher signal with and without the answer",
                   ["grpo", "grpo_teacher", "grpo_teacher_no_context", "control"])
    return drawn


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    runs, replicates = load_runs(args.runs)
    args.out.mkdir(parents=True, exist_ok=True)
    tasks = sorted({task for task, _, _ in runs})
    text = ["# Real model on one GPU: tables"]
    for task in tasks:
        ofit = of_task(runs, task)
        groups = compare_groups(ofit)
        drawn = figures(ofit, seeds, args.out, prefix="" if len(tasks) == 1 else f"{task}_")
        text += [
            "", f"## {task}", "", table(ofit, configurations(ofit), seeds), "",
            *verdict_lines(groups), "",
            *question_lines(groups), "",
            "Mechanisms:", *(mechanism_lines(ofit, seeds) or ["- none of the pairs ran on this task"]), "",
            *[f"![{name}]({name})" for name in drawn],
        ]
    text += [
        "", "Replicates (a configuration and seed run twice; the table uses the later copy): "
        + (", ".join(f"{r.task}/{r.name} seed {r.seed}: {r.after:.1%} ({r.folder.parent.parent.parent.name})"
                     for r in replicates) or "none"),
    ]
    (args.out / "tables.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
