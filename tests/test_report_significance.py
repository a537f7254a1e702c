"""The comparison's verdict: Student's t quantiles, the paired-by-seed interval, the one-seed and evaluation-noise
sentences, the paired table in results.md, and compare's default seeds on a built-in task."""

import math

import pytest

from trl_zoo.cli.report.compare import compare_seeds
from trl_zoo.cli.report.report import headline, write_report
from trl_zoo.cli.report.run_log import Run
from trl_zoo.cli.report.verdict import paired_difference, t_quantile_975


def run(loss: str, seed: int, final: float, heldout_size: int | None = 500) -> Run:
    summary = {"accuracy_before": 0.45, "accuracy_after": final, "train_seconds": 1.0, "seed": seed,
               "loss_type": loss, "task": "addition", "model": "base"}
    if heldout_size is not None:
        summary["heldout_size"] = heldout_size
    records = [{"kind": "eval", "step": 0, "heldout_accuracy": 0.45},
               {"kind": "eval", "step": 10, "heldout_accuracy": final}]
    return Run(f"{loss} seed {seed}", summary, records)


def groups_of(finals: dict[str, list[float]]) -> dict[str, list[Run]]:
    """loss -> its final accuracies on seeds 0, 1, 2, ... as runs."""
    return {loss: [run(loss, seed, final) for seed, final in enumerate(values)] for loss, values in finals.items()}


A = [0.70, 0.60, 0.80]
CLEAR = [a - d for a, d in zip(A, [0.02, 0.04, 0.03])]  # A minus this: 0.02, 0.04, 0.03
NOISY = [a - d for a, d in zip(A, [0.10, -0.12, 0.03])]  # A minus this: 0.10, -0.12, 0.03


# ----------------------------------------------------------------------------------------------------- t quantile
@pytest.mark.parametrize("df, expected", [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (30, 2.042)])
def test_t_quantile_table_matches_known_values(df, expected):
    assert t_quantile_975(df) == expected


@pytest.mark.parametrize("df, expected", [(40, 2.021), (60, 2.000), (120, 1.980), (10**6, 1.960)])
def test_t_quantile_beyond_the_table_follows_the_expansion(df, expected):
    assert t_quantile_975(df) == pytest.approx(expected, abs=0.0006)


def test_t_quantile_needs_a_degree_of_freedom():
    with pytest.raises(ValueError, match="df: a t quantile needs at least 1 degree of freedom, got 0"):
        t_quantile_975(0)


# ----------------------------------------------------------------------------------------------------- paired interval
def test_paired_interval_on_a_hand_computed_example():
    pair = paired_difference(groups_of({"a": A, "b": CLEAR}), "a", "b")
    assert pair.seeds == [0, 1, 2] and pair.n == 3 and pair.wins == 3
    assert pair.differences == pytest.approx([0.02, 0.04, 0.03], abs=1e-12)
    assert pair.mean == pytest.approx(0.03, abs=1e-12)
    assert pair.sd == pytest.approx(0.01, abs=1e-12)
    assert pair.se == pytest.approx(0.01 / math.sqrt(3), abs=1e-12)  # 0.005774
    low, high = pair.interval
    assert low == pytest.approx(0.03 - 4.303 * 0.01 / math.sqrt(3), abs=1e-12)  # 0.005157
    assert high == pytest.approx(0.03 + 4.303 * 0.01 / math.sqrt(3), abs=1e-12)  # 0.054843
    assert pair.significant and pair.verdict == "significant" and pair.interval_text() == "[+0.5, +5.5]"


def test_a_noisy_pair_is_within_seed_noise():
    pair = paired_difference(groups_of({"a": A, "c": NOISY}), "a", "c")
    assert pair.mean == pytest.approx(0.01 / 3, abs=1e-12)
    deviations = [0.10 - 0.01 / 3, -0.12 - 0.01 / 3, 0.03 - 0.01 / 3]
    assert pair.sd == pytest.approx(math.sqrt(sum(d * d for d in deviations) / 2), abs=1e-12)  # 0.1124
    assert pair.sd == pytest.approx(0.11240, abs=1e-5)
    low, high = pair.interval  # 0.00333 -+ 4.303 * 0.0649
    assert low == pytest.approx(-0.27590, abs=1e-5) and high == pytest.approx(0.28257, abs=1e-5)
    assert pair.wins == 2 and not pair.significant and pair.verdict == "within seed noise"


def test_pairs_use_only_the_seeds_both_finished():
    groups = {"a": [run("a", 0, 0.70), run("a", 1, 0.60), run("a", 2, 0.80)],
              "b": [run("b", 0, 0.65), run("b", 2, 0.70)]}
    pair = paired_difference(groups, "a", "b")
    assert pair.seeds == [0, 2] and pair.differences == pytest.approx([0.05, 0.10], abs=1e-12)
    assert pair.interval == pytest.approx((0.075 - 12.706 * 0.025, 0.075 + 12.706 * 0.025), abs=1e-12)


# ----------------------------------------------------------------------------------------------------- verdict
def test_top_two_that_cannot_be_told_apart_say_so_and_the_report_tabulates_every_pair(tmp_path):
    groups = groups_of({"a": A, "b": CLEAR, "c": NOISY})  # means: a 70.0%, c 69.7%, b 67.0%
    runs = [r for group in groups.values() for r in group]
    verdict = headline(runs, groups)
    assert verdict.startswith(
        "**a and c cannot be told apart**: +0.3 points, 95% CI [-27.6, +28.3] over 3 seeds (paired by seed); a ahead "
        "on 2 of 3. The interval includes 0, so a's first place (mean final held-out accuracy a 70.0%, c 69.7%) is "
        "within seed noise."
    ), verdict
    assert verdict.endswith(
        " Against the other losses, a is ahead beyond seed noise of b (see the paired differences)."
    )

    text = write_report(tmp_path, runs, groups=groups).read_text()
    table = text[text.index("## Paired differences over seeds"):]
    assert "| a − c | +0.3 | [-27.6, +28.3] | 2 of 3 seeds | within seed noise |" in table
    assert "| a − b | +3.0 | [+0.5, +5.5] | 3 of 3 seeds | significant |" in table
    assert table.index("| a − c |") < table.index("| a − b |")  # rank order: c is second, b third
    assert verdict in text


def test_a_clear_first_place_is_called_significant():
    groups = groups_of({"b": CLEAR, "a": A})
    verdict = headline([r for group in groups.values() for r in group], groups)
    assert verdict == (
        "**a beats b** beyond seed noise: +3.0 points, 95% CI [+0.5, +5.5] over 3 seeds (paired by seed); a ahead on "
        "3 of 3. Ranked by mean final held-out accuracy a 70.0%, b 67.0%."
    )


def test_one_shared_seed_gives_no_interval_and_asks_for_seeds():
    groups = {"a": [run("a", 0, 0.70), run("a", 1, 0.66)], "b": [run("b", 0, 0.60)]}
    pair = paired_difference(groups, "a", "b")
    assert pair.n == 1 and pair.interval is None and pair.verdict == "one seed: no interval"
    verdict = headline([r for group in groups.values() for r in group], groups)
    # 10 points on 500 prompts each: 1.96 * sqrt(0.7 * 0.3 / 500 + 0.6 * 0.4 / 500) = 1.96 * 0.03 = 5.9 points
    assert verdict == (
        "**a and b cannot be told apart** (mean final held-out accuracy a 68.0%, b 60.0%): they share only seed 0, "
        "and one seed cannot separate losses whose gap is below the seed-to-seed spread; rerun with --seeds 0,1,2 "
        "(or more seeds) for a paired interval. On this seed the 10.0-point gap exceeds the held-out evaluation noise "
        "(95% band ±5.9 points, 500 held-out prompts each): a real difference on this base policy, not evidence that "
        "it holds on others."
    )


def test_single_seed_compare_names_no_winner_and_adds_the_one_seed_and_eval_noise_sentences():
    runs = [run("grpo", 0, 0.762), run("dr_grpo", 0, 0.768)]
    verdict = headline(runs, {"grpo": runs[:1], "dr_grpo": runs[1:]})
    # 0.6 points against 1.96 * sqrt(0.768 * 0.232 / 500 + 0.762 * 0.238 / 500) = 5.3 points of evaluation noise
    assert "won" not in verdict
    assert verdict == (
        "**No winner on one seed**: dr_grpo seed 0 ended highest (the highest final held-out accuracy): 76.8% final, "
        "76.8% best, against grpo seed 0's 76.2% (all from 45.0%). One seed cannot separate losses whose gap is "
        "below the seed-to-seed spread (each seed gives another base policy and another ordering); rerun with --seeds "
        "0,1,2 (or more seeds) for a paired interval. Even on this seed the 0.6-point gap is within the held-out "
        "evaluation noise (95% band ±5.3 points, 500 held-out prompts each)."
    )


def test_without_a_recorded_heldout_size_there_is_no_eval_noise_check():
    runs = [run("grpo", 0, 0.70, heldout_size=None), run("dapo", 0, 0.60, heldout_size=None)]
    verdict = headline(runs)
    assert "One seed cannot separate losses" in verdict and "evaluation noise" not in verdict


def test_a_single_run_has_no_comparison_sentence():
    assert headline([run("grpo", 0, 0.70)]) == "grpo seed 0 took held-out accuracy from 45.0% to 70.0% in 1 s."


# ----------------------------------------------------------------------------------------------------- default seeds
@pytest.mark.parametrize("train_argv, configs", [(["--task", "addition3", "--max_steps", "50"], None),
                                                 ([], [{"loss_type": "gspo", "epsilon": 3e-4}])])
def test_compare_defaults_to_three_seeds_on_a_built_in_task(train_argv, configs):
    seeds, message = compare_seeds(None, train_argv, configs)
    assert seeds == [0, 1, 2]
    assert message == ("compare: no --seeds on a built-in task, so every loss runs with seeds 0,1,2 and the report "
                       "pairs them by seed; give --seeds 0 for a single seed.")


@pytest.mark.parametrize(
    "seeds, train_argv, configs, expected",
    [
        ("0", [], None, [0]),
        ("4,5", [], None, [4, 5]),
        (None, ["--seed", "3"], None, [None]),  # one seed chosen with the train flag
        (None, ["--dataset_name", "data.jsonl", "--model_name_or_path", "m"], None, [None]),
        (None, ["--dataset_name=data.jsonl"], None, [None]),
        (None, [], [{"loss_type": "grpo"}, {"dataset_name": "openai/gsm8k"}], [None]),  # a config names a dataset
        (None, [], [{"seed": 7}], [None]),
    ],
)
def test_compare_keeps_given_seeds_and_one_run_off_the_built_in_tasks(seeds, train_argv, configs, expected):
    assert compare_seeds(seeds, train_argv, configs) == (expected, "")
