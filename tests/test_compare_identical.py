"""Runs that are the same algorithm are called identical, not seed noise: detected from their records, with the
reason where it is known; the plot keeps every line visible; results.md names each seed's base policy."""

import json

from trl_zoo.cli import main
from trl_zoo.cli.report.report import headline, plot_styles, write_report
from trl_zoo.cli.report.run_log import Run
from trl_zoo.cli.report.verdict import identical_runs, paired_difference

TINY_BOOTSTRAP = ["--bootstrap_max_steps", "8", "--bootstrap_hidden_size", "32", "--bootstrap_num_layers", "2"]


def run(loss: str, seed: int, rewards=(0.25, 0.5), accuracies=(0.45, 0.5), updates=1, spread=0.5, **summary) -> Run:
    records = [{"kind": "eval", "step": 10 * i, "heldout_accuracy": a} for i, a in enumerate(accuracies)]
    records += [{"kind": "train", "step": 10 * (i + 1), "reward": r, "loss": -r / 10, "grad_norm": 0.3,
                 "frac_reward_zero_std": spread, "step_time": 0.1 * (seed + i + len(loss))}  # timings always differ
                for i, r in enumerate(rewards)]
    base = {"accuracy_before": accuracies[0], "accuracy_after": accuracies[-1], "train_seconds": 1.0 + len(loss),
            "seed": seed, "loss_type": loss, "task": "addition", "model": f"/cache/addition-h32-seed{seed}-v2",
            "heldout_size": 1000, "updates_per_batch": updates}
    return Run(f"{loss} seed {seed}", {**base, **summary}, records)


def seeds_of(loss, **kwargs):
    return [run(loss, seed, accuracies=(0.45, 0.5 + seed / 100), **kwargs) for seed in (0, 1, 2)]


def test_equal_records_are_identical_runs_whatever_their_timings():
    assert identical_runs(run("grpo", 0), run("gspo", 0))
    assert identical_runs(run("grpo", 0, rewards=(0.25, 0.5)), run("gspo", 0, rewards=(0.25, 0.5 + 1e-13)))
    assert not identical_runs(run("grpo", 0), run("gspo", 0, rewards=(0.25, 0.51)))
    assert not identical_runs(run("grpo", 0), run("gspo", 0, accuracies=(0.45, 0.51)))


def test_identical_losses_over_seeds_are_not_called_seed_noise():
    groups = {"grpo": seeds_of("grpo"), "gspo": seeds_of("gspo")}
    pair = paired_difference(groups, "grpo", "gspo")
    assert pair.identical and pair.verdict == "identical runs"
    text = headline([r for g in groups.values() for r in g], groups)
    assert "seed noise" not in text
    assert text == (
        "**grpo and gspo are identical runs** on seeds 0, 1, 2: every held-out accuracy and every logged loss, "
        "reward and gradient norm are equal, so there is one algorithm here, not two. Why: both took one update per "
        "generation batch (on-policy), where every ratio is 1 and 'grpo' and 'gspo' have the same value and "
        "gradient (REINFORCE's under the same aggregation, sequence_mean)."
    )


def test_a_batch_without_reward_spread_is_the_reason_when_it_is_so():
    groups = {"grpo": seeds_of("grpo", spread=1.0, updates=4), "dapo": seeds_of("dapo", spread=1.0, updates=4)}
    assert headline([r for g in groups.values() for r in g], groups).endswith(
        "Why: every group's rewards were equal at every step, so every advantage was 0 and neither loss moved the "
        "policy."
    )


def test_without_a_known_reason_the_report_says_so():
    groups = {"grpo": seeds_of("grpo", updates=4), "gspo": seeds_of("gspo", updates=4)}
    assert headline([r for g in groups.values() for r in g], groups).endswith(
        "Why is not known from the runs' records: check that the two configurations differ where it matters."
    )


def test_the_plot_keeps_an_identical_run_visible_and_says_it_is_identical():
    runs = [run("grpo", 0), run("gspo", 0), run("dapo", 0, accuracies=(0.45, 0.6))]
    styles = plot_styles(runs)
    assert [style["label"] for style in styles] == ["grpo seed 0", "gspo seed 0 (identical to grpo seed 0)",
                                                    "dapo seed 0"]
    assert styles[0]["linestyle"] != styles[1]["linestyle"] and styles[0]["marker"] != styles[1]["marker"]


def test_results_name_each_seeds_base_policy_not_the_cache_folder(tmp_path):
    runs = [run(loss, seed, base_policy=f"addition's bootstrapped policy (hidden 32, 2 layers, seed {seed})")
            for seed in (0, 1) for loss in ("grpo", "dapo")]
    text = write_report(tmp_path, runs).read_text()
    assert text.startswith(
        "# trl-zoo: addition, seeds 0, 1, one base policy per seed\n\nBase policy: seed 0 addition's bootstrapped "
        "policy (hidden 32, 2 layers, seed 0); seed 1 addition's bootstrapped policy (hidden 32, 2 layers, seed 1).\n"
    )
    assert "/cache/" not in text and "addition-h32" not in text
    one = [run("grpo", 0, base_policy="Qwen/Qwen2.5-0.5B"), run("dapo", 0, base_policy="Qwen/Qwen2.5-0.5B")]
    assert write_report(tmp_path / "one", one).read_text().startswith(
        "# trl-zoo: addition with Qwen/Qwen2.5-0.5B, seed 0\n")


def test_compare_grpo_and_gspo_on_policy_end_to_end(tmp_path, tmp_path_factory, monkeypatch, capsys):
    monkeypatch.setenv("TRL_ZOO_CACHE", str(tmp_path_factory.getbasetemp() / "trl_zoo_cache"))
    report_dir = tmp_path / "cmp"
    argv = ["compare", "--losses", "grpo,gspo", "--report_dir", str(report_dir), "--seeds", "0", *TINY_BOOTSTRAP,
            "--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4",
            "--reward_funcs", "tests.tiny.digit_reward", "--logging_steps", "1", "--eval_every_steps", "1"]
    assert main(argv) == 0
    summaries = [json.loads((report_dir / loss / "seed0" / "summary.json").read_text()) for loss in ("grpo", "gspo")]
    assert summaries[0]["updates_per_batch"] == 1
    assert summaries[0]["base_policy"] == "addition's bootstrapped policy (hidden 32, 2 layers, seed 0)"
    text = (report_dir / "results.md").read_text()
    assert "**grpo and gspo are identical runs** on seed 0" in text and "both took one update per generation" in text
