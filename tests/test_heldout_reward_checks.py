"""A reward called outside training, by the held-out evaluation or by pass@k, goes through training's checks
(`components/rewards.checked_rewards`) and its watchdog (`components/reward_watchdog.py`): NaN or ±inf is one line
naming the function (or, with nan_rewards='drop', a warning and an unscored completion), an output that is not one
number or None per completion is one line naming the function, a reward still running gets its line, and one still
running at `reward_timeout` stops the evaluation."""

from __future__ import annotations

import math
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from datasets import Dataset

from trl_zoo.cli.train import heldout_accuracy
from trl_zoo.components import reward_watchdog
from trl_zoo.components.rewards import RewardOutputError
from trl_zoo.tasks.evaluation import greedy_evaluation
from trl_zoo.tasks.pass_at_k import sampled_right_counts

from . import tiny

PROMPTS = ["1+1=", "2+2=", "3+3="]


def evaluate(reward, **kwargs):
    return greedy_evaluation(tiny.model(), tiny.tokenizer(), PROMPTS, max_new_tokens=2, reward=reward, **kwargs)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_held_out_reward_is_one_line_naming_the_function(bad):
    def second_is_bad(completions, **kwargs):
        return [1.0, bad, 0.0]

    with pytest.raises(RewardOutputError) as error:
        evaluate(second_is_bad)
    assert str(error.value) == (
        f"nan_rewards: reward functions returned NaN or ±inf: 'second_is_bad' (1 of 3, e.g. completion 1 got {bad}); "
        "return None for a completion a function cannot score, or set nan_rewards='drop' to treat such completions "
        "as unscorable (not right, left out of the mean reward)."
    )
    with pytest.warns(UserWarning, match=r"^nan_rewards='drop': .*'second_is_bad' \(1 of 3"):
        result = evaluate(second_is_bad, nan_rewards="drop")
    assert (result.accuracy, result.mean_reward) == (pytest.approx(1 / 3), 0.5)  # the other two: 1 and 0


def test_a_held_out_reward_still_running_gets_the_watchdogs_line(monkeypatch, capsys):
    said = threading.Event()
    say = reward_watchdog._say

    def saying(*args):
        say(*args)
        said.set()

    monkeypatch.setattr(reward_watchdog, "_say", saying)

    def waits_for_the_line(completions, **kwargs):
        said.wait(timeout=30)
        return [1.0] * len(completions)

    assert evaluate(waits_for_the_line, reward_timeout_warning=0.01).accuracy == 1.0
    assert said.is_set()
    line = "reward_funcs: 'waits_for_the_line' is still running after 0.01 s on 3 completions"
    assert line in capsys.readouterr().err


def test_a_held_out_reward_that_never_returns_stops_at_the_timeout():
    answered = threading.Event()

    def dead_scorer(completions, **kwargs):
        answered.wait()
        return [1.0] * len(completions)

    try:
        with pytest.raises(reward_watchdog.RewardTimeoutError, match=r"^reward_timeout: reward function "
                                                                     r"'dead_scorer' has not returned after 0.2 s "
                                                                     r"on 3 completions, so the run stops"):
            evaluate(dead_scorer, reward_timeout=0.2)
    finally:
        answered.set()


def test_the_cli_evaluation_passes_the_configs_reward_settings(monkeypatch):
    seen = {}
    monkeypatch.setattr(heldout_accuracy, "greedy_evaluation", lambda *args, **kwargs: seen.update(kwargs))
    heldout = Dataset.from_dict({"prompt": PROMPTS, "answer": ["2", "4", "6"]})
    task_args = SimpleNamespace(eval_batch_size=4, eval_every_steps=1)
    training_args = SimpleNamespace(max_completion_length=2, process_index=0, nan_rewards="drop",
                                    reward_timeout_warning=7.0, reward_timeout=30.0)
    callback = heldout_accuracy.heldout_accuracy_callback(
        heldout, None, tiny.digit_reward, SimpleNamespace(kept=[]), task_args, training_args, print
    )
    callback.evaluate(None)
    assert (seen["nan_rewards"], seen["reward_timeout_warning"], seen["reward_timeout"]) == ("drop", 7.0, 30.0)


@pytest.mark.parametrize(
    "output, message",
    [
        (lambda n: [1.0] * (n - 1), "returned 3 values for 4 completions"),
        (lambda n: ["1.0"] * n, "completion 0 got '1.0' (str), not a number"),
        (lambda n: 1.0, "returned 1.0 (float) for 4 completions"),
        (lambda n: np.ones((n, 1)), "returned a numpy.ndarray of shape (4, 1) (float64) for 4 completions"),
        (lambda n: [math.nan] * n, "nan_rewards: reward functions returned NaN or ±inf: 'bad_reward' (4 of 4"),
    ],
)
def test_pass_at_k_checks_the_reward_as_training_does(output, message):
    def bad_reward(completions, **kwargs):
        return output(len(completions))

    with pytest.raises(RewardOutputError) as error:
        sampled_right_counts(tiny.model(), tiny.tokenizer(), PROMPTS[:2], 2, bad_reward, samples=2)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert "'bad_reward'" in str(error.value)
