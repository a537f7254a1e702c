"""The aggregations' normalisers with groups of unequal size (2, 4 and 8 completions in one batch): the weight each
gives a group, and the on-policy gradient of GRPO's advantages under them, against closed forms
(trl_zoo/aggregation.py, "Groups of unequal size")."""

import math
from types import SimpleNamespace

import pytest
import torch

from trl_zoo.advantages import AdvantageInputs
from trl_zoo.aggregation import AggregationContext
from trl_zoo.registry import ADVANTAGES, AGGREGATIONS

SIZES = [2, 4, 8]
BATCH = sum(SIZES)  # B = 14
LENGTHS = [1 + (3 * i) % 6 for i in range(BATCH)]  # T_i from 1 to 6
WIDTH = 6
MAX_LENGTH = 8  # max_completion_length
GROUP_OF_ROW = [p for p, size in enumerate(SIZES) for _ in range(size)]


def mask() -> torch.Tensor:
    return (torch.arange(WIDTH).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)).float()


def group_rows(p: int) -> list[int]:
    return [i for i in range(BATCH) if GROUP_OF_ROW[i] == p]


def closed_form_weight(name: str, p: int) -> float:
    tokens = sum(LENGTHS[i] for i in group_rows(p))
    return {
        "sequence_mean": SIZES[p] / BATCH,
        "token_mean_local": tokens / sum(LENGTHS),
        "token_mean_global": tokens / sum(LENGTHS),
        "token_sum_over_max_length": tokens / (BATCH * MAX_LENGTH),
        "sequence_sum": tokens / BATCH,
    }[name]


def contexts():
    yield AggregationContext(max_completion_length=MAX_LENGTH)
    # the generation batch's token count, one process, one micro-batch per generation batch
    yield AggregationContext(max_completion_length=MAX_LENGTH, num_items_in_batch=torch.tensor(float(sum(LENGTHS))))


@pytest.mark.parametrize(
    "name", ["sequence_mean", "token_mean_local", "token_mean_global", "token_sum_over_max_length", "sequence_sum"]
)
def test_weight_of_each_group(name):
    for ctx in contexts():
        weights = []
        for p in range(len(SIZES)):
            terms = torch.zeros(BATCH, WIDTH)
            terms[group_rows(p)] = 1.0
            loss, logged = AGGREGATIONS.get(name).fn(terms, mask(), ctx)
            assert loss.item() == pytest.approx(closed_form_weight(name, p), rel=1e-6)
            weights.append(loss.item())
        if name in ("sequence_mean", "token_mean_local", "token_mean_global"):
            assert sum(weights) == pytest.approx(1.0, rel=1e-6)  # a weighted mean over the batch
    # sequence_mean weighs groups by their size, 2 : 4 : 8, whatever their lengths
    if name == "sequence_mean":
        assert [closed_form_weight(name, p) for p in range(3)] == [2 / 14, 4 / 14, 8 / 14]


def grpo_of_one_right_answer() -> torch.Tensor:
    """GRPO (unbiased std, ε = 0) of [1, 0], [0, 0, 1, 0], [0, 0, 0, 0, 1, 0, 0, 0] in one batch."""
    rewards = torch.tensor([1.0, 0.0] + [0.0, 0.0, 1.0, 0.0] + [0.0] * 4 + [1.0] + [0.0] * 3)
    inputs = AdvantageInputs(rewards=rewards, num_generations=8, group_sizes=torch.tensor(SIZES))
    args = SimpleNamespace(advantage_std_unbiased=True, advantage_epsilon=0.0, scale_rewards="group")
    return ADVANTAGES.get("grpo").fn(inputs, args)


def test_grpo_of_one_right_answer_closed_form():
    advantages = grpo_of_one_right_answer()
    # one right among n: (n − 1)/√n for it, −1/√n for the others (std 1/√n)
    expected = [1 / math.sqrt(2), -1 / math.sqrt(2)] + [-0.5, -0.5, 1.5, -0.5]
    expected += [-1 / math.sqrt(8)] * 4 + [7 / math.sqrt(8)] + [-1 / math.sqrt(8)] * 3
    assert advantages.tolist() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("name, row_weight", [
    ("sequence_mean", lambda i: 1 / (BATCH * LENGTHS[i])),
    ("token_mean_global", lambda i: 1 / sum(LENGTHS)),
    ("token_sum_over_max_length", lambda i: 1 / (BATCH * MAX_LENGTH)),
    ("sequence_sum", lambda i: 1 / BATCH),
])
def test_on_policy_gradient_is_advantage_times_the_row_weight(name, row_weight):
    advantages = grpo_of_one_right_answer()
    logps = torch.zeros(BATCH, WIDTH, requires_grad=True)
    ratio = torch.exp(logps - logps.detach())  # on-policy: 1, gradient ∇log π
    terms = -ratio * advantages.unsqueeze(1)
    loss, _ = AGGREGATIONS.get(name).fn(terms, mask(), AggregationContext(max_completion_length=MAX_LENGTH))
    loss.backward()
    expected = torch.stack([-advantages[i] * row_weight(i) * mask()[i] for i in range(BATCH)])
    assert torch.allclose(logps.grad, expected, rtol=1e-6, atol=1e-9)
    if name == "sequence_mean":
        # a group pushes by Σ_{i∈p} |Â_i| / B: √2, 3, 7/√2 over 14 — the group of 8 pushes 3.5× the group of 2
        push = [logps.grad[group_rows(p)].abs().sum().item() for p in range(3)]
        assert push == pytest.approx([math.sqrt(2) / 14, 3 / 14, 7 / math.sqrt(2) / 14], rel=1e-6)
        assert push[2] / push[0] == pytest.approx(3.5, rel=1e-6)
