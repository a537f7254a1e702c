"""Held-out accuracy against the training clock, one panel per seed: each run of a time-to-target study
(`time_to_target.py`) as a line, TRL's target a* as a dashed line, a run's stop marked.

    python benchmarks/time_to_target_figure.py DIR [--out DIR/time_to_target.png]

Reads DIR/records.jsonl (write it with `time_to_target.py --summarize` after merging pieces). The clock excludes
the held-out evaluation, as in the study's figure of time to target.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def curves_by_seed(records: list[dict]) -> dict[int, list[tuple[str, list, float | None]]]:
    """seed -> [(run name, curve [(step, accuracy, clock)], TRL's target)] of the runs that finished."""
    targets = {r["seed"]: r.get("target") for r in records if r["name"] == "trl" and not r.get("failed")}
    seeds: dict[int, list] = {}
    for r in records:
        if r.get("failed") or r["seed"] not in targets:
            continue
        seeds.setdefault(r["seed"], []).append((r["name"], r["curve"], targets[r["seed"]]))
    return dict(sorted(seeds.items()))


def draw(records: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = curves_by_seed(records)
    if not seeds:
        raise SystemExit("records.jsonl: no seed with a finished TRL run; nothing to draw.")
    names = sorted({name for runs in seeds.values() for name, _, _ in runs}, key=lambda n: (n != "trl", n))
    colours = {name: f"C{i}" for i, name in enumerate(names)}
    figure, axes = plt.subplots(1, len(seeds), figsize=(4.2 * len(seeds), 3.6), sharey=True, squeeze=False)
    for axis, (seed, runs) in zip(axes[0], seeds.items()):
        for name, curve, target in runs:
            clock = [point[2] for point in curve]
            accuracy = [100 * point[1] for point in curve]
            axis.plot(clock, accuracy, marker=".", color=colours[name], label=name)
            axis.plot(clock[-1:], accuracy[-1:], marker="o", color=colours[name])
        if runs[0][2] is not None:
            axis.axhline(100 * runs[0][2], color="grey", linestyle="--", linewidth=1)
        axis.set_title(f"seed {seed}")
        axis.set_xlabel("training clock, s (evaluation excluded)")
    axes[0][0].set_ylabel("held-out greedy accuracy, %")
    from matplotlib.lines import Line2D

    every_run = [Line2D([], [], marker=".", color=colours[name], label=name) for name in names]
    axes[0][-1].legend(handles=every_run, fontsize=7, loc="lower right")  # every run, also those a seed lacks
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folder = Path(args.dir)
    records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines() if line.strip()]
    print(draw(records, Path(args.out) if args.out else folder / "time_to_target.png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
