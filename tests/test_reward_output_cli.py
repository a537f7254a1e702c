"""A reward whose output is not one number per completion stops `trl-zoo train` with one line and exit status 2,
whether the greedy held-out evaluation or a training batch finds it."""

import json
import threading

import pytest

from trl_zoo.cli import main
from trl_zoo.components.rewards import RewardOutputError
from trl_zoo.tasks.evaluation import greedy_accuracy

from . import tiny

HELDOUT = 5  # the evaluation scores 5 completions at a time, a training batch 8


def short_reward(completions, **kwargs):
    """One value too few."""
    return [1.0] * (len(completions) - 1)


def words_in_training(completions, **kwargs):
    """Right for the evaluation's batches, strings for a training batch of 8."""
    return ["good"] * 8 if len(completions) == 8 else [1.0] * len(completions)


def nan_in_training(completions, **kwargs):
    """Right for the evaluation's batches, NaN for a training batch of 8."""
    return [float("nan")] * 8 if len(completions) == 8 else [1.0] * len(completions)


def run(tmp_path, reward: str) -> list[str]:
    data = tmp_path / "sums.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"{a}+1=", "answer": str(a + 1)}) for a in range(10, 40)))
    return ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data), "--num_heldout",
            str(HELDOUT), "--reward_funcs", f"tests.test_reward_output_cli.{reward}", "--max_steps", "2",
            "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "4",
            "--write_report", "false", "--output_dir", str(tmp_path / "run")]


@pytest.mark.parametrize(
    "reward, expected",
    [
        ("short_reward", "reward 'short_reward': returned 4 values for 5 completions; return a list of 5 floats"),
        ("words_in_training", "reward 'words_in_training': completion 0 got 'good' (str), not a number; return a "
                              "list of 8 floats"),
        ("nan_in_training", "nan_rewards: reward functions returned NaN or ±inf: 'nan_in_training' (8 of 8, e.g. "
                            "completion 0 got nan)"),
    ],
    ids=["in_the_evaluation", "in_training", "nan_in_training"],
)
def test_a_malformed_reward_is_one_line_and_exit_status_2(reward, expected, tmp_path, capsys):
    argv = run(tmp_path, reward)
    capsys.readouterr()  # saving the tiny model may print a progress bar
    status = main(argv)
    captured = capsys.readouterr()
    error = captured.err.strip()
    assert status == 2
    assert error.startswith(f"trl-zoo train: error: {expected}") and error.count("\n") == 0, error
    assert "Traceback" not in captured.out + captured.err
    if reward == "short_reward":  # no accuracy is reported from a reward that could not be read
        assert "accuracy before RL" not in captured.out


def test_the_evaluation_checks_the_rewards_output():
    model, tokenizer = tiny.model(), tiny.tokenizer()
    with pytest.raises(RewardOutputError, match=r"^reward 'short_reward': returned 2 values for 3 completions"):
        greedy_accuracy(model, tokenizer, ["1+1=", "2+2=", "3+3="], max_new_tokens=2, reward=short_reward)


SCORER_ANSWERS = threading.Event()  # set when the test ends: the stuck call's thread then returns


def hangs_in_training(completions, **kwargs):
    """Right for the evaluation's batches; a training batch of 8 waits for a scorer that never answers."""
    if len(completions) == 8:
        SCORER_ANSWERS.wait()
    return [1.0] * len(completions)


def test_a_reward_that_never_returns_is_one_line_and_exit_status_2(tmp_path, capsys):
    argv = [*run(tmp_path, "hangs_in_training"), "--reward_timeout", "0.5", "--reward_timeout_warning", "0"]
    capsys.readouterr()
    try:
        status = main(argv)
    finally:
        SCORER_ANSWERS.set()
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err.strip() == (
        "trl-zoo train: error: reward_timeout: reward function 'hangs_in_training' has not returned after 0.5 s on 8 "
        "completions, so the run stops (the call is left running in a background thread); check what it waits for "
        "(a scorer service, a sandbox), or raise reward_timeout."
    )
