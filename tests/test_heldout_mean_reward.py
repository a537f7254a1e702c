"""Held-out "accuracy" is the share of greedy completions whose reward is exactly 1; with a graded reward that reads
near 0 without saying why, so the mean reward is measured, recorded and printed beside it, with a note saying what
accuracy counts when the reward is not 0/1."""

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_zoo.cli import main
from trl_zoo.tasks import ADDITION
from trl_zoo.tasks.evaluation import HeldOutAccuracyCallback, HeldOutResult, greedy_evaluation

from . import tiny

TINY_BOOTSTRAP = ["--bootstrap_max_steps", "8", "--bootstrap_hidden_size", "32", "--bootstrap_num_layers", "2"]


def graded(completions, **kwargs):
    return [0.5, 1.0, 0.25, None][: len(completions)]


def half_credit(completions, **kwargs):
    """A graded reward that never pays 1: accuracy is 0 whatever the policy does."""
    return [0.5 * value for value in tiny.digit_reward(completions)]


def test_the_evaluation_returns_accuracy_and_the_mean_of_the_scored_rewards():
    model, tokenizer = tiny.model(), tiny.tokenizer()
    result = greedy_evaluation(model, tokenizer, ["1+1=", "2+2=", "3+3=", "4+4="], max_new_tokens=2, reward=graded)
    # accuracy over every prompt (None is not 1), the mean over the three scored ones
    assert result == HeldOutResult(accuracy=0.25, mean_reward=pytest.approx((0.5 + 1.0 + 0.25) / 3), graded=True)


def test_a_zero_one_reward_is_not_graded():
    model, tokenizer = tiny.model(), tiny.tokenizer()
    result = greedy_evaluation(model, tokenizer, ["1+1=", "2+2="], max_new_tokens=2,
                               reward=lambda completions, **kwargs: [0.0, 1.0])
    assert result == HeldOutResult(accuracy=0.5, mean_reward=0.5, graded=False)


def test_the_callback_keeps_accuracy_pairs_and_each_steps_result():
    results = iter([HeldOutResult(0.1, 0.4, True), HeldOutResult(0.2, 0.5, True)])
    callback = HeldOutAccuracyCallback(lambda model: next(results), every_steps=1)
    callback.measure(None, 0)
    callback.measure(None, 3)
    assert callback.history == [(0, 0.1), (3, 0.2)]
    assert callback.results[3] == HeldOutResult(0.2, 0.5, True)


def test_the_cli_records_and_prints_the_mean_reward(tmp_path, tmp_path_factory, monkeypatch, capsys):
    monkeypatch.setenv("TRL_ZOO_CACHE", str(tmp_path_factory.getbasetemp() / "trl_zoo_cache"))
    out = tmp_path / "run"
    argv = ["train", *TINY_BOOTSTRAP, "--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations",
            "4", "--eval_every_steps", "1", "--logging_steps", "1",
            "--reward_funcs", "tests.test_heldout_mean_reward.half_credit",
            "--write_report", "false", "--output_dir", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [record for record in evals if record["kind"] == "eval"]
    assert [record["step"] for record in evals] == [0, 1, 2]
    assert summary["mean_reward_before"] == evals[0]["heldout_mean_reward"]
    assert summary["mean_reward_after"] == evals[-1]["heldout_mean_reward"]

    # the recorded mean is the base policy's mean digit reward over the held-out prompts
    tokenizer = AutoTokenizer.from_pretrained(summary["model"])
    base = AutoModelForCausalLM.from_pretrained(summary["model"])
    heldout = ADDITION.heldout_dataset()
    expected = greedy_evaluation(base, tokenizer, heldout["prompt"], ADDITION.max_completion_length,
                                 reward=half_credit, reward_kwargs={"answer": heldout["answer"]}, batch_size=128)
    assert summary["mean_reward_before"] == expected.mean_reward and 0 < expected.mean_reward <= 0.5
    assert summary["accuracy_before"] == summary["accuracy_after"] == 0.0
    assert (
        f"Held-out greedy accuracy before RL: {summary['accuracy_before']:.1%}, mean reward "
        f"{summary['mean_reward_before']:.3f} (1000 prompts; the reward is graded: accuracy counts completions "
        f"with reward exactly 1)."
    ) in printed
    assert f"mean reward {summary['mean_reward_after']:.3f}" in printed.split("after RL")[1]


def test_results_md_shows_the_final_mean_reward_beside_accuracy(tmp_path):
    from trl_zoo.cli.report.report import write_report
    from trl_zoo.cli.report.run_log import Run

    def run(name, mean):
        summary = {"accuracy_before": 0.0, "accuracy_after": 0.0, "train_seconds": 1.0, "seed": 0, "loss_type": name,
                   "task": "addition", "model": "m", "mean_reward_after": mean}
        return Run(name, summary, [{"kind": "eval", "step": 0, "heldout_accuracy": 0.0}])

    text = write_report(tmp_path, [run("grpo", 0.4123), run("dapo", None)]).read_text()
    rows = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| ")}
    assert "| final held-out mean reward |" in rows["run"]
    assert "| 0.412 |" in rows["grpo"] and "| — |" in rows["dapo"]
    assert "with a graded reward (values other than 0 and ±1) read the mean reward" in text
