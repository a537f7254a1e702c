"""The loss step's metric reductions against hand-computed values: masked means (per token and per sequence),
min/max over unmasked tokens, min_seq/max_seq over per-sequence means, and NaN when nothing is unmasked."""

import math

import pytest
import torch
from accelerate import Accelerator

from tests.trl_internals import metric_values, metrics_stand_in
from trl_zoo import GRPOTrainer

MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
VALUES = torch.tensor([[1.0, 3.0, 100.0], [-2.0, -50.0, 7.0], [9.0, 9.0, 9.0]])


def logged(metrics: dict, mask: torch.Tensor = MASK) -> dict:
    recorder = metrics_stand_in(Accelerator(cpu=True))
    GRPOTrainer._log_term_metrics(recorder, metrics, mask, "train")
    return {name: values[0] for name, values in metric_values(recorder).items()}


def test_reductions_match_hand_computed_values():
    per_sequence = torch.tensor([[0.5], [1.5], [4.0]])
    result = logged(
        {
            "token_mean": VALUES,
            "sequence_mean": per_sequence,
            "min": ("min", VALUES),
            "max": ("max", VALUES),
            "min_seq": ("min_seq", VALUES),
            "max_seq": ("max_seq", VALUES),
            "sequence_max": ("max", per_sequence),
        }
    )
    assert result["token_mean"] == pytest.approx((1 + 3 - 2) / 3)
    assert result["sequence_mean"] == pytest.approx((0.5 + 1.5 + 4.0) / 3)  # a (B, 1) value counts once per row
    assert result["min"] == -2.0 and result["max"] == 3.0  # masked tokens (100, −50, 9) are ignored
    assert result["min_seq"] == pytest.approx(-2.0) and result["max_seq"] == pytest.approx(2.0)  # row means 2, −2
    assert result["sequence_max"] == 1.5  # the fully masked third row is ignored


def test_extremes_ignore_infinite_values_and_are_nan_when_nothing_is_unmasked():
    values = torch.tensor([[float("inf"), 2.0, 0.0]])
    result = logged({"max": ("max", values)}, mask=torch.tensor([[1.0, 1.0, 0.0]]))
    assert result["max"] == 2.0
    empty = logged({"min": ("min", VALUES), "max_seq": ("max_seq", VALUES), "mean": VALUES}, mask=torch.zeros(3, 3))
    assert math.isnan(empty["min"]) and math.isnan(empty["max_seq"])
    assert empty["mean"] == 0.0  # the token count is clamped to 1, as in TRL
