"""Advantage estimators: closed forms, the seed-004 worked example, the optimal baseline's score norms against full
logits, TRL parity of the "grpo" estimator on a real batch, and short LoRA training runs for every estimator."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import trl
import yaml
from peft import LoraConfig

import trl_zoo
import trl_zoo.components.rewards
from tests.tiny import config_kwargs, make_trainer, prompts_dataset, with_reference_rewards
from tests.trl_internals import completions_log, generate_and_score
from trl_zoo.advantages import AdvantageInputs, nan_std, reward_decoupled_advantages
from trl_zoo.advantages.optimal_baseline import score_sq_norms

ARGS = SimpleNamespace(advantage_std_unbiased=True, advantage_epsilon=0.0, scale_rewards="group")
WORKED = torch.tensor([0.0, 0.0, 1.0, 0.0])
CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny matrices: one intra-op thread is many times faster than several on a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def estimate(name, rewards, num_generations=4, args=ARGS, **extras):
    return trl_zoo.ADVANTAGES.get(name).fn(AdvantageInputs(rewards, num_generations, **extras), args)


def lora():
    return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def generate(trainer):
    """One generation batch, scored, from a fixed RNG state (same prompts and completions for equal models)."""
    torch.manual_seed(0)
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    return generate_and_score(trainer, batch)


def full_logit_policy(model, output, temperature=1.0):
    """log π(y_t) and Σ_v π_t(v)² of the sampled completion tokens from the model's full logits."""
    input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    length = output["completion_ids"].size(1)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -length - 1 : -1] / temperature
    log_probs = torch.log_softmax(logits.double(), dim=-1)
    logps = log_probs.gather(-1, output["completion_ids"].unsqueeze(-1)).squeeze(-1)
    return logps, log_probs.exp().pow(2).sum(-1)


# ---------------------------------------------------------------------------------------------------- closed forms
def test_worked_example_of_seed_004():
    torch.testing.assert_close(estimate("rloo", WORKED), torch.tensor([-1 / 3, -1 / 3, 1.0, -1 / 3]))
    torch.testing.assert_close(estimate("grpo", WORKED), torch.tensor([-0.5, -0.5, 1.5, -0.5]))
    torch.testing.assert_close(estimate("dr_grpo", WORKED), torch.tensor([-0.25, -0.25, 0.75, -0.25]))


def test_grpo_std_convention_and_epsilon():
    population = SimpleNamespace(advantage_std_unbiased=False, advantage_epsilon=0.0, scale_rewards="group")
    std = (3 / 16) ** 0.5
    centred = torch.tensor([-0.25, -0.25, 0.75, -0.25])
    torch.testing.assert_close(estimate("grpo", WORKED, args=population), centred / std)
    with_epsilon = SimpleNamespace(advantage_std_unbiased=True, advantage_epsilon=0.1, scale_rewards="group")
    torch.testing.assert_close(estimate("grpo", WORKED, args=with_epsilon), centred / 0.6)
    no_scale = SimpleNamespace(advantage_std_unbiased=True, advantage_epsilon=0.0, scale_rewards="none")
    torch.testing.assert_close(estimate("grpo", WORKED, args=no_scale), estimate("dr_grpo", WORKED))


def test_grpo_batch_scale_uses_the_batch_std():
    rewards = torch.tensor([0.0, 1.0, 2.0, 3.0, 10.0, 10.0, 10.0, 14.0])
    batch = SimpleNamespace(advantage_std_unbiased=True, advantage_epsilon=0.0, scale_rewards="batch")
    expected = (rewards - torch.tensor([1.5] * 4 + [11.0] * 4)) / rewards.std()
    torch.testing.assert_close(estimate("grpo", rewards, args=batch), expected)


def test_reinforce_variants():
    rewards = torch.tensor([0.5, 2.0, -1.0, 4.0, 0.0, 1.0, 1.0, 3.0])
    torch.testing.assert_close(estimate("reinforce", rewards), rewards)
    torch.testing.assert_close(estimate("reinforce_batch_baseline", rewards), rewards - 1.3125)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_group_estimators_sum_to_zero_in_every_group(name):
    rewards = torch.randn(24, generator=torch.Generator().manual_seed(3))
    advantages = estimate(name, rewards, num_generations=6)
    torch.testing.assert_close(advantages.view(4, 6).sum(1), torch.zeros(4), atol=1e-5, rtol=0)
    assert advantages.abs().max() > 0.1


def test_rloo_is_the_rescaled_mean_baseline():
    rewards = torch.randn(12, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(estimate("rloo", rewards, num_generations=4), 4 / 3 * estimate("dr_grpo", rewards))


def test_unscorable_completions_are_left_out_of_the_baselines():
    rewards = torch.tensor([0.0, float("nan"), 1.0, 0.0])
    rloo = estimate("rloo", rewards)
    torch.testing.assert_close(rloo[[0, 2, 3]], torch.tensor([-0.5, 1.0, -0.5]))
    assert torch.isnan(rloo[1])
    grpo = estimate("grpo", rewards)
    torch.testing.assert_close(grpo[[0, 2, 3]], (torch.tensor([0.0, 1.0, 0.0]) - 1 / 3) / (1 / 3) ** 0.5)
    lone = estimate("rloo", torch.tensor([2.0, float("nan")]), num_generations=2)
    assert torch.isnan(lone).all()  # no scorable sibling: no baseline (the trainer zeroes it)


# ---------------------------------------------------------------------------------------------------- MaxRL
def test_maxrl_is_the_success_average_minus_the_average_score():
    """Binary rewards, K successes of N: ĝ = (1/K) Σ r_i S_i − (1/N) Σ S_i = (1/N) Σ Â_i S_i, so Â_i = N r_i/K − 1;
    no success: ĝ = 0."""
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    successes = rewards.view(4, 4).sum(1, keepdim=True).expand(4, 4).reshape(-1)
    expected = torch.where(successes > 0, 4 * rewards / successes.clamp(min=1) - 1, 0.0)
    advantages = estimate("maxrl", rewards)
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(advantages[:4], torch.tensor([-1.0, -1.0, 3.0, -1.0]))  # 1 of 4: the success ×3
    assert (advantages[8:] == 0).all()  # no success, and all successes: no signal, exactly


def test_maxrl_weights_a_prompt_by_one_over_its_pass_rate():
    """Â = (R − mean)/mean = Dr. GRPO's Â / p: GRPO's 1/std gives a hard and an easy prompt the same weight, MaxRL
    weights the hard one (p = 1/8) 7 times the easy one (p = 7/8)."""
    hard, easy = torch.tensor([1.0] + [0.0] * 7), torch.tensor([0.0] + [1.0] * 7)
    rewards = torch.cat([hard, easy])
    maxrl = estimate("maxrl", rewards, num_generations=8)
    pass_rates = torch.tensor([1 / 8] * 8 + [7 / 8] * 8)
    torch.testing.assert_close(maxrl, estimate("dr_grpo", rewards, num_generations=8) / pass_rates)
    assert maxrl[:8].abs().sum() == pytest.approx(7 * maxrl[8:].abs().sum())
    grpo = estimate("grpo", rewards, num_generations=8)
    assert grpo[:8].abs().sum() == pytest.approx(grpo[8:].abs().sum())


def test_maxrl_takes_graded_rewards_and_leaves_unscorable_out():
    rewards = torch.tensor([0.5, float("nan"), 0.25, 0.0])
    advantages = estimate("maxrl", rewards)
    torch.testing.assert_close(advantages[[0, 2, 3]], torch.tensor([0.5, 0.25, 0.0]) / 0.25 - 1)
    assert torch.isnan(advantages[1])


def test_maxrl_refuses_negative_rewards():
    with pytest.raises(ValueError, match=r"^advantage_estimator: 'maxrl' .* needs rewards ≥ 0; got -1\."):
        estimate("maxrl", torch.tensor([1.0, -1.0, 1.0, 1.0]))


def test_nan_std_matches_torch():
    values = torch.randn(5, 7, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(nan_std(values, dim=1), values.std(1))
    torch.testing.assert_close(nan_std(values, dim=1, unbiased=False), values.std(1, unbiased=False))


def test_opo_length_weighted_baseline():
    rewards = torch.tensor([1.0, 0.0, 2.0, 2.0])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    advantages = estimate("opo", rewards, num_generations=2, mask=mask)
    torch.testing.assert_close(advantages, torch.tensor([0.25, -0.75, 0.0, 0.0]))
    lengths = mask.sum(-1).float()
    torch.testing.assert_close((lengths * advantages).view(2, 2).sum(1), torch.zeros(2))


def test_optimal_baseline_is_the_mean_for_equal_norms_and_leans_to_large_norms():
    equal = estimate("optimal_baseline", WORKED, score_sq_norms=torch.full((4,), 3.0))
    torch.testing.assert_close(equal, estimate("dr_grpo", WORKED))
    norms = torch.tensor([1.0, 1.0, 10.0, 1.0])
    leaning = estimate("optimal_baseline", WORKED, score_sq_norms=norms)
    baseline = 10.0 / 13.0  # Σ w R / Σ w
    torch.testing.assert_close(leaning, WORKED - baseline)
    assert baseline > 0.25  # moved from the mean toward R = 1, the completion with the largest ‖s‖²
    torch.testing.assert_close((norms * leaning).sum(), torch.tensor(0.0), atol=1e-6, rtol=0)


def test_reinforce_pp_token_returns_and_batch_whitening():
    rewards = torch.tensor([1.0, 0.0, 0.5, 2.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
    penalty = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.0], [0.6, 0.0, 0.0], [0.0, 0.0, 0.7]]) * mask
    penalised = rewards - penalty.sum(-1)  # what the trainer hands the estimator for kl_placement="reward"
    returns = torch.zeros(4, 3)
    for i in range(4):
        for t in range(3):
            returns[i, t] = rewards[i] - penalty[i, t:].sum()  # R − β Σ_{s≥t} KL_s
    tokens = returns[mask.bool()]
    expected = (returns - tokens.mean()) / tokens.std()
    advantages = estimate("reinforce_pp", penalised, num_generations=2, mask=mask, token_penalty=penalty)
    torch.testing.assert_close(advantages[mask.bool()], expected[mask.bool()])
    torch.testing.assert_close(advantages[mask.bool()].mean(), torch.tensor(0.0), atol=1e-6, rtol=0)

    group_mean = penalised.view(2, 2).mean(1).repeat_interleave(2)  # baseline over R' = R − β Σ_t KL_t
    group_returns = returns - group_mean.unsqueeze(1)
    tokens = group_returns[mask.bool()]
    expected = (group_returns - tokens.mean()) / tokens.std()
    baseline = estimate("reinforce_pp_baseline", penalised, num_generations=2, mask=mask, token_penalty=penalty)
    torch.testing.assert_close(baseline[mask.bool()], expected[mask.bool()])


def test_reinforce_pp_without_a_mask_whitens_completions():
    rewards = torch.tensor([1.0, 0.0, 3.0, 2.0])
    torch.testing.assert_close(estimate("reinforce_pp", rewards), (rewards - 1.5) / rewards.std())


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="num_generations"):
        AdvantageInputs(torch.zeros(6), 4)
    with pytest.raises(ValueError, match="score_sq_norms"):
        estimate("optimal_baseline", WORKED)
    with pytest.raises(ValueError, match="advantage_estimator: unknown .*'rloo'"):
        trl_zoo.GRPOConfig(**config_kwargs(advantage_estimator="rlo"))


# ---------------------------------------------------------------------------------------------------- score norms
def test_score_sq_norm_is_the_logit_space_gradient_norm():
    logits = torch.randn(3, 11, generator=torch.Generator().manual_seed(6), dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([2, 7, 0])
    log_probs = torch.log_softmax(logits, -1)
    logps = log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    (gradient,) = torch.autograd.grad(logps.sum(), logits)  # rows are e_y − π, one per token
    log_squares = torch.logsumexp(2 * log_probs, -1)
    norms = score_sq_norms(logps.detach().unsqueeze(0), log_squares.detach().unsqueeze(0), torch.ones(1, 3))
    torch.testing.assert_close(norms, gradient.pow(2).sum().unsqueeze(0))


@pytest.mark.parametrize("peft", [False, True], ids=["full", "lora"])
def test_optimal_baseline_on_a_real_batch_matches_full_logits(peft):
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, advantage_estimator="optimal_baseline", temperature=0.7,
        peft_config=lora() if peft else None,
    )
    if peft:  # LoRA's B starts at 0: move the adapter so that a pass without it would differ
        generator = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for name, parameter in trainer.model.named_parameters():
                if "lora_B" in name:
                    parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
    output = generate(trainer)
    logps, squares = full_logit_policy(trainer.model, output, temperature=0.7)
    mask = output["completion_mask"]
    fused_logps, fused_norms = trainer.pipeline.get("advantages")._score_norm_pass(output, mask)
    expected_norms = ((1 - 2 * logps.exp() + squares) * mask).sum(-1)
    torch.testing.assert_close(fused_norms.double(), expected_norms, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close((fused_logps * mask).double(), logps * mask, rtol=1e-5, atol=1e-5)
    assert expected_norms.std() > 0.01  # lengths and confidences differ: the baseline differs from the mean
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    plain = trainer.model(input_ids=ids, labels=ids, fused_lm_head=True)
    assert plain.log_sum_sq_probs is None  # TRL's own passes keep TRL's head: the squares cost them nothing

    rewards = torch.tensor(completions_log(trainer)["rewards"]["digit_reward"])[-mask.size(0) :].view(-1, 4)
    weights = expected_norms.view(-1, 4).float()
    baseline = (weights * rewards).sum(1, keepdim=True) / weights.sum(1, keepdim=True)
    torch.testing.assert_close(output["advantages"], (rewards - baseline).view(-1), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(baseline, rewards.mean(1, keepdim=True), atol=1e-4)


# ---------------------------------------------------------------------------------------------------- trainer
def _reward_with_gaps(completions, **kwargs):
    """digit fraction, None (unscorable) for every fifth completion."""
    return [None if i % 5 == 3 else sum(c.isdigit() for c in s) / max(len(s), 1) for i, s in enumerate(completions)]


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_grpo_estimator_reproduces_trl_advantages(scale_rewards):
    config = dict(scale_rewards=scale_rewards, reward_funcs=_reward_with_gaps)
    reference = generate(make_trainer(trl.GRPOTrainer, trl.GRPOConfig, **config))
    ours = generate(
        make_trainer(
            trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, advantage_estimator="grpo", advantage_epsilon=1e-4, **config
        )
    )
    torch.testing.assert_close(ours["completion_ids"], reference["completion_ids"])
    assert (reference["advantages"] == 0).sum() >= 1 and reference["advantages"].abs().max() > 0.1
    torch.testing.assert_close(ours["advantages"], reference["advantages"], rtol=1e-6, atol=1e-6)


def test_estimator_none_leaves_trl_advantages_untouched():
    reference = generate(make_trainer(trl.GRPOTrainer, trl.GRPOConfig))
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig)
    assert not trainer.pipeline.get("advantages").active
    assert torch.equal(generate(trainer)["advantages"], reference["advantages"])


# ---------------------------------------------------------------------------------------------------- GDPO
def _length_reward(completions, **kwargs):
    """Completion length in characters, None for every third completion: a second objective of another scale."""
    return [None if i % 3 == 1 else 10.0 * len(c) for i, c in enumerate(completions)]


GDPO_REWARDS = [_reward_with_gaps, _length_reward]


def _whiten(values: torch.Tensor, epsilon: float = 1e-4) -> torch.Tensor:
    scored = values[~torch.isnan(values)]
    return (values - scored.mean()) / (scored.std() + epsilon)


def test_normalize_then_sum_with_grpo_is_trls_gdpo():
    config = dict(
        multi_objective_aggregation="normalize_then_sum", reward_funcs=GDPO_REWARDS, reward_weights=[1.0, 0.5]
    )
    reference = generate(make_trainer(trl.GRPOTrainer, trl.GRPOConfig, **config))
    ours = generate(make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, advantage_estimator="grpo", **config))
    torch.testing.assert_close(ours["completion_ids"], reference["completion_ids"])
    assert reference["advantages"].abs().max() > 0.5
    torch.testing.assert_close(ours["advantages"], reference["advantages"], rtol=1e-5, atol=1e-5)


def test_normalize_then_sum_runs_the_estimator_on_each_reward_then_whitens_the_sum(monkeypatch):
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, advantage_estimator="rloo", reward_funcs=GDPO_REWARDS,
        reward_weights=[2.0, 1.0], multi_objective_aggregation="normalize_then_sum",
    )
    scored_rewards, seen = trl_zoo.components.rewards.Rewards.scored_rewards, []
    monkeypatch.setattr(trl_zoo.components.rewards.Rewards, "scored_rewards",
                        lambda *a, **k: seen.append(scored_rewards(*a, **k)) or seen[-1])
    advantages = generate(trainer)["advantages"]
    rewards = seen[-1]  # (N, 2), NaN where the length reward returned None
    per_reward = torch.stack([estimate("rloo", rewards[:, k]) for k in range(2)], dim=-1)
    expected = _whiten((per_reward * torch.tensor([2.0, 1.0])).nansum(-1))
    torch.testing.assert_close(advantages, expected, rtol=1e-5, atol=1e-5)
    summed = _whiten(estimate("rloo", (rewards * torch.tensor([2.0, 1.0])).nansum(-1)))
    assert (advantages - summed).abs().max() > 0.1  # decoupling changes the advantages: the length reward's scale


def test_normalize_then_sum_drops_a_missing_reward_and_whitens_token_advantages_over_tokens():
    rewards_per_func = torch.tensor([[1.0, 0.0], [0.0, float("nan")], [1.0, 2.0], [float("nan"), float("nan")],
                                     [0.0, 1.0], [1.0, 1.0], [0.5, 0.0], [0.0, 3.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 0, 0.0]])
    args = SimpleNamespace(advantage_std_unbiased=True, advantage_epsilon=0.0, scale_rewards="group")
    inputs = AdvantageInputs(rewards_per_func.nansum(1), 4, mask=mask)
    weights = torch.tensor([1.0, 0.5])
    rloo = reward_decoupled_advantages(trl_zoo.ADVANTAGES.get("rloo"), inputs, rewards_per_func, weights, args)
    per_reward = torch.stack([estimate("rloo", rewards_per_func[:, k]) for k in range(2)], dim=-1)
    summed = (per_reward * weights).nansum(-1)
    summed[3] = float("nan")  # no scorable reward at all: stays unscorable
    torch.testing.assert_close(rloo, _whiten(summed, epsilon=0.0), equal_nan=True)
    assert torch.isnan(rloo[3]) and torch.isfinite(rloo[[0, 1, 2, 4, 5, 6, 7]]).all()
    assert per_reward[1, 1].isnan() and rloo[1] != 0  # row 1 keeps its first reward's advantage
    reinforce_pp = trl_zoo.ADVANTAGES.get("reinforce_pp")
    tokens = reward_decoupled_advantages(reinforce_pp, inputs, rewards_per_func, weights, args)
    selected = tokens[(mask > 0) & ~torch.isnan(tokens)]
    assert tokens.shape == mask.shape and selected.numel() == int(mask.sum()) - 2  # row 3 (2 tokens) unscorable
    assert abs(selected.mean().item()) < 1e-5 and selected.std().item() == pytest.approx(1.0, abs=1e-5)


# every estimator once, the two KL placements alternating (each placement meets group, token-level and
# extra-input estimators); an estimator of rewards ≥ 0 only (maxrl) keeps the KL out of the reward
NONNEGATIVE = [name for name in trl_zoo.ADVANTAGES.names() if trl_zoo.ADVANTAGES.get(name).spec.nonnegative_rewards]
RUNS = [
    (name, ("loss", "reward")[i % 2])
    for i, name in enumerate(sorted(set(trl_zoo.ADVANTAGES.names()) - set(NONNEGATIVE)))
] + [(name, "loss") for name in NONNEGATIVE]


@pytest.mark.parametrize("name, placement", RUNS)
def test_short_lora_training_run(name, placement):
    dataset = prompts_dataset()
    if "reference_rewards" in trl_zoo.ADVANTAGES.get(name).spec.needs:
        dataset = with_reference_rewards(dataset)
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), advantage_estimator=name, kl_placement=placement,
        beta=0.05, per_device_train_batch_size=4, max_completion_length=6, passk_k=2,  # passk: k below the group's 4
        dataset=dataset,
    )
    initial = {k: v.clone() for k, v in trainer.model.named_parameters() if v.requires_grad}
    trainer.train()
    logs = trainer.state.log_history
    assert trainer.state.global_step == 2
    assert all(torch.isfinite(torch.tensor(log["loss"])) for log in logs if "loss" in log)
    assert all("advantages/abs_max" in log for log in logs if "loss" in log)
    assert ("kl_reward/penalty" in logs[1]) == (placement == "reward")
    parameters = dict(trainer.model.named_parameters())
    moved = [key for key, value in initial.items() if not torch.equal(parameters[key], value)]
    assert moved and all("lora_" in key or "value_head" in key for key in moved)  # gae also trains its value head


def test_token_level_advantages_reach_the_loss():
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), advantage_estimator="reinforce_pp",
        kl_placement="reward", beta=0.5, loss_type="grpo",
    )
    with torch.no_grad():  # move the policy off the reference so the per-token penalty is not zero
        for name, parameter in trainer.model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.3 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(7)))
    output = generate(trainer)
    advantages, mask = output["advantages"], output["completion_mask"]
    assert advantages.shape == mask.shape
    valid = mask.bool()
    assert (advantages[~valid] == 0).all()
    torch.testing.assert_close(advantages[valid].mean(), torch.tensor(0.0), atol=1e-5, rtol=0)
    assert (advantages[valid].view(-1) != advantages[:, :1].expand_as(advantages)[valid]).any()  # varies along t
    # on-policy, β's KL term is in the reward only: the loss is −mean_i (1/T_i) Σ_t Â_{i,t}
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer.compute_loss(trainer.model, output)
    expected = -((advantages * mask).sum(-1) / mask.sum(-1)).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------- recipes
@pytest.mark.parametrize("recipe", ["reinforce", "rloo", "dr_grpo", "prorl"])
def test_recipe_builds_a_config(recipe):
    path = CONFIGS / f"{recipe}.yaml"
    text = path.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    assert text.startswith("#") and ("arXiv" in header or "Williams" in header)
    values = yaml.safe_load(text)
    batch = dict(per_device_train_batch_size=values.get("num_generations", 8))
    config = trl_zoo.GRPOConfig(**config_kwargs(**batch, **values))
    for key, value in values.items():
        assert getattr(config, key) == value, key
