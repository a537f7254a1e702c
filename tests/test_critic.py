"""The critic: GAE against a direct double sum and its λ = 0 / λ = 1 limits, value targets, VAPO's length-adaptive λ,
the clipped value loss and diagnostics against closed forms, gradient separation between policy and critic (adapter by
adapter, head vs policy), value pre-training on a fixed batch, saving, and short LoRA runs of the PPO and VAPO
recipes on the tiny model."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from accelerate.utils import DistributedType
from peft import LoraConfig
from transformers import TrainerCallback

import trl_zoo
from tests.tiny import config_kwargs, make_trainer
from tests.trl_internals import buffered_micro_batches, generate_and_score, metric_values, policy_loss
from trl_zoo.advantages import AdvantageInputs
from trl_zoo.advantages.gae import gae, length_adaptive_lambda, policy_gae, token_rewards
from trl_zoo.components.value_model import CRITIC_FILE, VALUE_ADAPTER, check_critic_distribution
from trl_zoo.value_function import clipped_value_loss, explained_variance, positive_example_nll, value_targets

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
ARGS = SimpleNamespace(
    gae_gamma=0.9, gae_lambda=0.8, gae_lambda_critic=None, gae_whiten=False, vapo_length_alpha=None,
    advantage_std_unbiased=False, advantage_epsilon=0.0,
)


def args(**overrides):
    return SimpleNamespace(**{**vars(ARGS), **overrides})


def lora():
    return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def random_batch(seed=0, rows=5, width=7, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 3, 5, 1, 6])[:rows]
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(dtype)
    values = torch.randn(rows, width, generator=generator, dtype=dtype)
    rewards = torch.randn(rows, width, generator=generator, dtype=dtype)
    return rewards, values, mask, lengths


def direct_gae(rewards, values, lengths, gamma, lams):
    """Â_t = Σ_{l=0}^{ℓ−1−t} (γλ)^l δ_{t+l}, δ_t = r_t + γ V_{t+1} − V_t with V_ℓ = 0: a double loop."""
    out = torch.zeros_like(values)
    for i, length in enumerate(lengths.tolist()):
        lam = float(lams[i])
        for t in range(length):
            total = 0.0
            for l in range(length - t):  # noqa: E741  (the docstring's l)
                s = t + l
                next_value = values[i, s + 1] if s + 1 < length else 0.0
                delta = rewards[i, s] + gamma * next_value - values[i, s]
                total += (gamma * lam) ** l * delta
            out[i, t] = total
    return out


# ---------------------------------------------------------------------------------------------------- GAE
@pytest.mark.parametrize("gamma,lam", [(0.9, 0.8), (1.0, 0.95), (0.7, 0.3)])
def test_gae_matches_the_direct_double_sum(gamma, lam):
    rewards, values, mask, lengths = random_batch()
    expected = direct_gae(rewards, values, lengths, gamma, [lam] * len(lengths))
    torch.testing.assert_close(gae(rewards, values, mask, gamma, lam), expected)


def test_gae_with_one_lambda_per_row_matches_the_direct_double_sum():
    rewards, values, mask, lengths = random_batch(seed=1)
    lams = torch.tensor([0.0, 0.5, 1.0, 0.9, 0.25], dtype=torch.float64)
    torch.testing.assert_close(
        gae(rewards, values, mask, 0.95, lams), direct_gae(rewards, values, lengths, 0.95, lams)
    )


def test_lambda_one_is_the_monte_carlo_return_minus_the_value():
    rewards, values, mask, lengths = random_batch(seed=2)
    gamma = 0.9
    expected = torch.zeros_like(values)
    for i, length in enumerate(lengths.tolist()):
        for t in range(length):
            ret = sum(gamma ** (s - t) * rewards[i, s] for s in range(t, length))
            expected[i, t] = ret - values[i, t]
    torch.testing.assert_close(gae(rewards, values, mask, gamma, 1.0), expected)


def test_lambda_zero_is_the_one_step_td_residual():
    rewards, values, mask, lengths = random_batch(seed=3)
    gamma = 0.9
    next_values = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=1)
    next_values = next_values * torch.cat([mask[:, 1:], torch.zeros_like(mask[:, :1])], dim=1)  # V_ℓ = 0
    expected = (rewards + gamma * next_values - values) * mask
    torch.testing.assert_close(gae(rewards, values, mask, gamma, 0.0), expected)


def test_masked_out_tokens_inside_a_completion_are_skipped():
    """A hole in the mask (tool output) gives the same advantages as the row with the hole removed."""
    rewards, values, _, _ = random_batch(seed=4, rows=1)
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 0]], dtype=torch.float64)
    kept = mask[0].bool()
    holed = gae(rewards, values, mask, 0.9, 0.7)
    compact = gae(rewards[:, kept], values[:, kept], torch.ones(1, 4, dtype=torch.float64), 0.9, 0.7)
    torch.testing.assert_close(holed[:, kept], compact)
    assert (holed[:, ~kept] == 0).all()


def test_terminal_reward_and_the_kl_penalty_per_token():
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.float64)
    penalty = torch.tensor([[0.1, 0.2, 0.3, 9.0], [0.5, -0.1, 9.0, 9.0], [0.0, 0, 0, 0]], dtype=torch.float64)
    raw = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
    inputs = AdvantageInputs(raw - (penalty * mask).sum(-1), 3, mask=mask, token_penalty=penalty * mask)
    expected = torch.tensor(
        [[-0.1, -0.2, 1.0 - 0.3, 0], [-0.5, -2.0 + 0.1, 0, 0], [3.0, 0, 0, 0]], dtype=torch.float64
    )
    torch.testing.assert_close(token_rewards(inputs), expected)
    torch.testing.assert_close(token_rewards(inputs).sum(-1), inputs.rewards)


def test_terminal_reward_with_gamma_one_gives_returns_equal_to_the_final_reward():
    _, values, mask, _ = random_batch(seed=5)
    rewards = torch.tensor([1.0, 0.0, -1.0, 0.5, 2.0], dtype=torch.float64)
    inputs = AdvantageInputs(rewards, 5, mask=mask, values=values)
    targets = value_targets(inputs, args(gae_gamma=1.0, gae_lambda=0.3, gae_lambda_critic=1.0))
    torch.testing.assert_close(targets, rewards.unsqueeze(1) * mask)
    # λ_critic = None couples the targets to the policy's λ: now they bootstrap from the values
    coupled = value_targets(inputs, args(gae_gamma=1.0, gae_lambda=0.3))
    assert not torch.allclose(coupled, rewards.unsqueeze(1) * mask)
    torch.testing.assert_close(coupled, (policy_gae(inputs, args(gae_gamma=1.0, gae_lambda=0.3)) + values) * mask)


def test_length_adaptive_lambda_matches_its_formula():
    alpha = 0.05
    lengths = torch.tensor([10, 20, 40, 100, 1000, 0])
    expected = torch.tensor([0.0, 0.0, 0.5, 0.8, 0.98, 0.0], dtype=torch.float64)
    torch.testing.assert_close(length_adaptive_lambda(lengths, alpha), expected)
    # the estimator uses λ_i of each completion's own length
    _, values, mask, lengths = random_batch(seed=6)
    rewards = torch.tensor([1.0, 0.0, -1.0, 0.5, 2.0], dtype=torch.float64)
    inputs = AdvantageInputs(rewards, 5, mask=mask, values=values)
    config = args(gae_gamma=1.0, vapo_length_alpha=0.4)
    lams = 1 - 1 / (0.4 * lengths.double())
    assert (lams.clamp(0, 1) != lams).any()  # one completion (ℓ = 1) is clamped at 0
    per_row = torch.stack([
        gae(token_rewards(inputs)[i : i + 1], values[i : i + 1], mask[i : i + 1], 1.0, float(lams[i].clamp(0, 1)))[0]
        for i in range(5)
    ])
    torch.testing.assert_close(policy_gae(inputs, config), per_row)
    # decoupled: the targets stay Monte-Carlo
    torch.testing.assert_close(
        value_targets(inputs, args(gae_gamma=1.0, vapo_length_alpha=0.4, gae_lambda_critic=1.0)),
        rewards.unsqueeze(1) * mask,
    )


def test_gae_estimator_whitens_over_tokens_and_keeps_nan_rows():
    _, values, mask, _ = random_batch(seed=7)
    rewards = torch.tensor([1.0, float("nan"), -1.0, 0.5, 2.0], dtype=torch.float64)
    inputs = AdvantageInputs(rewards, 5, mask=mask, values=values)
    advantages = trl_zoo.ADVANTAGES.get("gae").fn(inputs, args(gae_whiten=True))
    assert torch.isnan(advantages[1][mask[1].bool()]).all()  # the trainer zeroes NaN advantages
    valid = mask.bool()
    valid[1] = False
    kept = advantages[valid]
    torch.testing.assert_close(kept.mean(), torch.tensor(0.0, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(kept.std(unbiased=False), torch.tensor(1.0, dtype=torch.float64))
    raw = policy_gae(inputs, ARGS)[valid]
    torch.testing.assert_close(kept, (raw - raw.mean()) / raw.std(unbiased=False))
    with pytest.raises(ValueError, match="values"):
        trl_zoo.ADVANTAGES.get("gae").fn(AdvantageInputs(rewards, 5, mask=mask), ARGS)


# ---------------------------------------------------------------------------------------------------- losses
def test_clipped_value_loss_closed_form():
    values = torch.tensor([[0.5, 1.0, -0.3, 2.0]])
    old = torch.tensor([[0.0, 0.9, 0.0, 0.0]])
    targets = torch.tensor([[1.0, 0.0, -1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    result = clipped_value_loss(values, old, targets, mask, clip=0.2)
    # token 0: clip(0.5) = 0.2 → max(0.25, 0.64) = 0.64 (clipped wins); token 1: clip(1.0) = 1.0 → 1.0;
    # token 2: clip(−0.3) = −0.2 → max(0.49, 0.64) = 0.64 (clipped wins); token 3 masked out
    torch.testing.assert_close(result.loss, torch.tensor(0.5 * (0.64 + 1.0 + 0.64) / 3))
    torch.testing.assert_close(result.clip_fraction, torch.tensor(2 / 3))
    torch.testing.assert_close(result.mean_value, torch.tensor((0.5 + 1.0 - 0.3) / 3))
    plain = clipped_value_loss(values, old, targets, mask, clip=None)
    torch.testing.assert_close(plain.loss, torch.tensor(0.5 * (0.25 + 1.0 + 0.49) / 3))
    # an unscorable row (NaN target) is left out
    nan_targets = targets.clone()
    nan_targets[0, 1] = float("nan")
    torch.testing.assert_close(
        clipped_value_loss(values, old, nan_targets, mask, 0.2).loss, torch.tensor(0.5 * 1.28 / 2)
    )


def test_explained_variance_and_positive_nll():
    targets = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    mask = torch.ones(1, 4)
    assert explained_variance(targets, targets, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(targets, 2.5), targets, mask) == pytest.approx(0.0)
    assert explained_variance(targets + 0.5, targets, mask) == pytest.approx(1.0)  # a constant offset is not variance
    logps = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0], [-4.0, -4.0, -4.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    nll = positive_example_nll(logps, mask, torch.tensor([1.0, 1.0, 0.0]))
    torch.testing.assert_close(nll, torch.tensor((1.0 + 2.0 + 0.5 + 0.5 + 9.0) / 5))
    nll.backward()
    assert (logps.grad[2] == 0).all() and logps.grad[0, 2] == 0
    assert positive_example_nll(logps, mask, torch.zeros(3)).item() == 0.0


def test_config_validation_names_the_field():
    base = config_kwargs()
    for field, value in (("gae_lambda", 1.5), ("gae_gamma", -0.1), ("value_clip", 0.0), ("vapo_length_alpha", -1.0)):
        with pytest.raises(ValueError, match=field):
            trl_zoo.GRPOConfig(**base, advantage_estimator="gae", **{field: value})
    with pytest.raises(ValueError, match="vapo_value_warmup_steps: needs a critic"):
        trl_zoo.GRPOConfig(**base, advantage_estimator="grpo", vapo_value_warmup_steps=3)
    with pytest.raises(ValueError, match="skip_zero_advantage"):
        trl_zoo.GRPOConfig(**base, advantage_estimator="gae", vapo_positive_nll_coef=0.1, skip_zero_advantage=True)


# ---------------------------------------------------------------------------------------------------- trainer
def generate(trainer):
    torch.manual_seed(0)
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    return generate_and_score(trainer, batch)


def perturb(parameters, seed=3, scale=0.2):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in parameters:
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator))


def gradients(parameters):
    return [None if p.grad is None else p.grad.abs().sum().item() for p in parameters]


def test_adapter_critic_gradients_stay_on_their_side():
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), advantage_estimator="gae")
    model = trainer.model
    assert trainer.critic.mode == "adapter" and set(model.peft_config) == {"default", VALUE_ADAPTER}
    policy = [p for n, p in model.named_parameters() if ".default." in n]
    value_adapter = [p for n, p in model.named_parameters() if f".{VALUE_ADAPTER}." in n]
    head = list(trainer.critic.value_head.parameters())
    assert policy and value_adapter and all(p.requires_grad for p in policy + value_adapter + head)
    perturb(policy + value_adapter + head)  # LoRA B and the head start at 0, which would hide gradients
    batch = generate(trainer)
    assert batch["old_values"].shape == batch["completion_mask"].shape
    assert batch["value_targets"].shape == batch["completion_mask"].shape
    # the value pass really uses the value adapter: values differ from a pass with the policy adapter
    with torch.no_grad():
        policy_hidden = trainer.critic.hidden_states(batch)
    assert not torch.allclose(trainer.critic.value_head(policy_hidden.float()), batch["old_values"])
    trainer.current_gradient_accumulation_steps = 1

    policy_loss(trainer, model, batch).backward()  # the policy loss alone
    assert all(g is not None and g > 0 for g in gradients(policy))
    assert all(g is None or g == 0 for g in gradients(value_adapter + head))
    model.zero_grad(set_to_none=True)

    trainer.critic.value_loss(batch).backward()  # the value loss alone
    assert all(g is not None and g > 0 for g in gradients(value_adapter + head))
    assert all(g is None or g == 0 for g in gradients(policy))
    assert model.active_adapter == "default" and all(p.requires_grad for p in policy + value_adapter)


def test_head_critic_on_detached_hidden_states():
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, advantage_estimator="gae")
    assert trainer.critic.mode == "head"
    head = list(trainer.critic.value_head.parameters())
    policy = [p for n, p in trainer.model.named_parameters() if "value_head" not in n and p.requires_grad]
    perturb(head)
    batch = generate(trainer)
    trainer.current_gradient_accumulation_steps = 1
    trainer.critic.value_loss(batch).backward()
    assert all(g is not None and g > 0 for g in gradients(head))
    assert all(g is None for g in gradients(policy))
    trainer.model.zero_grad(set_to_none=True)
    # the full loss: the head reads the policy forward's hidden states (captured, detached), so the head's gradient
    # is that of the value loss alone and the policy's that of the policy loss alone
    total = trainer.compute_loss(trainer.model, batch)
    total.backward()
    head_grads = [p.grad.clone() for p in head]
    policy_grads = [p.grad.clone() for p in policy]
    trainer.model.zero_grad(set_to_none=True)
    (trainer.args.value_coef * trainer.critic.value_loss(batch)).backward()
    for got, want in zip(head_grads, [p.grad for p in head]):
        torch.testing.assert_close(got, want)
    trainer.model.zero_grad(set_to_none=True)
    policy_loss(trainer, trainer.model, batch).backward()
    for got, want in zip(policy_grads, [p.grad for p in policy]):
        torch.testing.assert_close(got, want)


class ParameterSnapshots(TrainerCallback):
    """Copies of the policy adapter and the critic after every optimizer step."""

    def __init__(self, trainer):
        self.trainer, self.policy, self.critic = trainer, [], []

    def on_step_end(self, args, state, control, **kwargs):
        named = dict(self.trainer.model.named_parameters())
        self.policy.append(torch.cat([p.detach().flatten() for n, p in named.items() if ".default." in n]))
        self.critic.append(torch.cat([p.detach().flatten() for p in self.trainer.critic.parameters]))


class RewardsSeen(trl_zoo.GRPOTrainer):
    """Keeps the rewards each round's estimator saw (`ScoredRound.advantage_inputs`), after every component's
    `after_advantages`."""

    def _scored_round(self, inputs):
        scored = super()._scored_round(inputs)
        self.seen_rewards = [*getattr(self, "seen_rewards", []), scored.advantage_inputs.rewards]
        return scored


def test_value_pretraining_trains_only_the_critic_and_lowers_the_value_loss_on_a_fixed_batch():
    """num_iterations = 6: one generation batch reused for 6 optimizer steps, all of them value pre-training."""
    trainer = make_trainer(
        RewardsSeen, trl_zoo.GRPOConfig, peft_config=lora(), advantage_estimator="gae", max_steps=6,
        num_iterations=6, vapo_value_warmup_steps=6, gae_lambda_critic=0.5, value_clip=None, learning_rate=3e-2,
        value_learning_rate=3e-3, lr_scheduler_type="constant",
    )
    snapshots = ParameterSnapshots(trainer)
    trainer.add_callback(snapshots)
    policy_before = torch.cat(
        [p.detach().flatten().clone() for n, p in trainer.model.named_parameters() if ".default." in n]
    )
    trainer.train()
    critic_group = trainer.optimizer.param_groups[-1]
    assert critic_group["params"][-1] is trainer.critic.parameters[-1] and critic_group["initial_lr"] == 3e-3
    assert trainer.optimizer.param_groups[0]["initial_lr"] == 3e-2
    losses = [h["critic/value_loss"] for h in trainer.state.log_history if "critic/value_loss" in h]
    assert len(losses) == 6 and losses[-1] < 0.5 * losses[0] and all(b < a for a, b in zip(losses, losses[1:]))
    # the targets are Monte-Carlo (λ = 1, not gae_lambda_critic = 0.5) during pre-training: with γ = 1, R̂_t = R_i
    assert trainer.state.log_history[0]["critic/value_warmup"] == 1.0
    batch = buffered_micro_batches(trainer)[0]  # the generation batch, shuffled by TRL
    targets, mask = batch["value_targets"], batch["completion_mask"]
    row_targets = targets[:, 0]
    torch.testing.assert_close(targets * mask, row_targets.unsqueeze(1) * mask)
    rewards = trainer.seen_rewards[-1].float()  # the rewards of the last round, as the estimator saw them
    torch.testing.assert_close(row_targets.sort().values, rewards.sort().values)
    for policy in snapshots.policy:
        assert torch.equal(policy, policy_before)  # the policy loss was skipped
    assert not torch.equal(snapshots.critic[0], snapshots.critic[-1])


def load_recipe(name, **overrides):
    values = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    values.update(overrides)
    return values


@pytest.mark.parametrize("recipe", ["ppo", "vapo"])
def test_recipe_builds_a_config(recipe):
    text = (CONFIGS / f"{recipe}.yaml").read_text()
    assert text.startswith("#") and "arXiv" in text.split("\n\n")[0]
    values = yaml.safe_load(text)
    config = trl_zoo.GRPOConfig(
        **config_kwargs(**{**values, "per_device_train_batch_size": values["num_generations"]})
    )
    for key, value in values.items():
        assert getattr(config, key) == value, key


def test_ppo_recipe_trains_policy_and_critic_with_lora():
    recipe = load_recipe("ppo", num_iterations=2)
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), **{**recipe, "max_steps": 3},
    )
    snapshots = ParameterSnapshots(trainer)
    trainer.add_callback(snapshots)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "critic/value_loss" in h]
    assert len(logs) == 3
    for log in logs:
        assert torch.isfinite(torch.tensor([log["loss"], log["critic/value_loss"]])).all()
    for log in (logs[0], logs[2]):  # generation steps (num_iterations = 2)
        for key in ("critic/explained_variance", "critic/gae_std", "kl_reward/penalty", "advantages/std"):
            assert torch.isfinite(torch.tensor(log[key])), key
    assert not torch.equal(snapshots.policy[0], snapshots.policy[-1])
    assert not torch.equal(snapshots.critic[0], snapshots.critic[-1])


def test_vapo_recipe_pretrains_the_value_then_trains_the_policy(tmp_path):
    recipe = load_recipe(
        "vapo", num_generations=4, steps_per_generation=1, vapo_value_warmup_steps=2, vapo_length_alpha=0.5,
        vapo_positive_reward_threshold=0.2,
    )
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), **{**recipe, "max_steps": 4},
    )
    snapshots = ParameterSnapshots(trainer)
    trainer.add_callback(snapshots)
    policy_before = snapshots.policy or torch.cat(
        [p.detach().flatten().clone() for n, p in trainer.model.named_parameters() if ".default." in n]
    )
    trainer.train()
    assert torch.equal(snapshots.policy[0], policy_before) and torch.equal(snapshots.policy[1], policy_before)
    assert not torch.equal(snapshots.policy[3], policy_before)
    assert all(not torch.equal(a, b) for a, b in zip(snapshots.critic, snapshots.critic[1:]))
    logs = trainer.state.log_history[:4]
    assert [log["critic/value_warmup"] for log in logs] == [1.0, 1.0, 0.0, 0.0]
    assert all("vapo/positive_nll" in log for log in logs[2:]) and "vapo/positive_nll" not in logs[0]

    # the critic is saved next to the model and loaded back
    trainer.save_model(str(tmp_path))
    state = torch.load(tmp_path / CRITIC_FILE, weights_only=True)  # tensors, dicts and a string only
    fresh = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), **{**recipe, "max_steps": 4})
    assert not all(torch.equal(a, b) for a, b in zip(fresh.critic.parameters, trainer.critic.parameters))
    fresh.critic.load_state_dict(state)
    assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(fresh.critic.parameters, trainer.critic.parameters))


def test_critic_rows_survive_dynamic_sampling():
    """Regrouped and shuffled rows keep their own value targets: with γ = λ_critic = 1, R̂_t = R_i of that row."""
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), advantage_estimator="gae", gae_gamma=1.0,
        gae_lambda_critic=1.0, dynamic_sampling="resample", max_steps=2,
        reward_funcs=lambda completions, **kw: [float(len(c) % 2) for c in completions],
    )
    trainer.train()
    logs = trainer.state.log_history[:2]
    assert max(log["dynamic_sampling/generation_rounds"] for log in logs) > 1
    assert all(torch.isfinite(torch.tensor(log["critic/value_loss"])) for log in logs)
    batch = buffered_micro_batches(trainer)[0]
    for ids, mask, targets in zip(batch["completion_ids"], batch["completion_mask"], batch["value_targets"]):
        text = trainer.processing_class.decode(ids[mask.bool()], skip_special_tokens=True)
        torch.testing.assert_close(targets[mask.bool()], torch.full_like(targets[mask.bool()], float(len(text) % 2)))


class CriticAtTrainBegin(TrainerCallback):
    def __init__(self, trainer):
        self.trainer, self.critic = trainer, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.critic = [p.detach().clone() for p in self.trainer.critic.parameters]


def test_training_resumes_with_the_saved_critic(tmp_path):
    settings = dict(peft_config=lora(), advantage_estimator="gae", output_dir=str(tmp_path), save_strategy="steps",
                    save_steps=2)
    first = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, max_steps=2, **settings)
    first.train()
    assert (tmp_path / "checkpoint-2" / CRITIC_FILE).exists()
    resumed = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, max_steps=3, **settings)
    probe = CriticAtTrainBegin(resumed)
    resumed.add_callback(probe)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert resumed.state.global_step == 3
    for saved, loaded in zip(first.critic.parameters, probe.critic):
        torch.testing.assert_close(loaded, saved.detach())
    assert any(not torch.equal(p, torch.zeros_like(p)) for p in probe.critic)


def test_gradient_checkpointing_leaves_the_critic_gradients_unchanged():
    """The value pass runs without checkpointing: a recomputation in the backward would use the policy adapter."""
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), advantage_estimator="gae")
    parameters = [p for p in trainer.model.parameters() if p.requires_grad]
    perturb(parameters)
    batch = generate(trainer)
    trainer.current_gradient_accumulation_steps = 1
    grads = []
    for checkpointing in (False, True):
        if checkpointing:
            trainer.model.gradient_checkpointing_enable({"use_reentrant": False})
            assert trainer.model.is_gradient_checkpointing
        trainer.model.zero_grad(set_to_none=True)
        trainer.compute_loss(trainer.model, batch).backward()
        grads.append([p.grad.clone() for p in parameters])
    for plain, checkpointed in zip(*grads):
        torch.testing.assert_close(checkpointed, plain)
    assert trainer.model.is_gradient_checkpointing  # restored after the value pass


@pytest.mark.parametrize("distributed_type", [DistributedType.DEEPSPEED, DistributedType.FSDP])
def test_critic_is_refused_where_parameters_are_sharded(distributed_type):
    sharded = SimpleNamespace(num_processes=2, distributed_type=distributed_type)
    with pytest.raises(NotImplementedError, match=f"not under {distributed_type.value}"):
        check_critic_distribution(sharded, "gae")
    with pytest.raises(NotImplementedError, match="launch with DDP instead"):  # one process is sharded too
        check_critic_distribution(SimpleNamespace(num_processes=1, distributed_type=distributed_type), "gae")
    check_critic_distribution(SimpleNamespace(num_processes=2, distributed_type=DistributedType.MULTI_GPU), "gae")
    check_critic_distribution(SimpleNamespace(num_processes=1, distributed_type=DistributedType.MULTI_CPU), "gae")


def test_head_critic_reuses_the_policy_forward_also_when_rows_are_skipped():
    """The value head reads the hidden states of the loss's own policy forward: one backbone pass per micro-batch;
    with `skip_zero_advantage` the policy forward covers the rows with Â ≠ 0 and one no-grad pass the others, so
    every row goes through the backbone once, and the value loss is that of a separate full pass."""
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, advantage_estimator="gae", skip_zero_advantage=True
    )
    assert trainer.critic.mode == "head" and trainer.pipeline.get("skip_zero_advantage").active
    perturb(trainer.critic.value_head.parameters())
    batch = generate(trainer)
    trainer.current_gradient_accumulation_steps = 1
    rows_through_backbone = []
    trainer.critic.backbone().register_forward_pre_hook(
        lambda module, args, kwargs: rows_through_backbone.append(kwargs["input_ids"].size(0)), with_kwargs=True
    )
    value_losses = metric_values(trainer)["critic/value_loss"]
    rows = batch["completion_ids"].size(0)
    every_row_active = {**batch, "advantages": batch["advantages"].masked_fill(batch["advantages"] == 0, 0.5)}
    half_inert = {**every_row_active, "advantages": every_row_active["advantages"].clone()}
    half_inert["advantages"][1::2] = 0.0
    for micro_batch, expected_passes in ((every_row_active, [rows]), (half_inert, [rows // 2, rows - rows // 2])):
        rows_through_backbone.clear()
        trainer.compute_loss(trainer.model, micro_batch).backward()
        assert rows_through_backbone == expected_passes
        in_the_loss = value_losses[-1]
        with torch.no_grad():
            separate = trainer.critic.value_loss(micro_batch).item()  # its own full no-grad backbone pass
        assert in_the_loss == pytest.approx(separate, rel=1e-6, abs=1e-7)
        trainer.model.zero_grad(set_to_none=True)
