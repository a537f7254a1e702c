"""The testbed's own measurements: rollout statistics from the reward calls, and the figure script's summaries."""

import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"testbed_{Path(name).name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def testbed():
    return load("lib/testbed")


@pytest.fixture(scope="module")
def figures():
    return load("testbed_figures")


def test_rollout_stats_split_lengths_by_reward_and_count_informative_groups(testbed):
    def reward(completions, answer, **kwargs):
        return [float(completion == reference) for completion, reference in zip(completions, answer)]

    stats = testbed.RolloutStats(reward, group_size=2)
    # group 1: one right (3 tokens), one wrong (5); group 2: both wrong (7, 9): one informative group of two
    rewards = stats(["85", "75", "1", "2"], [[1] * 3, [1] * 5, [1] * 7, [1] * 9], answer=["85", "85", "3", "3"])
    assert rewards == [1.0, 0.0, 0.0, 0.0]
    stats(["3", "3"], [[1] * 4, [1] * 6], answer=["3", "3"])  # a second round before the step is logged
    taken = stats.take()
    assert taken["length_correct"] == pytest.approx((3 + 4 + 6) / 3)
    assert taken["length_incorrect"] == pytest.approx((5 + 7 + 9) / 3)
    assert taken["informative_share"] == pytest.approx(1 / 3)
    assert taken["rollout_accuracy"] == pytest.approx(3 / 6)
    assert stats.generated == 6 and stats.take() == {}


def test_run_names_encode_sampler_and_iterations(testbed):
    args = testbed.parse_args(["--preset", "dapo", "--seed", "2", "--out", "x", "--sampler", "resample"])
    assert testbed.run_name(args) == "dapo-resample-seed2"
    args = testbed.parse_args(["--preset", "gspo", "--out", "x", "--num_iterations", "2"])
    assert testbed.run_name(args) == "gspo-mu2-seed0"


def test_drawdown_window_mean_and_paired_claim(figures):
    records = [{"step": step, "reward": value} for step, value in enumerate([0.2, 0.5, 0.3, 0.6, 0.1], start=1)]
    assert figures.largest_drawdown(records) == pytest.approx(0.5)  # from 0.6 down to 0.1
    assert figures.window_mean(records, "reward") == pytest.approx((0.3 + 0.6 + 0.1) / 3)  # steps ≥ 2.5
    runs = {
        "a": {seed: [{"step": 1, "m": 1.0 + seed}] for seed in range(3)},
        "b": {seed: [{"step": 1, "m": 0.5 + 2 * seed}] for seed in range(3)},
        "c": {seed: [{"step": 1, "m": 2.0 + seed}] for seed in range(3)},
    }
    final = lambda r: figures.final_value(r, "m")  # noqa: E731
    line = figures.paired_claim(runs, "a", "b", final, True, "a beats b")
    assert "does NOT show" in line and "1/3 seeds" in line and "mean advantage -0.5" in line  # +0.5, -0.5, -1.5
    assert "SHOWS" in (line := figures.paired_claim(runs, "c", "a", final, True, "c beats a"))
    assert "3/3 seeds" in line and "mean advantage +1 ± 0." in line
    assert "SHOWS" in figures.paired_claim(runs, "a", "c", final, False, "a is lower than c")
    assert "not measured" in figures.paired_claim(runs, "a", "d", final, True, "d missing")


def test_step_table_averages_each_seed_over_the_window_then_across_seeds(figures):
    runs = {"r": {seed: [{"step": step, "x": (1.0 + seed) * step} for step in range(5)] for seed in range(2)}}
    lines = figures.step_table(runs, [("run", "r")], "x", every=2)
    assert lines[2] == "| 0 | 0 ± 0 |"
    assert lines[3] == "| 1-2 | 2.25 ± 1.1 |"  # seed means 1.5 and 3.0
    assert lines[4] == "| 3-4 | 5.25 ± 2.5 |" and len(lines) == 5  # seed means 3.5 and 7.0
