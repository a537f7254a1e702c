"""The five mechanism figures of the testbed, from the JSONL files of `benchmarks/lib/testbed.py` (several seeds).

    python benchmarks/testbed_figures.py --runs DIR [--out DIR] [--samplers resample,greso] [--figures abcde]

Writes `figures.md` (per figure: a table of mean ± standard deviation over seeds at regular steps, and one line
saying whether the paper's claim shows) and, when matplotlib is installed, one PNG per figure (mean line, min-max
band over seeds). A claim "shows" when the seed-paired difference of the compared summaries has the claimed sign
for every seed; the line gives the mean paired difference ± its standard deviation and the count of agreeing seeds.

    (a) clip-higher, DAPO arXiv:2503.14476: ε_high 0.28 keeps entropy above ε_high 0.2 (dapo vs dapo_symmetric)
    (b) dynamic sampling, DAPO: every trained group informative, at the price of more completions generated
    (c) Dr. GRPO arXiv:2503.20783: GRPO's 1/|o_i| lets incorrect completions grow longer than under Dr. GRPO
    (d) GSPO arXiv:2507.18071 / GMPO arXiv:2507.20673: sequence-level ratios dip less under off-policy micro-steps
        than token-level GRPO/DAPO (largest reward drawdown; clip fraction; gradient norm), and GSPO clips a far
        larger share of the batch than GRPO yet learns at least as well
    (e) CISPO arXiv:2506.13585: keeping every token's gradient learns faster than DAPO (held-out accuracy vs steps)
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

RUN_FILE = re.compile(r"^(?P<run>.+)-seed(?P<seed>\d+)\.jsonl$")


def load_runs(folder: Path) -> dict[str, dict[int, list[dict]]]:
    """run name -> seed -> step records (the final {"done": ...} line dropped)."""
    runs: dict[str, dict[int, list[dict]]] = defaultdict(dict)
    for path in sorted(folder.glob("*.jsonl")):
        match = RUN_FILE.match(path.name)
        if match:
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            runs[match["run"]][int(match["seed"])] = [record for record in records if "step" in record]
    return dict(runs)


def series(records: list[dict], metric: str) -> dict[int, float]:
    """step -> value of `metric`, where logged and not null."""
    return {record["step"]: float(record[metric]) for record in records if record.get(metric) is not None}


def window_mean(records: list[dict], metric: str, start_fraction: float = 0.5) -> float | None:
    """Mean of `metric` over the last (1 − start_fraction) of the steps."""
    values = series(records, metric)
    if not values:
        return None
    last = max(values)
    kept = [value for step, value in values.items() if step >= start_fraction * last]
    return statistics.fmean(kept) if kept else None


def largest_drawdown(records: list[dict], metric: str = "reward") -> float | None:
    """max_t (max_{s ≤ t} x_s − x_t): the deepest dip of `metric` below its running best."""
    values = [value for _, value in sorted(series(records, metric).items())]
    if not values:
        return None
    best, deepest = values[0], 0.0
    for value in values:
        best = max(best, value)
        deepest = max(deepest, best - value)
    return deepest


def final_value(records: list[dict], metric: str) -> float | None:
    values = series(records, metric)
    return values[max(values)] if values else None


def mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.3g}"
    return f"{statistics.fmean(values):.3g} ± {statistics.stdev(values):.2g}"


def step_table(runs: dict, labels: list[tuple[str, str]], metric: str, every: int) -> list[str]:
    """Markdown rows per window of `every` steps (s − every, s] (step 0 on its own): each seed's mean of `metric`
    over the window, then mean ± sd over seeds, for each run."""
    present = [(label, name) for label, name in labels if name in runs]
    steps = sorted({step for _, name in present for records in runs[name].values()
                    for step in series(records, metric)})
    if not steps:
        return [f"(no `{metric}` logged)"]
    windows = ([(0, 0)] if steps[0] == 0 else []) + [
        (end - every + 1, end) for end in range(every, steps[-1] + every, every) if end - every < steps[-1]
    ]
    lines = ["| steps | " + " | ".join(f"{label} (n={len(runs[name])})" for label, name in present) + " |",
             "|---|" + "---|" * len(present)]
    for first, last in windows:
        cells = []
        for _, name in present:
            means = []
            for records in runs[name].values():
                values = [value for step, value in series(records, metric).items() if first <= step <= last]
                if values:
                    means.append(statistics.fmean(values))
            cells.append(mean_sd(means))
        lines.append(f"| {first if first == last else f'{max(first, 1)}-{last}'} | " + " | ".join(cells) + " |")
    return lines


def paired_claim(runs: dict, better: str, worse: str, summary, higher_is_better: bool, what: str) -> str:
    """One line: does `better` beat `worse` on `summary(records)` for every seed both ran?"""
    if better not in runs or worse not in runs:
        return f"{what}: not measured ({better if better not in runs else worse} has no runs)."
    seeds = sorted(set(runs[better]) & set(runs[worse]))
    differences = []
    for seed in seeds:
        a, b = summary(runs[better][seed]), summary(runs[worse][seed])
        if a is not None and b is not None:
            differences.append((a - b) if higher_is_better else (b - a))
    if not differences:
        return f"{what}: not measured (no paired seeds with data)."
    agreeing = sum(difference > 0 for difference in differences)
    spread = statistics.stdev(differences) if len(differences) > 1 else 0.0
    verdict = "SHOWS" if agreeing == len(differences) else "does NOT show"
    return (f"{what}: {verdict} — {better} ahead of {worse} in {agreeing}/{len(differences)} seeds, mean advantage "
            f"{statistics.fmean(differences):+.3g} ± {spread:.2g}.")


def smoothed(values: dict[int, float], window: int) -> dict[int, float]:
    """Trailing mean over the last `window` logged values (1: unchanged)."""
    steps = sorted(values)
    return {step: statistics.fmean(values[s] for s in steps[max(0, i - window + 1) : i + 1])
            for i, step in enumerate(steps)}


def plot(runs: dict, labels: list[tuple[str, str]], panels: list[tuple[str, str]], path: Path, title: str,
         smooth: int = 1) -> bool:
    """One row of panels (metric, y label); mean line and min-max band over seeds of each seed's trailing mean over
    `smooth` logged values. False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for axis, (metric, ylabel) in zip(axes[0], panels):
        for label, name in labels:
            if name not in runs:
                continue
            per_seed = [smoothed(series(records, metric), smooth) for records in runs[name].values()]
            steps = sorted({step for values in per_seed for step in values})
            rows = [[values[step] for values in per_seed if step in values] for step in steps]
            axis.plot(steps, [statistics.fmean(row) for row in rows], label=f"{label} (n={len(per_seed)})")
            axis.fill_between(steps, [min(row) for row in rows], [max(row) for row in rows], alpha=0.2)
        axis.set_xlabel("optimizer step")
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def figures(runs: dict, samplers: list[str]) -> list[dict]:
    """The five figures: title, compared runs, plotted metrics, tabulated metrics and claim lines."""
    on_policy_steps = lambda records: window_mean(records, "reward")  # noqa: E731
    sampler_runs = [(f"dapo + {sampler}", f"dapo-{sampler}") for sampler in samplers]
    return [
        dict(
            key="a_clip_higher", title="(a) DAPO clip-higher: entropy over steps",
            labels=[("dapo ε_high 0.28", "dapo"), ("dapo ε_high 0.2", "dapo_symmetric")],
            panels=[("entropy", "token entropy"), ("clip_ratio/high_mean", "high-clip fraction")],
            tables=["entropy", "clip_ratio/high_mean"],
            claims=[paired_claim(runs, "dapo", "dapo_symmetric", lambda r: window_mean(r, "entropy"), True,
                                 "clip-higher keeps entropy higher (mean entropy over the second half)")],
        ),
        dict(
            key="b_dynamic_sampling", title="(b) dynamic sampling: informative share and completions generated",
            labels=[("dapo, no sampler", "dapo"), *sampler_runs],
            panels=[("informative_share", "informative share of generated groups"),
                    ("completions_generated", "completions generated"), ("heldout_accuracy", "held-out accuracy")],
            tables=["informative_share", "dynamic_sampling/kept_fraction", "completions_generated",
                    "heldout_accuracy"],
            claims=[paired_claim(runs, name, "dapo", lambda r: final_value(r, "heldout_accuracy"), True,
                                 f"{label} ends at a higher held-out accuracy per step")
                    for label, name in sampler_runs]
            + [paired_claim(runs, "dapo", name, lambda r: final_value(r, "completions_generated"), False,
                            f"{label} generates more completions for the same steps (its price)")
               for label, name in sampler_runs],
        ),
        dict(
            key="c_dr_grpo_length", title="(c) Dr. GRPO vs GRPO: length of incorrect completions",
            labels=[("grpo", "grpo"), ("dr_grpo", "dr_grpo")],
            panels=[("length_incorrect", "mean tokens, incorrect"), ("length_correct", "mean tokens, correct")],
            tables=["length_incorrect", "length_correct"],
            claims=[paired_claim(runs, "grpo", "dr_grpo", lambda r: window_mean(r, "length_incorrect"), True,
                                 "GRPO's incorrect completions are longer than Dr. GRPO's (second half)")],
        ),
        dict(
            key="d_off_policy_stability", title="(d) sequence-level vs token-level ratios under off-policy steps",
            labels=[("grpo", "grpo"), ("dapo", "dapo"), ("gspo", "gspo"), ("gmpo", "gmpo")],
            panels=[("reward", "batch reward"), ("clip_ratio/region_mean", "clip fraction"),
                    ("grad_norm", "gradient norm")],
            tables=["reward", "clip_ratio/region_mean", "grad_norm"],
            claims=[paired_claim(runs, new, old, largest_drawdown, False,
                                 f"{new} has a shallower largest reward dip than {old}")
                    for new in ("gspo", "gmpo") for old in ("grpo", "dapo")]
            + [paired_claim(runs, "gspo", "grpo", lambda r: window_mean(r, "clip_ratio/region_mean", 0.0), True,
                            "GSPO clips a far larger share than GRPO (the GSPO paper's observation), whole run")]
            + [paired_claim(runs, new, old, lambda r: window_mean(r, "reward"), True,
                            f"{new}'s batch reward is higher than {old}'s over the second half")
               for new in ("gspo", "gmpo") for old in ("grpo", "dapo")]
            + [paired_claim(runs, new, old, lambda r: max(series(r, "grad_norm").values(), default=None), False,
                            f"{new}'s largest gradient norm is below {old}'s")
               for new in ("gspo", "gmpo") for old in ("grpo", "dapo")],
        ),
        dict(
            key="e_cispo_accuracy", title="(e) CISPO vs DAPO: held-out accuracy over steps",
            labels=[("dapo", "dapo"), ("cispo", "cispo")],
            panels=[("heldout_accuracy", "held-out greedy accuracy"), ("reward", "batch reward")],
            tables=["heldout_accuracy", "reward"],
            claims=[paired_claim(runs, "cispo", "dapo", lambda r: final_value(r, "heldout_accuracy"), True,
                                 "CISPO ends at a higher held-out accuracy than DAPO"),
                    paired_claim(runs, "cispo", "dapo", on_policy_steps, True,
                                 "CISPO's batch reward is higher over the second half")],
        ),
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", required=True, help="Folder with <run>-seed<S>.jsonl files.")
    parser.add_argument("--out", default=None, help="Where figures.md and the PNGs go (default: --runs).")
    parser.add_argument("--samplers", default="resample", help="Comma-separated samplers of figure (b).")
    parser.add_argument("--every", type=int, default=10, help="Table rows: means over windows of N steps.")
    parser.add_argument("--smooth", type=int, default=5, help="Plots: trailing mean over N logged values per seed.")
    parser.add_argument("--title", default="Testbed figures")
    parser.add_argument("--figures", default="abcde", help="Which figures, by letter (e.g. 'd').")
    args = parser.parse_args(argv)
    runs = load_runs(Path(args.runs))
    out = Path(args.out or args.runs)
    out.mkdir(parents=True, exist_ok=True)
    listed = ", ".join(f"{name} ({len(seeds)} seeds)" for name, seeds in sorted(runs.items()))
    lines = [f"# {args.title}", "", f"Runs: {listed}.",
             f"Table cells: each seed's mean over the window of {args.every} steps, then mean ± standard deviation "
             "over seeds."]
    for figure in figures(runs, [s for s in args.samplers.split(",") if s]):
        if figure["key"][0] not in args.figures:
            continue
        lines += ["", f"## {figure['title']}", ""]
        title = figure["title"] + (f" (trailing mean of {args.smooth} logged values)" if args.smooth > 1 else "")
        if plot(runs, figure["labels"], figure["panels"], out / f"{figure['key']}.png", title, args.smooth):
            lines += [f"![{figure['key']}]({figure['key']}.png)", ""]
        lines += [f"- {claim}" for claim in figure["claims"]]
        for metric in figure["tables"]:
            lines += ["", f"`{metric}`", "", *step_table(runs, figure["labels"], metric, args.every)]
    (out / "figures.md").write_text("\n".join(lines) + "\n")
    print("\n".join(line for line in lines if line.startswith(("## ", "- "))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
