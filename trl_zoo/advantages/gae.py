"""GAE (Schulman et al. 2016, arXiv:1506.02438): token advantages from a learned critic V(s_t), VAPO's decoupled
and length-adaptive λ as options (Yue et al. 2025, arXiv:2504.05118).

State s_t is the prompt plus the completion tokens before y_t. A completion i of ℓ_i tokens gets its reward R_i on
its last token (terminal reward); with ``kl_placement="reward"`` every token also carries −β·KL_t (classic
RLHF), so Σ_t r_t = R_i − β Σ_t KL_t. Past the last token the episode has ended: V = 0 and Â = 0.

    δ_t  = r_t + γ·V(s_{t+1}) − V(s_t)                                  one-step TD residual
    Â_t  = Σ_{l≥0} (γλ)^l δ_{t+l}   =   δ_t + γλ·Â_{t+1}                GAE(γ, λ)
    λ = 1:  Â_t = G_t − V(s_t),  G_t = Σ_{l≥0} γ^l r_{t+l}              Monte-Carlo return minus the value
    λ = 0:  Â_t = δ_t

V is the critic at generation time (``AdvantageInputs.values``, declared with ``needs=("values",)``). Tokens
outside the mask inside a completion (tool outputs) are not actions: the recursion passes over them,
bootstrapping from the next action's value. The token advantages are optionally whitened over the batch (mean 0,
std 1 over completion tokens, NaN rows left out), as PPO implementations do. VAPO's options: λ_critic for the
value targets (``gae_lambda_critic``; the targets themselves are `trl_zoo/value_function.py`'s), λ_policy,i =
1 − 1/(α·ℓ_i) clamped to [0, 1] (``vapo_length_alpha``), value pre-training and the positive-example LM loss
(declared here as gae's fields, run by the critic, `trl_zoo/components/value_model.py`).

Tests: tests/test_critic.py (GAE against a direct double sum, λ per row, VAPO's options), tests/test_unequal_groups.py.
"""

from __future__ import annotations

import torch

from ..registry import ADVANTAGES
from ..specs import PluginField
from .base import AdvantageInputs, whiten

Tensor = torch.Tensor


def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float | Tensor) -> Tensor:
    """Â_t = δ_t + γλ·Â_{t+1}, δ_t = r_t + γV_{t+1} − V_t over the masked tokens of each row, (N, T).

    ``lam`` is a number or one λ per row, (N,) or (N, 1). V and Â are 0 past a row's last masked token; masked-out
    positions get Â = 0 and are skipped by the recursion. A NaN reward makes its row NaN.
    """
    live = mask.bool()
    lam = torch.as_tensor(lam, dtype=values.dtype, device=values.device).reshape(-1)
    lam = lam.expand(values.size(0)) if lam.numel() == 1 else lam
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    advantages = torch.zeros_like(values)
    for t in reversed(range(values.size(1))):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        advantages[:, t] = torch.where(live[:, t], advantage, torch.zeros_like(advantage))
        next_value = torch.where(live[:, t], values[:, t], next_value)
        next_advantage = torch.where(live[:, t], advantage, next_advantage)
    return advantages


def token_rewards(inputs: AdvantageInputs) -> Tensor:
    """r_{i,t}: −β·KL_t per token (kl_placement="reward") plus R_i + β Σ_t KL_t on the last masked token, (N, T).

    ``inputs.rewards`` already is R_i − β Σ_t KL_t, so Σ_t r_{i,t} = inputs.rewards_i.
    """
    mask = inputs.mask.to(inputs.rewards.dtype)
    penalty = torch.zeros_like(mask) if inputs.token_penalty is None else inputs.token_penalty.to(mask.dtype) * mask
    positions = torch.arange(mask.size(1), device=mask.device).expand_as(mask)
    last = (positions * mask).argmax(dim=1)
    rewards = -penalty
    rows = torch.arange(mask.size(0), device=mask.device)
    rewards[rows, last] += inputs.rewards + penalty.sum(dim=1)
    return rewards


def length_adaptive_lambda(lengths: Tensor, alpha: float) -> Tensor:
    """VAPO's λ_policy = 1 − 1/(α·ℓ), clamped to [0, 1] (ℓ ≤ 1/α gives 0), one per completion."""
    return (1.0 - 1.0 / (alpha * lengths.to(torch.float64))).clamp(0.0, 1.0)


def policy_lambda(inputs: AdvantageInputs, args) -> float | Tensor:
    """λ of the advantages: length-adaptive per completion with ``vapo_length_alpha``, else ``gae_lambda``."""
    if getattr(args, "vapo_length_alpha", None) is not None:
        return length_adaptive_lambda(inputs.lengths, args.vapo_length_alpha).to(inputs.rewards.dtype)
    return args.gae_lambda


def critic_lambda(inputs: AdvantageInputs, args) -> float | Tensor:
    """λ of the value targets: ``gae_lambda_critic``, or the policy's λ when it is None (coupled, classic PPO)."""
    if getattr(args, "gae_lambda_critic", None) is not None:
        return args.gae_lambda_critic
    return policy_lambda(inputs, args)


def checked_inputs(inputs: AdvantageInputs) -> AdvantageInputs:
    if inputs.values is None or inputs.mask is None:
        raise ValueError("gae needs the critic's values and the completion mask; pass values= and mask= (N, T).")
    return inputs


def policy_gae(inputs: AdvantageInputs, args) -> Tensor:
    """GAE(γ, λ_policy) token advantages before any whitening, (N, T)."""
    inputs = checked_inputs(inputs)
    values = inputs.values.to(inputs.rewards.dtype)
    return gae(token_rewards(inputs), values, inputs.mask, args.gae_gamma, policy_lambda(inputs, args))


# gae's own hyperparameters, GRPOConfig fields (config.TABLE_FIELDS); VAPO's options are options of gae. The
# critic's fields that any estimator declaring needs=("values",) gets (critic_model, value_coef, value_clip,
# value_learning_rate) are config/critic.py's.
GAMMA = PluginField("gae_gamma", float, 1.0, "GAE discount γ over completion tokens (advantage_estimator='gae')",
                    low=0, high=1)
LAMBDA = PluginField(
    "gae_lambda", float, 0.95,
    "GAE λ of the policy advantages: 0 is the one-step TD residual, 1 the Monte-Carlo return minus the value. "
    "Replaced per completion by the length-adaptive λ when vapo_length_alpha is set",
    low=0, high=1,
)
LAMBDA_CRITIC = PluginField(
    "gae_lambda_critic", float, None,
    "GAE λ of the value targets; None uses the policy's λ (classic PPO). VAPO decouples them with 1.0 (Monte-Carlo "
    "targets)",
    low=0, high=1,
)
WHITEN = PluginField("gae_whiten", bool, True,
                     "Whiten the GAE token advantages over the batch's completion tokens (mean 0, std 1).")
VALUE_WARMUP_STEPS = PluginField(
    "vapo_value_warmup_steps", int, 0,
    "VAPO value pre-training: the first N optimizer steps train only the critic, on Monte-Carlo returns (λ = 1); "
    "the policy loss is skipped. 0: none",
    low=0,
)
LENGTH_ALPHA = PluginField(
    "vapo_length_alpha", float, None,
    "VAPO length-adaptive GAE: λ_policy = 1 − 1/(α·ℓ) for a completion of ℓ tokens, clamped to [0, 1]. None keeps "
    "gae_lambda. VAPO: 0.05",
    low=0, low_open=True,
)
POSITIVE_NLL_COEF = PluginField(
    "vapo_positive_nll_coef", float, 0.0,
    "VAPO positive-example LM loss μ: adds μ · token-mean NLL of the completions whose task reward exceeds "
    "vapo_positive_reward_threshold. 0 disables it. VAPO: 0.1",
    low=0,
)
POSITIVE_REWARD_THRESHOLD = PluginField(
    "vapo_positive_reward_threshold", float, 0.5,
    "Task reward above which a completion counts as correct for the positive-example LM loss.",
)
FIELDS = (GAMMA, LAMBDA, LAMBDA_CRITIC, WHITEN, VALUE_WARMUP_STEPS, LENGTH_ALPHA, POSITIVE_NLL_COEF,
          POSITIVE_REWARD_THRESHOLD)


@ADVANTAGES.register(
    "gae",
    description="GAE(γ, λ) token advantages from a learned critic V(s_t) (LoRA adapter or value head); "
    "VAPO's decoupled and length-adaptive λ as options",
    source="GAE, Schulman et al. 2016 (arXiv:1506.02438); PPO; VAPO, arXiv:2504.05118",
    token_level=True,
    needs=("values",),
    fields=FIELDS,  # their ranges are the declarations'; the critic's shared fields are checked by config/critic.py
)
def gae_advantages(inputs: AdvantageInputs, args) -> Tensor:
    """Â_{i,t} = GAE(γ, λ)_{i,t} of row i alone, whitened over the batch's tokens with ``gae_whiten``. No group
    enters (the critic's V(s_t) is the baseline), so groups of unequal size (``group_sizes``) change nothing."""
    advantages = policy_gae(inputs, args)
    if getattr(args, "gae_whiten", True):
        advantages = whiten(advantages, inputs.mask, args.advantage_std_unbiased, args.advantage_epsilon)
    return advantages
