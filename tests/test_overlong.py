"""Soft overlong punishment (DAPO): the piecewise formula at its boundaries and inside the ramp, its wiring as
a reward function (logged on its own, added to the task reward), and the DAPO recipe's scaled lengths."""

from pathlib import Path

import pytest
import torch
import yaml

import trl_zoo
from tests.tiny import TEST_OUTPUT_DIR, make_trainer
from tests.trl_internals import generate_and_score, metric_values
from trl_zoo.reward_shaping import SoftOverlongPunishment, soft_overlong_punishment

L_MAX, L_CACHE = 20, 5  # ramp over lengths 16..20


@pytest.mark.parametrize(
    "length, expected",
    [
        (0, 0.0),
        (14, 0.0),
        (15, 0.0),  # |y| = L_max − L_cache: last length without penalty
        (16, -0.2),  # ((L_max − L_cache) − |y|) / L_cache = (15 − 16) / 5
        (18, -0.6),
        (19, -0.8),
        (20, -1.0),  # |y| = L_max: the ramp ends at −1
        (21, -1.0),  # beyond L_max
        (500, -1.0),
    ],
)
def test_piecewise_formula(length, expected):
    assert soft_overlong_punishment(length, L_MAX, L_CACHE) == pytest.approx(expected, abs=1e-12)
    assert soft_overlong_punishment(length, L_MAX, L_CACHE, factor=0.5) == pytest.approx(0.5 * expected, abs=1e-12)


def test_ramp_is_linear_and_continuous():
    ramp = [soft_overlong_punishment(length, 1280, 256) for length in range(1024, 1281)]
    steps = torch.tensor(ramp).diff()
    assert ramp[0] == 0.0 and ramp[-1] == -1.0
    assert torch.allclose(steps, torch.full_like(steps, -1 / 256), atol=1e-12)


def test_reward_function_scores_token_lengths():
    punishment = SoftOverlongPunishment(max_length=L_MAX, buffer_length=L_CACHE, factor=2.0)
    ids = [[7] * 15, [7] * 17, [7] * 25]
    assert punishment(completions=["", "", ""], completion_ids=ids) == pytest.approx([0.0, -0.8, -2.0])
    assert punishment.__name__ == "soft_overlong_punishment"


@pytest.mark.parametrize("buffer_length", [0, -1, 21])
def test_buffer_outside_the_max_length_is_rejected(buffer_length):
    with pytest.raises(ValueError, match=r"^overlong_buffer_length: L_cache=.* must be in \(0, 20\]"):
        soft_overlong_punishment(3, L_MAX, buffer_length)


def test_config_rejects_a_buffer_longer_than_the_completions():
    with pytest.raises(ValueError, match="overlong_buffer_length"):
        trl_zoo.GRPOConfig(output_dir=TEST_OUTPUT_DIR, max_completion_length=8, overlong_buffer_length=9,
                           use_cpu=True, report_to="none")


def test_trainer_adds_the_punishment_as_a_logged_reward():
    user_weights = [2.0]
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, overlong_buffer_length=4, reward_weights=user_weights,
        max_completion_length=6,
    )
    assert trainer.reward_func_names == ["digit_reward", "soft_overlong_punishment"]
    assert trainer.reward_weights.tolist() == [2.0, 1.0]
    assert user_weights == [2.0]  # the caller's list is left alone

    torch.manual_seed(0)
    trainer.model.train()
    batch = generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))
    lengths = batch["completion_mask"].sum(1).tolist()  # tokens incl. <eos>; no truncation masking here
    expected = [soft_overlong_punishment(length, 6, 4) for length in lengths]
    assert any(value < 0 for value in expected)
    logged = metric_values(trainer)["rewards/soft_overlong_punishment/mean"][-1]
    assert logged == pytest.approx(sum(expected) / len(expected), abs=1e-6)


def test_dapo_recipe_scales_the_paper_lengths():
    recipe = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "dapo.yaml").read_text())
    config = trl_zoo.GRPOConfig(output_dir=TEST_OUTPUT_DIR, use_cpu=True, report_to="none", **recipe)
    assert (config.loss_type, config.epsilon, config.epsilon_high, config.beta) == ("dapo", 0.2, 0.28, 0.0)
    assert config.dynamic_sampling == "resample"
    assert not config.mask_truncated_completions  # soft punishment without overlong filtering, as the best runs
    assert config.overlong_buffer_length / config.max_completion_length == 4096 / 20480  # paper: L_cache / L_max
    assert config.overlong_max_length is None  # L_max = max_completion_length
