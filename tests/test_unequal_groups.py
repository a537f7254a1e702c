"""Advantage estimators on groups of unequal size (``AdvantageInputs.group_sizes``): equal sizes give exactly the
advantages of ``group_sizes=None``; one batch of groups of sizes 2, 4 and 8 against closed forms written out in plain
Python; each per-group estimator on that batch equals the estimator on each group alone; bad sizes give one line."""

import math
from types import SimpleNamespace

import pytest
import torch

import trl_zoo
from trl_zoo.advantages import AdvantageInputs

ARGS = SimpleNamespace(
    advantage_std_unbiased=True,
    advantage_epsilon=0.0,
    scale_rewards="group",
    gae_gamma=1.0,
    gae_lambda=1.0,
    gae_lambda_critic=None,
    gae_whiten=False,
    vapo_length_alpha=None,
    passk_k=3,
    a2po_beta1=0.5,
)
GROUPS = [[1.0, 0.0], [0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]]
SIZES = [len(group) for group in GROUPS]
FLAT = [reward for group in GROUPS for reward in group]
LENGTHS = [3, 5, 2, 4, 6, 1, 3, 7, 2, 5, 4, 6, 1, 2]  # l_i ≤ T = 7
NORMS = [0.5, 2.0, 1.0, 3.0, 0.25, 2.0, 1.5, 0.5, 1.0, 4.0, 2.0, 0.75, 3.0, 1.0]
T = 7
# per-group estimators: the estimator on the batch equals the estimator on each group alone
PER_GROUP = ["grpo", "dr_grpo", "rloo", "maxrl", "opo", "optimal_baseline", "reinforce", "gae", "passk", "grpo_passk"]


def extras(rows):
    """The per-completion extras every estimator of the table may need, for the given rows of the batch."""
    lengths = torch.tensor([LENGTHS[i] for i in rows])
    mask = (torch.arange(T).expand(len(rows), T) < lengths.unsqueeze(1)).to(torch.float32)
    values = torch.linspace(-0.5, 0.5, T).expand(len(rows), T) * torch.tensor([float(i + 1) for i in rows])[:, None]
    reference_rewards = torch.tensor([[NORMS[i], LENGTHS[i] / T, 0.0] for i in rows])
    return dict(mask=mask, score_sq_norms=torch.tensor([NORMS[i] for i in rows]), values=values * mask,
                reference_rewards=reference_rewards)


def estimate(name, rewards, num_generations, rows, args=ARGS, group_sizes=None):
    inputs = AdvantageInputs(torch.as_tensor(rewards), num_generations, group_sizes=group_sizes, **extras(rows))
    return trl_zoo.ADVANTAGES.get(name).fn(inputs, args)


def batch(name, args=ARGS, rewards=FLAT):
    return estimate(name, rewards, 8, range(len(FLAT)), args, group_sizes=torch.tensor(SIZES))


ALL_ARGS = [
    ARGS,
    SimpleNamespace(**{**vars(ARGS), "advantage_std_unbiased": False, "advantage_epsilon": 1e-4}),
    SimpleNamespace(**{**vars(ARGS), "scale_rewards": "batch"}),
    SimpleNamespace(**{**vars(ARGS), "scale_rewards": "none", "gae_whiten": True, "gae_lambda": 0.9}),
]


# ---------------------------------------------------------------------------------------------------- (a) equal sizes
@pytest.mark.parametrize("name", sorted(trl_zoo.ADVANTAGES.names()))
@pytest.mark.parametrize("num_generations", [1, 2, 4])
def test_equal_group_sizes_give_the_advantages_of_group_sizes_none(name, num_generations):
    generator = torch.Generator().manual_seed(num_generations)
    rewards = torch.rand(8, generator=generator).round(decimals=1)
    rewards[3] = float("nan")  # an unscorable completion stays what it was
    rewards[4:6] = 0.5  # a zero-spread pair
    rows = range(8)
    sizes = torch.full((8 // num_generations,), num_generations)
    for args in ALL_ARGS:
        expected = estimate(name, rewards, num_generations, rows, args)
        got = estimate(name, rewards, num_generations, rows, args, group_sizes=sizes)
        torch.testing.assert_close(got, expected, equal_nan=True, msg=lambda text: f"{name} {args}: {text}")


def test_grid_and_ungroup():
    inputs = AdvantageInputs(torch.tensor(FLAT), 8, group_sizes=torch.tensor(SIZES))
    grid = inputs.grouped
    assert grid.shape == (3, 8)
    assert grid[0, :2].tolist() == GROUPS[0] and grid[0, 2:].isnan().all()
    assert grid[1, :4].tolist() == GROUPS[1] and grid[1, 4:].isnan().all()
    assert grid[2].tolist() == GROUPS[2]
    assert inputs.ungroup(grid).tolist() == FLAT
    tokens = torch.arange(14 * 3).view(14, 3)  # integers: grouping and ungrouping only move values
    assert inputs.ungroup(inputs.group(tokens, fill=-1)).tolist() == tokens.tolist()  # (N, T) rows go through too
    assert inputs.row_group_sizes.tolist() == [2] * 2 + [4] * 4 + [8] * 8
    equal = AdvantageInputs(torch.tensor(FLAT[2:10]), 4)
    assert equal.ungroup(equal.grouped).tolist() == FLAT[2:10]


# ---------------------------------------------------------------------------------------------------- (b) closed forms
def mean(values):
    return sum(values) / len(values)


def std(values, unbiased=True):
    centre = mean(values)
    return math.sqrt(sum((v - centre) ** 2 for v in values) / (len(values) - (1 if unbiased else 0)))


def per_group(formula):
    """formula(group's rewards, the group's row indices in the batch) -> the group's advantages, concatenated."""
    out, start = [], 0
    for group in GROUPS:
        out += formula(group, list(range(start, start + len(group))))
        start += len(group)
    return out


def whiten(values):
    centre, spread = mean(values), std(values)
    return [(v - centre) / spread for v in values]


def weighted(group, rows, weights):
    baseline = sum(weights[i] * r for i, r in zip(rows, group)) / sum(weights[i] for i in rows)
    return [r - baseline for r in group]


CLOSED_FORMS = {
    "grpo": per_group(lambda g, _: [(r - mean(g)) / std(g) for r in g]),
    "dr_grpo": per_group(lambda g, _: [r - mean(g) for r in g]),
    "rloo": per_group(lambda g, _: [r - (sum(g) - r) / (len(g) - 1) for r in g]),
    "maxrl": per_group(lambda g, _: [(r - mean(g)) / mean(g) for r in g]),
    "opo": per_group(lambda g, rows: weighted(g, rows, LENGTHS)),
    "optimal_baseline": per_group(lambda g, rows: weighted(g, rows, NORMS)),
    "reinforce": FLAT,
    "reinforce_batch_baseline": [r - mean(FLAT) for r in FLAT],
}


def test_closed_forms_by_hand():
    """The closed forms themselves, for the three groups: [1, 0], [0, 0, 1, 0], [1, 1, 0, 0, 1, 0, 0, 0]."""
    third = (1 - 3 / 8) / math.sqrt(15 / 56)  # group 3: mean 3/8, unbiased variance (3·25/64 + 5·9/64)/7 = 15/56
    assert CLOSED_FORMS["grpo"][:2] == pytest.approx([math.sqrt(0.5), -math.sqrt(0.5)])
    assert CLOSED_FORMS["grpo"][2:6] == pytest.approx([-0.5, -0.5, 1.5, -0.5])  # the formula sheet's worked example
    assert CLOSED_FORMS["grpo"][6] == pytest.approx(third)
    assert CLOSED_FORMS["rloo"][:6] == pytest.approx([1, -1, -1 / 3, -1 / 3, 1, -1 / 3])
    assert CLOSED_FORMS["rloo"][6:8] == pytest.approx([1 - 2 / 7, 1 - 2 / 7])
    assert CLOSED_FORMS["maxrl"][2:6] == pytest.approx([-1, -1, 3, -1])


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_closed_forms_on_groups_of_2_4_8(name):
    torch.testing.assert_close(batch(name), torch.tensor(CLOSED_FORMS[name]))


def test_grpo_population_std_and_epsilon_per_group():
    args = SimpleNamespace(**{**vars(ARGS), "advantage_std_unbiased": False, "advantage_epsilon": 0.1})
    expected = per_group(lambda g, _: [(r - mean(g)) / (std(g, unbiased=False) + 0.1) for r in g])
    torch.testing.assert_close(batch("grpo", args), torch.tensor(expected))


def test_grpo_batch_scale_divides_by_the_batch_std():
    args = SimpleNamespace(**{**vars(ARGS), "scale_rewards": "batch"})
    expected = per_group(lambda g, _: [(r - mean(g)) / std(FLAT) for r in g])
    torch.testing.assert_close(batch("grpo", args), torch.tensor(expected))


def test_reinforce_pp_baseline_whitens_the_per_group_centred_rewards_over_the_batch():
    # the mask-free form: whitened over the completions
    inputs = AdvantageInputs(torch.tensor(FLAT), 8, group_sizes=torch.tensor(SIZES))
    got = trl_zoo.ADVANTAGES.get("reinforce_pp_baseline").fn(inputs, ARGS)
    torch.testing.assert_close(got, torch.tensor(whiten(CLOSED_FORMS["dr_grpo"])))
    got = trl_zoo.ADVANTAGES.get("reinforce_pp").fn(inputs, ARGS)
    torch.testing.assert_close(got, torch.tensor(whiten(FLAT)))


def test_gae_with_zero_values_and_unit_gamma_lambda_is_the_reward_on_every_token():
    inputs = AdvantageInputs(
        torch.tensor(FLAT), 8, group_sizes=torch.tensor(SIZES), mask=extras(range(14))["mask"],
        values=torch.zeros(14, T),
    )
    got = trl_zoo.ADVANTAGES.get("gae").fn(inputs, ARGS)
    expected = [[FLAT[i] if t < LENGTHS[i] else 0.0 for t in range(T)] for i in range(14)]
    torch.testing.assert_close(got, torch.tensor(expected))


def test_a_group_of_one():
    """Sizes [1, 3]: a singleton's GRPO std is 0 (TRL's num_generations=1): Â = 0 even with ε = 0; dr_grpo,
    maxrl, opo, optimal_baseline give 0; RLOO has no other completion: NaN (the trainer's 0)."""
    rewards, sizes = [1.0, 0.0, 1.0, 1.0], torch.tensor([1, 3])
    rest = [0.0 - 2 / 3, 1 / 3, 1 / 3]
    for name in ["grpo", "dr_grpo", "maxrl", "opo", "optimal_baseline"]:
        got = estimate(name, rewards, 3, range(4), group_sizes=sizes)
        assert got[0].item() == 0.0, name
        assert not got.isnan().any(), name
    torch.testing.assert_close(
        estimate("dr_grpo", rewards, 3, range(4), group_sizes=sizes), torch.tensor([0.0, *rest])
    )
    got = estimate("rloo", rewards, 3, range(4), group_sizes=sizes)
    assert got[0].isnan()
    torch.testing.assert_close(got[1:], torch.tensor([-1.0, 0.5, 0.5]))
    args = SimpleNamespace(**{**vars(ARGS), "advantage_epsilon": 1e-4})
    assert estimate("grpo", [float("nan"), 0.0, 1.0], 2, range(3), args, torch.tensor([1, 2]))[0].isnan()


# ---------------------------------------------------------------------------------------------------- (c) per group
@pytest.mark.parametrize("name", PER_GROUP)
@pytest.mark.parametrize("with_nan", [False, True])
def test_batch_equals_each_group_alone(name, with_nan):
    rewards = list(FLAT)
    if with_nan:
        rewards[3] = float("nan")  # an unscorable completion inside the group of 4 is not a missing slot
    for args in [ARGS, ALL_ARGS[1], ALL_ARGS[3]]:
        if name == "gae" and args.gae_whiten:
            continue  # gae_whiten whitens over the batch: not per group
        got = batch(name, args, rewards)
        alone, start = [], 0
        for size in SIZES:
            rows = range(start, start + size)
            alone.append(estimate(name, rewards[start : start + size], size, rows, args))
            start += size
        torch.testing.assert_close(got, torch.cat(alone), equal_nan=True)
        assert got.reshape(len(got), -1).isnan().any(1).sum() == (1 if with_nan else 0), (name, args)


# ---------------------------------------------------------------------------------------------------- (d) bad sizes
@pytest.mark.parametrize(
    "sizes",
    [
        torch.tensor([2, 4, 7]),  # sums to 13
        torch.tensor([2, 4, 9]),  # sums to 15
        torch.tensor([0, 6, 8]),  # an empty group
        torch.tensor([-2, 8, 8]),
        torch.tensor([2.0, 4.0, 8.0]),  # not integers
        torch.tensor([[2, 4, 8]]),  # not (P,)
        torch.tensor([], dtype=torch.long),
        [2, 4, 8],  # not a tensor
    ],
)
def test_bad_group_sizes_give_one_line_naming_the_field(sizes):
    with pytest.raises(ValueError) as error:
        AdvantageInputs(torch.tensor(FLAT), 8, group_sizes=sizes)
    message = str(error.value)
    assert message.startswith("group_sizes:") and "14 rewards" in message
    assert "\n" not in message


def test_unequal_sizes_need_not_divide_num_generations():
    inputs = AdvantageInputs(torch.tensor(FLAT[:6]), 4, group_sizes=torch.tensor([2, 4]))
    assert inputs.ungroup(inputs.grouped).tolist() == FLAT[:6]
