"""DLER's truncation penalty (arXiv:2510.15110): the rule at its boundaries (the documented tie: the end-of-sequence
token as the L-th token), the task columns scaled and the shaping columns not, a negative penalised reward warned
once, its settings refused in one line, and its wiring in the trainer's reward call."""

import math
import warnings

import pytest
import torch

import trl_zoo
from tests.tiny import config_kwargs, make_trainer
from tests.trl_internals import generate_and_score, metric_values
from trl_zoo.reward_shaping import (
    TRUNCATION_WARNING,
    SoftOverlongPunishment,
    soft_overlong_punishment,
    truncation_penalized,
)
from trl_zoo.reward_shaping import truncation_penalty as scale

L = 20
EOS = 0


@pytest.mark.parametrize(
    "length, ended, expected",
    [
        (12, True, 1.0),
        (20, True, 1.0),  # the tie: its end-of-sequence token is its L-th token, so it ended within L
        (23, True, 0.0),  # ended, but past L
        (20, False, 0.0),  # cut at L
        (12, False, 0.0),  # cut before L (max_completion_length below L)
    ],
)
def test_the_rule_at_its_boundaries(length, ended, expected):
    assert scale(length, ended, L) == expected
    assert scale(length, ended, L, factor=0.1) == (1.0 if expected else 0.1)  # the authors' released recipe


class Args:
    truncation_penalty = 0.0
    truncation_length = 4
    max_completion_length = 6


def one(completions, **kwargs):
    return [1.0] * len(completions)


def test_task_columns_are_scaled_and_shaping_columns_kept():
    ids = [[5, 6, EOS], [5, 6, 7, 8, 9, 5], [5, 6, 7, 8, 9, EOS], [5, 6, 7, EOS]]  # 3 ended; 6 cut; 6 ended; 4 ended
    shaping = SoftOverlongPunishment(max_length=6, buffer_length=2)
    rewards = torch.tensor([[1.0, 0.0], [0.7, -1.0], [float("nan"), -1.0], [0.4, -0.5]])
    got = truncation_penalized(rewards, ids, (EOS,), [one, shaping], Args, gather=lambda tensor: tensor)
    expected = torch.tensor([[1.0, 0.0], [0.0, -1.0], [float("nan"), -1.0], [0.4, -0.5]])
    torch.testing.assert_close(got, expected, equal_nan=True)  # None stays unscorable; row 4 ends at its 4th token

    halved = type("Halved", (Args,), {"truncation_penalty": 0.5, "truncation_length": None})
    got = truncation_penalized(rewards, ids, (EOS,), [one, shaping], halved, gather=lambda tensor: tensor)
    torch.testing.assert_close(got[:, 0], torch.tensor([1.0, 0.35, float("nan"), 0.4]), equal_nan=True)  # L = 6

    off = type("Off", (Args,), {"truncation_penalty": None, "truncation_length": None})
    assert truncation_penalized(rewards, ids, (EOS,), [one, shaping], off, gather=None) is rewards


def test_the_rows_of_every_process_are_scaled():
    """The rewards hold every process's rows; the factors of the other process's rows come through `gather`."""
    others = torch.tensor([0.0, 1.0])
    rewards = torch.tensor([[1.0], [0.5], [0.8], [0.6]])
    got = truncation_penalized(rewards, [[5, EOS], [5] * 9], (EOS,), [one], Args,
                               gather=lambda mine: torch.cat([mine, others]))
    torch.testing.assert_close(got, torch.tensor([[1.0], [0.0], [0.0], [0.6]]))


def test_a_negative_task_reward_of_a_penalised_completion_warns_once():
    """c·R > R for R < 0: with c = 0 a cut completion (0) would score above an ended one of reward −1."""
    ids = [[5, 6, EOS], [5, 6, 7, 8, 9, 5]]  # ended; cut
    shaping = SoftOverlongPunishment(max_length=6, buffer_length=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own: once per place and text
        for _ in range(2):
            got = truncation_penalized(torch.tensor([[-1.0, 0.0], [-1.0, -1.0]]), ids, (EOS,), [one, shaping], Args,
                                       gather=lambda tensor: tensor)
    torch.testing.assert_close(got, torch.tensor([[-1.0, 0.0], [0.0, -1.0]]))  # the cut one now scores higher
    assert [str(w.message) for w in caught] == [TRUNCATION_WARNING]
    assert TRUNCATION_WARNING.startswith("truncation_penalty: a completion it penalises has a task reward below 0")
    assert "shift the task rewards to be ≥ 0" in TRUNCATION_WARNING and "overlong_buffer_length" in TRUNCATION_WARNING
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # a negative reward of an ended completion, or a shaping term below 0 of a cut one: nothing penalised < 0
        truncation_penalized(torch.tensor([[-1.0, 0.0], [0.5, -1.0]]), ids, (EOS,), [one, shaping], Args,
                             gather=lambda tensor: tensor)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(truncation_penalty=-0.1), r"^truncation_penalty: must be in \[0, 1\], .*got -0.1\.$"),
        (dict(truncation_penalty=1.5), r"^truncation_penalty: must be in \[0, 1\], .*got 1.5\.$"),
        (dict(truncation_penalty=math.nan), r"^truncation_penalty: must be a finite number"),
        (dict(truncation_penalty="0.1"), r"^truncation_penalty: expected float, got '0.1' \(str\); write it as "
                                         r"truncation_penalty=0.1\.$"),
        (dict(truncation_penalty=0.0, truncation_length="4"), r"^truncation_length: expected int, got '4' \(str\); "),
        (dict(truncation_length=4), r"^truncation_length: has no effect without truncation_penalty; set "),
        (dict(truncation_penalty=0.0, truncation_length=9), r"^truncation_length: L=9 must be in \[1, 8\] "),
        (dict(truncation_penalty=0.0, truncation_length=0), r"^truncation_length: L=0 must be in \[1, 8\] "),
    ],
)
def test_settings_that_cannot_work_are_refused_in_one_line(settings, message):
    with pytest.raises(ValueError, match=message) as error:
        trl_zoo.GRPOConfig(**config_kwargs(**settings))  # max_completion_length 8
    assert "\n" not in str(error.value)


def test_the_trainer_scales_the_task_reward_and_keeps_the_shaping_term():
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=one, truncation_penalty=0.5, truncation_length=3,
        overlong_buffer_length=2, max_completion_length=6, max_steps=1,
    )
    torch.manual_seed(0)
    trainer.model.train()
    batch = generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))
    lengths = batch["completion_mask"].sum(1).tolist()
    ids = [row[:length].tolist() for row, length in zip(batch["completion_ids"], lengths)]
    ended = [len(row) > 0 and row[-1] in trainer.eos_token_ids for row in ids]
    scales = [scale(length, end, 3, 0.5) for length, end in zip(lengths, ended)]
    assert min(scales) == 0.5  # some completion ran past 3 tokens
    logged = metric_values(trainer)
    assert logged["rewards/one/mean"][-1] == pytest.approx(sum(scales) / len(scales), abs=1e-6)
    punishment = [soft_overlong_punishment(length, 6, 2) for length in lengths]
    assert logged["rewards/soft_overlong_punishment/mean"][-1] == pytest.approx(sum(punishment) / len(punishment))

    trainer.train()
    assert trainer.state.global_step == 1 and math.isfinite(trainer.state.log_history[0]["loss"])
