"""What is not a reward fails with one line naming the function and the fix: a non-callable entry of reward_funcs
(at construction), an output that is a scalar, strings or the wrong length, or rewards so large that the group std
overflows float32 (at the first batch). And each function scores the inputs TRL gave, whatever another did to its own
copy."""

import copy

import pytest

import trl_zoo
from tests import tiny
from tests.test_nan_rewards import score_one_batch
from tests.tiny import make_trainer


def returning(value, name="judge"):
    def reward(completions, **kwargs):
        return value(len(completions)) if callable(value) else value

    reward.__name__ = name
    return reward


def test_a_non_callable_reward_fails_at_construction():
    with pytest.raises(TypeError) as error:
        make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=[returning([0.0] * 8), 3.5])
    message = str(error.value)
    assert message.startswith("reward_funcs[1]: got 3.5 of type float, which is not callable; pass a function")
    assert "\n" not in message


@pytest.mark.parametrize(
    "output, expected",
    [
        (0.5, r"^reward 'judge': returned 0\.5 \(float\) for 8 completions; return a list of 8 floats"),
        (lambda n: ["good"] * n, r"^reward 'judge': completion 0 got 'good' \(str\), not a number; return a list"),
        (lambda n: [1.0] * (n + 3), r"^reward 'judge': returned 11 values for 8 completions; return a list of 8"),
        ("1.0", r"^reward 'judge': returned '1\.0' \(str\) for 8 completions"),
    ],
    ids=["scalar", "strings", "wrong_length", "one_string"],
)
def test_a_malformed_output_names_the_function_and_the_fix(output, expected):
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=returning(output))
    with pytest.raises(ValueError, match=expected) as error:
        score_one_batch(trainer)
    assert "\n" not in str(error.value)


def test_rewards_that_overflow_the_group_std_ask_for_rescaling():
    huge = returning(lambda n: [1e30 * (row % 3) for row in range(n)], name="big_judge")
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=huge)
    with pytest.raises(ValueError, match=r"^reward 'big_judge': returned 1e\+30; .*rescale the reward \(e\.g\."):
        score_one_batch(trainer)


def test_numbers_of_any_kind_and_none_pass():
    import numpy as np

    mixed = returning(lambda n: [None, 1, np.float32(0.5), True] + [0.25] * (n - 4))
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=mixed)
    output = score_one_batch(trainer)
    assert output["advantages"].shape == (8,)


def test_each_reward_function_gets_its_own_copy_of_the_inputs():
    """TRL hands every function the same lists: a first function that changes them in place must not change what
    the second scores (nor TRL's logged completions)."""
    seen = {}

    def rewriting(prompts, completions, completion_ids, answer, **kwargs):
        seen["first"] = copy.deepcopy((prompts, completions, completion_ids, answer))
        completions[:] = ["42"] * len(completions)
        prompts[0] += " (rewritten)"
        completion_ids[0].clear()
        answer.reverse()
        return [0.0] * len(completions)

    def scoring(prompts, completions, completion_ids, answer, **kwargs):
        seen["second"] = copy.deepcopy((prompts, completions, completion_ids, answer))
        return [1.0] * len(completions)

    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=[rewriting, scoring],
                           dataset=tiny.prompts_dataset(answers=True))
    score_one_batch(trainer)
    prompts, completions, completion_ids, answer = seen["second"]
    assert seen["second"] == seen["first"]
    assert completions != ["42"] * 8 and all(completion_ids) and not prompts[0].endswith(" (rewritten)")
    sums = [str(sum(map(int, prompt.rstrip("=").split("+")))) for prompt in prompts]
    assert answer == sums  # each row's own answer, not reversed
