"""The verdict on finished runs: which run or loss won, and whether that is told apart from noise.

The verdict separates signal from noise. With one seed it names no winner: it says which run ended highest (the
highest final held-out accuracy, a tie going to the higher best accuracy; runs equal on both are tied), that one
seed cannot separate losses whose gap is below the seed-to-seed spread, and whether the gap at least exceeds the
held-out evaluation noise, 1.96 * sqrt(p1 (1 - p1) / N + p2 (1 - p2) / N) for accuracies p on N prompts
(`eval_noise_sentence`).
With several seeds per loss, losses are ranked by mean final accuracy, and the first is compared with each other
loss paired by seed (`PairedDifference`): d_s = acc_first(s) - acc_other(s) over the seeds both finished (one seed
gives both losses the same base policy), 95% CI = mean(d) +- t_{0.975, n-1} * sd(d) / sqrt(n). "significant" only
when the interval excludes 0; otherwise the two "cannot be told apart" (within seed noise). The interval already
holds the evaluation noise, so it is the whole verdict. Two runs equal at every step (`identical_runs`) are one
algorithm, and the verdict says so instead.

The runs come from `run_log.py`; `report.py` writes the verdict into the report.

Tests: tests/test_report_significance.py (paired t-interval, winner sentences, evaluation noise),
tests/test_compare_identical.py (identical runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .run_log import Run

# What two runs must share to be the same run: every held-out accuracy and these logged metrics at every step.
IDENTITY_METRICS = ("loss", "reward", "grad_norm")


def _numerically_equal(a: float, b: float) -> bool:
    """Equal up to float32 rounding (TRL logs float32 values)."""
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def identical_runs(first: Run, second: Run) -> bool:
    """The same held-out accuracies and the same logged loss, reward and gradient norm at the same steps (timings
    aside): runs that are one algorithm, whatever their loss_type says."""
    series = [("heldout_accuracy", "eval")] + [(metric, "train") for metric in IDENTITY_METRICS]
    for metric, kind in series:
        a, b = first.series(metric, kind), second.series(metric, kind)
        if [step for step, _ in a] != [step for step, _ in b]:
            return False
        if not all(_numerically_equal(x, y) for (_, x), (_, y) in zip(a, b)):
            return False
    return bool(first.accuracy())


def identical_reason(pairs: list[tuple[Run, Run]]) -> str:
    """Why identical runs are identical, when their records tell: no reward spread at any step (every advantage 0),
    or both on-policy (one update per generation batch: every ratio is 1) with losses of the same aggregation,
    which then have the same value and gradient (the sanity law: on-policy, every loss gives REINFORCE's gradient
    under its aggregation)."""
    runs = [run for pair in pairs for run in pair]
    spreads = [value for run in runs for _, value in run.series("frac_reward_zero_std")]
    if spreads and all(value == 1 for value in spreads):
        return (
            "Why: every group's rewards were equal at every step, so every advantage was 0 and neither loss moved the "
            "policy."
        )
    losses = [run.summary.get("loss_type") for run in pairs[0]]
    if all(run.summary.get("updates_per_batch") == 1 for run in runs):
        from ...registry import LOSSES  # the verdict reads runs; only this reason needs the loss table

        if all(loss in LOSSES for loss in losses):
            aggregations = {LOSSES.get(loss).spec.aggregation for loss in losses}
            if len(aggregations) == 1:
                return (
                    f"Why: both took one update per generation batch (on-policy), where every ratio is 1 and "
                    f"{losses[0]!r} and {losses[1]!r} have the same value and gradient (REINFORCE's under the same "
                    f"aggregation, {aggregations.pop()})."
                )
    return "Why is not known from the runs' records: check that the two configurations differ where it matters."


def identical_sentence(first: str, second: str, pairs: list[tuple[Run, Run]]) -> str:
    seeds = [str(a.summary.get("seed", "")) for a, _ in pairs]
    on = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(seeds)}"
    return (
        f"**{first} and {second} are identical runs** on {on}: every held-out accuracy and every logged loss, reward "
        f"and gradient norm are equal, so there is one algorithm here, not two. {identical_reason(pairs)}"
    )


def winner_sentence(runs: list[Run]) -> str:
    if len(runs) == 1:
        run = runs[0]
        return (
            f"{run.name} took held-out accuracy from {run.summary['accuracy_before']:.1%} to "
            f"{run.final_accuracy:.1%} in {run.summary['train_seconds']:.0f} s."
        )
    ranked = _rank_runs(runs)
    winner, runner_up = ranked[0], ranked[1]
    if (winner.final_accuracy, winner.best[0]) == (runner_up.final_accuracy, runner_up.best[0]):
        tied = [
            run.name for run in ranked if (run.final_accuracy, run.best[0]) == (winner.final_accuracy, winner.best[0])
        ]
        return (
            f"**No winner: {', '.join(tied)} tied** at {winner.final_accuracy:.1%} final and {winner.best[0]:.1%} "
            f"best held-out accuracy; {winner.name} was the fastest of them."
        )
    tied = winner.final_accuracy == runner_up.final_accuracy
    reason = "tied on final accuracy, ahead on best accuracy" if tied else "the highest final held-out accuracy"
    return (
        f"**No winner on one seed**: {winner.name} ended highest ({reason}): {winner.final_accuracy:.1%} final, "
        f"{winner.best[0]:.1%} best, against {runner_up.name}'s {runner_up.final_accuracy:.1%} (all from "
        f"{winner.summary['accuracy_before']:.1%})."
    )


# Student's t quantile t_{0.975, df} for df = 1..30: the half-width factor of a two-sided 95% interval.
T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)
Z_975 = 1.959964  # the normal quantile, t's limit as df grows


def t_quantile_975(df: int) -> float:
    """t_{0.975, df}: the table above for df <= 30; beyond it the Cornish-Fisher expansion around the normal
    quantile z, t ~ z + (z^3 + z) / (4 df) + (5 z^5 + 16 z^3 + 3 z) / (96 df^2), within 0.001 of the exact value."""
    if df < 1:
        raise ValueError(f"df: a t quantile needs at least 1 degree of freedom, got {df}.")
    if df <= len(T_975):
        return T_975[df - 1]
    z = Z_975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass
class PairedDifference:
    """Loss `first` minus loss `second`, paired by seed: the same seed gives both the same base policy, so the
    per-seed difference removes the base policy's share of the seed-to-seed spread.

        d_s  = acc_first(s) - acc_second(s)           final held-out accuracy, over the n seeds both finished
        mean = (1/n) sum_s d_s
        sd   = sqrt( sum_s (d_s - mean)^2 / (n - 1) )
        se   = sd / sqrt(n)
        95% CI = mean +- t_{0.975, n-1} * se

    "significant" when the interval excludes 0, else "within seed noise"; one shared seed gives no interval. The
    interval holds every source of run-to-run variation, held-out evaluation noise included."""

    first: str
    second: str
    seeds: list
    differences: list[float]
    identical: bool = False  # every shared seed's two runs are identical (`identical_runs`)

    @property
    def n(self) -> int:
        return len(self.differences)

    @property
    def mean(self) -> float:
        return _mean(self.differences)

    @property
    def sd(self) -> float:
        return math.sqrt(sum((d - self.mean) ** 2 for d in self.differences) / (self.n - 1))

    @property
    def se(self) -> float:
        return self.sd / math.sqrt(self.n)

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.n < 2:
            return None
        half = t_quantile_975(self.n - 1) * self.se
        return self.mean - half, self.mean + half

    @property
    def wins(self) -> int:
        return sum(d > 0 for d in self.differences)

    @property
    def significant(self) -> bool:
        interval = self.interval
        return interval is not None and (interval[0] > 0 or interval[1] < 0)

    @property
    def verdict(self) -> str:
        if self.n == 0:
            return "no shared seed"
        if self.identical:
            return "identical runs"
        if self.n == 1:
            return "one seed: no interval"
        return "significant" if self.significant else "within seed noise"

    def interval_text(self) -> str:
        """The 95% interval in points, e.g. "[-4.1, +4.7]"."""
        low, high = self.interval
        return f"[{100 * low:+.1f}, {100 * high:+.1f}]"


def paired_difference(groups: dict[str, list[Run]], first: str, second: str) -> PairedDifference:
    """`first` minus `second` over the seeds both finished (see PairedDifference)."""
    by_seed = {name: {run.summary.get("seed"): run for run in groups[name]} for name in (first, second)}
    seeds = sorted(set(by_seed[first]) & set(by_seed[second]), key=str)
    pairs = [(by_seed[first][seed], by_seed[second][seed]) for seed in seeds]
    return PairedDifference(
        first, second, seeds, [a.final_accuracy - b.final_accuracy for a, b in pairs],
        identical=bool(pairs) and all(identical_runs(a, b) for a, b in pairs),
    )


def _rank_losses(groups: dict[str, list[Run]]) -> tuple[list[str], dict[str, float]]:
    means = {name: _mean([run.final_accuracy for run in runs]) for name, runs in groups.items()}
    return sorted(means, key=lambda name: -means[name]), means


def paired_differences(groups: dict[str, list[Run]]) -> list[PairedDifference]:
    """The loss with the highest mean final accuracy against every other loss, in rank order."""
    ranked, _ = _rank_losses(groups)
    return [paired_difference(groups, ranked[0], other) for other in ranked[1:]]


def paired_table(pairs: list[PairedDifference]) -> str:
    header = ["pair", "mean difference (points)", "95% CI (points)", "first ahead on", "verdict"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for pair in pairs:
        cells = [
            f"{pair.first} − {pair.second}",
            f"{100 * pair.mean:+.1f}" if pair.n else "—",
            pair.interval_text() if pair.n > 1 else "—",
            f"{pair.wins} of {pair.n} seeds",
            pair.verdict,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


PAIRED_METHOD = (
    "Paired by seed: for each seed both losses finished, d = the first loss's final held-out accuracy minus the "
    "other's (the same seed gives both the same base policy); 95% CI = mean d ± t(0.975, n−1) · sd(d) / √n over "
    "the n shared seeds. \"significant\": the interval excludes 0; \"within seed noise\": it does not, and these "
    "seeds cannot tell the two losses apart."
)

MORE_SEEDS = "rerun with --seeds 0,1,2 (or more seeds) for a paired interval"


def eval_noise_sentence(first: Run, second: Run) -> str:
    """Does one seed's gap exceed the held-out evaluation noise? Each accuracy p is a share of N held-out prompts
    (`heldout_size` in the summary), with binomial standard error sqrt(p (1 - p) / N); the gap's 95% noise band is
    1.96 * sqrt(p1 (1 - p1) / N1 + p2 (1 - p2) / N2). That treats the two accuracies as independent; they are
    measured on the same prompts, which makes the band somewhat wide (a conservative check). Empty when a summary
    does not record its held-out size or the gap is zero."""
    sizes = [run.summary.get("heldout_size") for run in (first, second)]
    gap = first.final_accuracy - second.final_accuracy
    if not all(sizes) or gap == 0:
        return ""
    band = Z_975 * math.sqrt(sum(run.final_accuracy * (1 - run.final_accuracy) / size
                                 for run, size in zip((first, second), sizes)))
    prompts = f"{sizes[0]} held-out prompts" + (" each" if sizes[0] == sizes[1] else f" and {sizes[1]}")
    if abs(gap) > band:
        return (
            f"On this seed the {100 * abs(gap):.1f}-point gap exceeds the held-out evaluation noise (95% band "
            f"±{100 * band:.1f} points, {prompts}): a real difference on this base policy, not evidence that it "
            "holds on others."
        )
    return (
        f"Even on this seed the {100 * abs(gap):.1f}-point gap is within the held-out evaluation noise (95% band "
        f"±{100 * band:.1f} points, {prompts})."
    )


def single_seed_sentence(runs: list[Run]) -> str:
    """For a comparison of runs on one seed: one seed cannot separate the losses, plus the evaluation-noise check on
    the top two runs."""
    first, second = _rank_runs(runs)[:2]
    sentence = (
        "One seed cannot separate losses whose gap is below the seed-to-seed spread (each seed gives another base "
        f"policy and another ordering); {MORE_SEEDS}."
    )
    noise = eval_noise_sentence(first, second)
    return f"{sentence} {noise}" if noise else sentence


def seed_winner_sentence(groups: dict[str, list[Run]]) -> str:
    """The verdict over seeds: whether the loss with the highest mean final accuracy can be told apart from the
    runner-up (PairedDifference), then how it stands against the other losses."""
    ranked, means = _rank_losses(groups)
    winner, runner_up = ranked[0], ranked[1]
    pair = paired_difference(groups, winner, runner_up)
    if pair.identical:
        by_seed = {name: {run.summary.get("seed"): run for run in groups[name]} for name in (winner, runner_up)}
        return identical_sentence(winner, runner_up, [(by_seed[winner][s], by_seed[runner_up][s]) for s in pair.seeds])
    if means[winner] == means[runner_up]:
        tied = [name for name in ranked if means[name] == means[winner]]
        return f"**No winner: {', '.join(tied)} tied** at {means[winner]:.1%} mean final held-out accuracy."
    means_text = f"mean final held-out accuracy {winner} {means[winner]:.1%}, {runner_up} {means[runner_up]:.1%}"
    if pair.n < 2:
        shared = "no seed" if pair.n == 0 else f"only seed {pair.seeds[0]}"
        sentence = (
            f"**{winner} and {runner_up} cannot be told apart** ({means_text}): they share {shared}, and one seed "
            f"cannot separate losses whose gap is below the seed-to-seed spread; {MORE_SEEDS}."
        )
        if pair.n == 1:
            seed = pair.seeds[0]
            on_seed = [next(run for run in groups[name] if run.summary.get("seed") == seed) for name in ranked[:2]]
            noise = eval_noise_sentence(*on_seed)
            sentence += f" {noise}" if noise else ""
        return sentence
    numbers = (
        f"{100 * pair.mean:+.1f} points, 95% CI {pair.interval_text()} over {pair.n} seeds (paired by seed); "
        f"{winner} ahead on {pair.wins} of {pair.n}"
    )
    if not pair.significant:
        sentence = (
            f"**{winner} and {runner_up} cannot be told apart**: {numbers}. The interval includes 0, so {winner}'s "
            f"first place ({means_text}) is within seed noise."
        )
    elif pair.mean > 0:
        sentence = f"**{winner} beats {runner_up}** beyond seed noise: {numbers}. Ranked by {means_text}."
    else:  # possible only when the two finished different seeds: first on all its seeds, behind on the shared ones
        sentence = f"**{runner_up} beats {winner} on their shared seeds**: {numbers}. Ranked by {means_text}."
    others = paired_differences(groups)[1:]
    if others:
        ahead = [other.second for other in others if other.significant and other.mean > 0]
        unclear = [other.second for other in others if other.second not in ahead]
        parts = [f"is ahead beyond seed noise of {', '.join(ahead)}"] if ahead else []
        parts += [f"cannot be told apart from {', '.join(unclear)}"] if unclear else []
        sentence += f" Against the other losses, {winner} " + ", and ".join(parts) + " (see the paired differences)."
    return sentence


def _rank_runs(runs: list[Run]) -> list[Run]:
    return sorted(runs, key=lambda run: (-run.final_accuracy, -run.best[0], run.summary["train_seconds"]))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)
