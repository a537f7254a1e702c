"""A learned critic V(s_t): the value head, the value targets, the clipped value loss (PPO, VAPO).

V(s_t) is read from the last hidden state that also predicts y_t; the token rewards r_t and GAE(γ, λ) are the gae
estimator's (`trl_zoo/advantages/gae.py`), which reads V at generation time.

    R̂_t  = GAE_{λ_critic}(r, V)_t + V(s_t)                              value targets (returns)
    ℓ^V_t = ½·max( (V_t − R̂_t)²,  (clip(V_t, V_old,t − ε_v, V_old,t + ε_v) − R̂_t)² )   clipped value loss
    L^V  = Σ_{i,t} m_{i,t} ℓ^V_{i,t} / Σ_{i,t} m_{i,t}                  masked token mean, times value_coef

V_old is the critic at generation time (no grad); it builds δ and R̂ and anchors the clip. Terminal reward and
γ = 1 give R̂_t = G_t = R_i at every token for λ_critic = 1.

VAPO (Yue et al. 2025, arXiv:2504.05118) adds, each an option of gae (its fields are declared there):

- decoupled λ: λ_critic = 1 for the targets (unbiased), λ_policy for the advantages (``gae_lambda_critic``);
- value pre-training: the first N optimizer steps train the critic alone on Monte-Carlo returns (λ = 1);
- a positive-example LM loss μ·L_NLL, L_NLL = −Σ_{i∈T} Σ_t m log π_θ(y_{i,t}) / Σ_{i∈T} Σ_t m over the completions
  T whose task reward exceeds a threshold.

The critic itself (its weights, value passes, loss, optimizer group) is `trl_zoo/components/value_model.py`; the
trainer calls it from `trl_zoo/components/critic.py`.

Tests: tests/test_critic.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .advantages import AdvantageInputs
from .advantages.gae import checked_inputs, critic_lambda, gae, token_rewards

Tensor = torch.Tensor


class ValueHead(nn.Module):
    """V(h) = w·h + b, or w·gelu(W h + c) + b with one hidden layer; w = 0 and b = 0 at start, so V ≡ 0."""

    def __init__(self, hidden_size: int, hidden_layers: int = 0):
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(hidden_layers):
            layers += [nn.Linear(hidden_size, hidden_size), nn.GELU()]
        output = nn.Linear(hidden_size, 1)
        nn.init.zeros_(output.weight)
        nn.init.zeros_(output.bias)
        self.layers = nn.Sequential(*layers, output)

    def forward(self, hidden_states: Tensor) -> Tensor:
        """(B, T, H) → (B, T)."""
        return self.layers(hidden_states).squeeze(-1)


def value_targets(inputs: AdvantageInputs, args, lam: float | Tensor | None = None) -> Tensor:
    """R̂_t = GAE(γ, λ)_t + V_old(s_t) with λ = ``lam`` or the critic's λ; 0 outside the mask, NaN rows stay NaN."""
    inputs = checked_inputs(inputs)
    values = inputs.values.to(inputs.rewards.dtype)
    lam = critic_lambda(inputs, args) if lam is None else lam
    returns = gae(token_rewards(inputs), values, inputs.mask, args.gae_gamma, lam) + values
    return torch.where(inputs.mask.bool(), returns, torch.zeros_like(returns))


# ---------------------------------------------------------------------------------------------------- losses
@dataclass
class ValueLoss:
    """The clipped value loss of a micro-batch and what is logged about it."""

    loss: Tensor  # scalar, ½ · masked token mean of the per-token max
    clip_fraction: Tensor  # share of tokens where the clipped branch is the larger (its gradient is 0)
    mean_value: Tensor  # masked mean of V


def clipped_value_loss(
    values: Tensor, old_values: Tensor, targets: Tensor, mask: Tensor, clip: float | None
) -> ValueLoss:
    """½·max((V − R̂)², (clip(V, V_old ± ε_v) − R̂)²), masked token mean; ``clip=None`` is ½(V − R̂)².

    Tokens whose target is not finite (unscorable completions) are left out of the mean.
    """
    mask = mask.bool() & torch.isfinite(targets)
    targets = torch.nan_to_num(targets, nan=0.0, posinf=0.0, neginf=0.0).to(values.dtype)
    unclipped = (values - targets) ** 2
    if clip is None:
        per_token, clipped_wins = unclipped, torch.zeros_like(mask)
    else:
        old_values = old_values.to(values.dtype)
        clipped_values = old_values + (values - old_values).clamp(-clip, clip)
        clipped = (clipped_values - targets) ** 2
        per_token, clipped_wins = torch.maximum(unclipped, clipped), clipped > unclipped
    weights = mask.to(values.dtype)
    count = weights.sum().clamp(min=1.0)
    return ValueLoss(
        loss=0.5 * (per_token * weights).sum() / count,
        clip_fraction=((clipped_wins & mask).to(values.dtype).sum() / count).detach(),
        mean_value=((values * weights).sum() / count).detach(),
    )


def explained_variance(values: Tensor, targets: Tensor, mask: Tensor) -> float:
    """1 − Var(R̂ − V) / Var(R̂) over the masked tokens with finite targets; NaN when Var(R̂) = 0."""
    selected = mask.bool() & torch.isfinite(targets)
    returns, predictions = targets[selected].double(), values[selected].double()
    if returns.numel() < 2:
        return float("nan")
    variance = returns.var(unbiased=False)
    if variance == 0:
        return float("nan")
    return float(1.0 - (returns - predictions).var(unbiased=False) / variance)


def positive_example_nll(logps: Tensor, mask: Tensor, positive: Tensor) -> Tensor:
    """−Σ_{i∈T} Σ_t m log π(y_{i,t}) / Σ_{i∈T} Σ_t m, T the rows with ``positive``; 0 (in the graph) when T is
    empty."""
    weights = mask.to(logps.dtype) * positive.to(logps.dtype).reshape(-1, 1)
    return -(logps * weights).sum() / weights.sum().clamp(min=1.0)
