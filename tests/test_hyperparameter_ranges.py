"""Every loss hyperparameter at an absurd value is refused or warned about when the config is built: NaN or ±inf in
any of them (NaN passes every range check, so it used to go through silently), a negative VESPO shape, and a clip
range beyond the capped importance ratio, where the clip never acts (accepted, with a warning)."""

import math
import re
import warnings

import pytest

import trl_zoo
from benchmarks.lib.loss_hyperparameters import HYPERPARAMETERS
from tests import tiny
from trl_zoo.config import TRL_LOSS_FIELDS, zoo_field_names


def build(**overrides):
    return trl_zoo.GRPOConfig(**tiny.config_kwargs(**overrides))


def test_every_loss_hyperparameter_is_checked_for_finiteness():
    assert set(HYPERPARAMETERS) <= set(TRL_LOSS_FIELDS) | set(zoo_field_names())


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("name", list(HYPERPARAMETERS))
def test_a_non_finite_hyperparameter_is_refused_naming_it(name, value):
    with pytest.raises(ValueError) as error:
        build(loss_type=HYPERPARAMETERS[name], **{name: value})
    assert str(error.value) == f"{name}: must be a finite number, got {value}."


@pytest.mark.parametrize("name", ["vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"])
def test_a_negative_vespo_shape_is_refused(name):
    with pytest.raises(
        ValueError, match=rf"^{name}: must be ≥ 0 \(φ\(w\) grows without bound otherwise\), got -1.0\.$"
    ):
        build(loss_type="vespo", **{name: -1.0})
    build(loss_type="vespo", **{name: 0.0})


@pytest.mark.parametrize(
    "loss, name, absurd, bound, fine",
    [
        ("gmpo", "gmpo_epsilon", 20.0, "20", 0.4),
        ("dapo", "epsilon_high", 1e9, "4.85e+08", 0.28),
        ("grpo", "delta", 1e9, "4.85e+08", 2.0),
        ("grpo", "dual_clip", 1e9, "4.85e+08", 3.0),
        ("cispo", "epsilon_high", 1e9, "4.85e+08", 5.0),
    ],
)
def test_a_clip_range_beyond_the_capped_ratio_warns_that_the_clip_is_off(loss, name, absurd, bound, fine):
    pattern = rf"^{name}: .* at or beyond {re.escape(bound)}, where the importance ratio is capped .* the clip is off"
    with pytest.warns(UserWarning, match=pattern):
        build(loss_type=loss, **{name: absurd})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        build(loss_type=loss, **{name: fine})
