"""Pass@k advantages: `passk` (arXiv:2508.10751) against the paper's closed form, the authors' code and the subsets
enumerated; `grpo_passk` against verl's function; both with unscorable completions, unequal groups and a training
step through the trainer.

The transcriptions below are of

- RUCAIBox/Passk_Training, code/passk_adv.py (`calc_adv`), commit c3ba575ecb31f47fd9f5c43b18c081d4a295f783, with
  `scipy.special.comb` replaced by `comb` below (scipy's float comb: 0 where k < 0, n < 0 or k > n);
- volcengine/verl, verl/trainer/ppo/core_algos.py (`compute_grpo_passk_outcome_advantage`), commit
  b178a3cd56f58b2d502255daba591e92833930a7, with `config.get("norm_adv_by_std_in_grpo")` a parameter.
"""

import itertools
import math
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from peft import LoraConfig

import trl_zoo
from tests.tiny import config_kwargs, digit_reward, make_trainer
from tests.trl_internals import generate_and_score
from trl_zoo.advantages import AdvantageInputs


def args(k=4, epsilon=0.0, scale="group", unbiased=True):
    return SimpleNamespace(passk_k=k, advantage_epsilon=epsilon, scale_rewards=scale, advantage_std_unbiased=unbiased)


def estimate(name, rewards, group, arguments, group_sizes=None):
    inputs = AdvantageInputs(torch.as_tensor(rewards, dtype=torch.float64), group, group_sizes=group_sizes)
    return trl_zoo.ADVANTAGES.get(name).fn(inputs, arguments)


# ---------------------------------------------------------------------------------------------------- transcriptions
def comb(n, k):
    return float(math.comb(n, k)) if 0 <= k <= n else 0.0


def authors_calc_adv(val, k):
    c = len(np.where(val == 1)[0])
    n = len(val)
    rho = 1 - comb(n - c, k) / comb(n, k)
    sigma = np.sqrt(rho * (1 - rho))
    adv_p = (1 - rho) / (sigma + 1e-6)
    adv_n = (1 - rho - comb(n - c - 1, k - 1) / comb(n - 1, k - 1)) / (sigma + 1e-6)
    new_val = np.where(val == 1, adv_p, val)
    new_val = np.where(new_val == 0, adv_n, new_val)
    return new_val


def verl_grpo_passk(token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True):
    scores = token_level_rewards.sum(dim=-1)
    advantages = torch.zeros_like(scores)
    id2scores = defaultdict(list)
    id2indices = defaultdict(list)
    with torch.no_grad():
        bsz = scores.shape[0]
        for i in range(bsz):
            idx = index[i]
            id2scores[idx].append(scores[i])
            id2indices[idx].append(i)
        for idx in id2scores:
            rewards = torch.stack(id2scores[idx])
            if rewards.numel() < 2:
                raise ValueError(
                    f"Pass@k requires at least 2 samples per group. Got {rewards.numel()} for group {idx}."
                )
            topk, topk_idx = torch.topk(rewards, 2)
            r_max, r_second_max = topk[0], topk[1]
            i_max = id2indices[idx][topk_idx[0].item()]
            advantage = r_max - r_second_max
            if norm_adv_by_std_in_grpo:
                std = torch.std(rewards)
                advantage = advantage / (std + epsilon)
            advantages[i_max] = advantage
    advantages = advantages.unsqueeze(-1) * response_mask
    return advantages, advantages


def enumerated_passk(group, k):
    """Â_i·σ from the definition (every k-subset's best reward, its mean over the subsets holding i, minus the mean
    over all) and σ, the std of the subsets' best rewards."""
    subsets = list(itertools.combinations(range(len(group)), k))
    best = {subset: max(group[i] for i in subset) for subset in subsets}
    mean = sum(best.values()) / len(best)
    std = math.sqrt(sum((b - mean) ** 2 for b in best.values()) / len(best))
    return [
        sum(best[s] for s in subsets if i in s) / math.comb(len(group) - 1, k - 1) - mean if std > 0 else 0.0
        for i in range(len(group))
    ], std


# ---------------------------------------------------------------------------------------------------- passk
def test_the_papers_closed_form_by_hand():
    """n = 8, N_neg = 6, k = 4: R̄ = 1 − C(6,4)/C(8,4) = 11/14, σ = √33/14, Â_pos = 3/√33,
    Â_neg = (3/14 − C(5,3)/C(7,3))/σ = −1/√33."""
    rewards = [0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    got = estimate("passk", rewards, 8, args(k=4))
    positive, negative = 3 / math.sqrt(33), -1 / math.sqrt(33)
    expected = [positive if r == 1 else negative for r in rewards]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))
    assert got.sum().item() == pytest.approx(0.0, abs=1e-12)  # 2·3 − 6·1 = 0: the subsets' mean is the baseline


@pytest.mark.parametrize("seed", range(6))
def test_pass_fail_rewards_match_the_authors_code(seed):
    generator = torch.Generator().manual_seed(seed)
    size = [4, 6, 8, 16, 5, 12][seed]
    groups = (torch.rand(6, size, generator=generator) < torch.rand(6, 1, generator=generator)).double()
    groups[0] = 0.0  # no success: σ = 0
    groups[1] = 1.0  # all succeed
    largest = {}
    for k in (1, 2, size // 2, size):
        got = estimate("passk", groups.reshape(-1), size, args(k=k, epsilon=1e-6)).view(6, size)
        expected = torch.tensor(np.stack([authors_calc_adv(group.numpy(), k) for group in groups]))
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
        largest[k] = got.abs().max().item()
    assert largest[1] > 0.5 and largest[size] == 0.0  # k = n: one subset, no spread


def test_any_rewards_match_the_subsets_enumerated():
    """Graded rewards (the closed form's definition, pass@k as the expected best of k), ties included."""
    generator = torch.Generator().manual_seed(3)
    for size, k in [(5, 2), (6, 3), (7, 4), (8, 7)]:
        group = torch.randn(size, generator=generator, dtype=torch.float64).round(decimals=1)
        group[1] = group[3]  # a tie
        centred, std = enumerated_passk(group.tolist(), k)
        expected = torch.tensor(centred, dtype=torch.float64) / std
        torch.testing.assert_close(estimate("passk", group, size, args(k=k)), expected)


def test_k_one_is_grpo_with_the_population_std():
    rewards = (torch.rand(24, generator=torch.Generator().manual_seed(5)) < 0.4).double()
    population = args(k=1, unbiased=False)
    torch.testing.assert_close(estimate("passk", rewards, 6, population), estimate("grpo", rewards, 6, population))


def test_groups_without_spread_across_subsets_get_exactly_zero():
    """All fail, all pass, graded but equal, and N_neg < k (every 4-subset of 8 holds one of the 5 successes)."""
    rewards = [0.0] * 8 + [1.0] * 8 + [0.3] * 8 + [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    got = estimate("passk", rewards, 8, args(k=4, epsilon=1e-4))
    assert (got == 0).all()
    assert (estimate("passk", rewards[24:], 8, args(k=3)) != 0).any()  # N_neg = k: a subset of failures exists


def test_unscorable_completions_and_unequal_groups():
    """A NaN completion is left out (its Â NaN), groups of 3, 6 and 2 rows are each their own group, a group smaller
    than k takes k = n (one subset: Â = 0), a group of one gets 0."""
    nan = float("nan")
    groups = [[1.0, 0.0, 0.0], [0.0, 1.0, nan, 0.0, 0.0, 1.0], [1.0, 0.0], [1.0]]
    flat = [r for g in groups for r in g]
    got = estimate("passk", flat, 6, args(k=3), group_sizes=torch.tensor([3, 6, 2, 1]))
    first, _ = enumerated_passk(groups[0], 3)  # n = k: one subset, σ = 0
    scored = [0.0, 1.0, 0.0, 0.0, 1.0]
    second, std = enumerated_passk(scored, 3)
    expected = [*first, *[v / std for v in second[:2]], nan, *[v / std for v in second[2:]], 0.0, 0.0, 0.0]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), equal_nan=True)
    assert got[3:9].nan_to_num().abs().max() > 0.3


@pytest.mark.parametrize("k", [4, 8])
def test_k_not_below_num_generations_is_refused_in_one_line(k):
    with pytest.raises(ValueError, match=rf"^passk_k: {k} is not below num_generations=4: .* set passk_k < 4"):
        trl_zoo.GRPOConfig(**config_kwargs(advantage_estimator="passk", passk_k=k))


def test_k_below_one_is_refused_and_the_default_is_the_papers():
    with pytest.raises(ValueError, match=r"^passk_k: must be ≥ 1, got 0"):
        trl_zoo.GRPOConfig(**config_kwargs(advantage_estimator="passk", passk_k=0))
    config = trl_zoo.GRPOConfig(**config_kwargs(advantage_estimator="passk", num_generations=8))
    assert config.passk_k == 4  # the paper's k


# ---------------------------------------------------------------------------------------------------- grpo_passk
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_passk_matches_verl(seed, norm):
    generator = torch.Generator().manual_seed(seed)
    size, groups = [2, 4, 5, 8, 16][seed], 6
    graded = torch.randn(groups * size, generator=generator)
    binary = (torch.rand(groups * size, generator=generator) < 0.5).float()  # ties for the best
    index = np.repeat(np.arange(groups), size)
    ours = args(epsilon=1e-6, scale="group" if norm else "none")
    for rewards in (binary, graded):
        mask = torch.ones(groups * size, 3)
        expected, _ = verl_grpo_passk(rewards.unsqueeze(-1) * torch.tensor([1.0, 0.0, 0.0]), mask, index,
                                      norm_adv_by_std_in_grpo=norm)
        got = trl_zoo.ADVANTAGES.get("grpo_passk").fn(AdvantageInputs(rewards, size), ours)
        torch.testing.assert_close(got, expected[:, 0], rtol=1e-6, atol=1e-6)
    assert (got > 0).sum() == groups  # graded rewards: one best completion a group


def test_grpo_passk_by_hand_with_ties_nan_and_unequal_groups():
    nan = float("nan")
    rewards = [0.2, 0.9, 0.5, 0.9, nan, 0.7, 0.1, 0.4, 1.0, nan, 0.3]
    got = estimate("grpo_passk", rewards, 4, args(scale="none"), group_sizes=torch.tensor([4, 4, 1, 2]))
    expected = [0.0, 0.0, 0.0, 0.0, nan, 0.3, 0.0, 0.0, nan, nan, nan]  # a tie; 0.7 − 0.4; alone; no scored sibling
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), equal_nan=True)


# ---------------------------------------------------------------------------------------------------- trainer
def some_digit(completions, **kwargs):
    """Pass/fail: 1 where the completion holds a digit."""
    return [float(any(c.isdigit() for c in completion)) for completion in completions]


# grpo_passk on pass/fail rewards gives 0 to every group with two successes: a graded reward for it
@pytest.mark.parametrize("name, reward", [("passk", some_digit), ("grpo_passk", digit_reward)])
def test_a_training_step_uses_the_estimator(name, reward):
    seen = []

    def recorded(completions, **kwargs):
        seen.extend(reward(completions))
        return reward(completions)

    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, advantage_estimator=name, passk_k=2, reward_funcs=recorded,
        max_completion_length=6, max_steps=1,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0),
    )
    torch.manual_seed(0)
    trainer.model.train()
    batch = generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))
    rewards = torch.tensor(seen)
    assert len(set(seen)) > 1  # the batch has spread
    expected = trl_zoo.ADVANTAGES.get(name).fn(AdvantageInputs(rewards, 4), trainer.args).nan_to_num()
    torch.testing.assert_close(batch["advantages"], expected, rtol=1e-5, atol=1e-6)

    initial = {key: value.clone() for key, value in trainer.model.named_parameters() if value.requires_grad}
    trainer.train()
    assert trainer.state.global_step == 1 and math.isfinite(trainer.state.log_history[0]["loss"])
    moved = [key for key, value in trainer.model.named_parameters() if key in initial and
             not torch.equal(value, initial[key])]
    assert moved
