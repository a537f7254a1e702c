"""DPPO: a trust region by divergence, not by ratio (Qi et al., "Rethinking the Trust Region in LLM Reinforcement
Learning", arXiv:2602.04879), optionally with the squared-log-ratio KL to the behaviour policy that prime-rl's DPPO
added.

PPO's ratio clip over-constrains rare tokens (1e−5 → 1e−3 is a ratio of 100 but no real change of the
distribution) and under-constrains likely ones (0.99 → 0.8 is a ratio of 0.81, inside the clip, yet a large
shift of mass). DPPO masks a token when a divergence between π_θ and the behaviour policy μ = π_old at that token
leaves the region, in the direction its advantage pushes (one-sided by the sign of Â, like PPO's clip). With
p = π_θ(y_t), q = μ(y_t), δ = log p − log q, r = e^δ, the binary approximations of the paper (the distribution
collapsed to {y_t, everything else}):

    tv (DPPO-Binary-TV):  Â > 0: masked if p − q > ε_high        Â < 0: masked if p − q < −ε_low
    kl (DPPO-Binary-KL):  D = q·log(q/p) + (1 − q)·log((1 − q)/(1 − p))
                          Â > 0: masked if D > ε_high and p > q    Â < 0: masked if D > ε_low and p < q

    loss_t = −M_t · r_t · Â_t + c_KL · δ_t²        ∇ = −M r Â ∇log π + 2 c_KL δ ∇log π      (M = 1 − masked, sg)

The policy term is importance-weighted by the unclipped ratio (the paper's trust region is the mask, not a clip);
the KL term acts on every token, masked or not, and pulls π_θ back towards μ. On-policy p = q and δ = 0: nothing is
masked, the KL gradient is 0, and the gradient is REINFORCE's.

Defaults: the paper's (its verl scripts for Qwen3-30B-A3B), every one, so a bare `loss_type="dppo"` is its loss:
- `dppo_divergence="tv"`, the paper's main variant (DPPO-Binary-TV); `dppo_mask_low/high` the paper's thresholds,
  0.15 for tv and 0.05 for kl; `dppo_kl_coef` = c_KL = 0 (the paper's DPPO has no KL term).
- Dr. GRPO's normaliser, the token sum over G · max_completion_length (`token_sum_over_max_length`), as the paper's
  runs; configs/dppo.yaml adds the rest of its recipe (Dr. GRPO's advantages, 16 completions, 8 updates per rollout).
- μ is π_old, the policy that generated the batch, recomputed by the trainer (the paper's "recompute" variant);
  under vLLM TRL's importance-sampling correction is applied on top. r is uncapped.
prime-rl's DPPO settings, IPO (`loss_type="ipo"`, losses/ipo.py, its two-sided mask), the paper's "bypass mode" and
the authors' ratio cap: docs/formulas.md, "DPPO".

Tests: tests/test_losses_math.py (TV and KL masks, thresholds, KL term), tests/test_losses_train.py (the mask in the
trainer), tests/test_validation.py, tests/test_table_fields.py.
"""

import torch

from ..registry import LOSSES
from ..specs import PluginField
from .base import PolicyBatch, PolicyTerm, masked_ratio_term, ratio_metrics

PAPER_THRESHOLDS = {"tv": 0.15, "kl": 0.05}
_EPS = 1e-8  # inside the logs of 1 − p, as in the authors' code

FIELDS = (
    PluginField(
        "dppo_divergence", str, "tv",
        "DPPO: the divergence between π_θ and π_old at each token that defines the trust region: 'tv' (binary total "
        "variation, p − q; the paper's main variant) or 'kl' (binary KL).",
        choices=tuple(PAPER_THRESHOLDS),
    ),
    PluginField(
        "dppo_mask_low", float, None,
        "DPPO: threshold ε_low for tokens with Â < 0 (masked once their probability fell that far: p − q < −ε_low, "
        "or binary KL > ε_low with p < q). None: the paper's value for dppo_divergence, 0.15 (tv) or 0.05 (kl).",
        low=0, low_open=True,
    ),
    PluginField(
        "dppo_mask_high", float, None,
        "DPPO: threshold ε_high for tokens with Â > 0 (masked once p − q > ε_high, or binary KL > ε_high with p > q). "
        "None: dppo_mask_low's value.",
        low=0, low_open=True,
    ),
    PluginField(
        "dppo_kl_coef", float, 0.0,
        "DPPO: coefficient of the per-token (log π_θ − log π_old)² added to every token's loss (prime-rl's DPPO "
        "had 1e-3, its kl_tau). 0: the paper's loss, which has no KL term.",
        low=0,
    ),
)


def mask_thresholds(args) -> tuple[float, float]:
    """(ε_low, ε_high): as configured, else the paper's for the divergence; ε_high defaults to ε_low."""
    low = args.dppo_mask_low if args.dppo_mask_low is not None else PAPER_THRESHOLDS[args.dppo_divergence]
    high = args.dppo_mask_high if args.dppo_mask_high is not None else low
    return low, high


def outside_trust_region(batch: PolicyBatch, divergence: str, low: float, high: float) -> torch.Tensor:
    """True where the token left the region in the direction its advantage pushes (bool, (B, T))."""
    with torch.no_grad():
        p, q = batch.logps.exp(), batch.old_logps.exp()
        if divergence == "tv":
            up, down = p - q > high, p - q < -low
        else:
            kl = q * (batch.old_logps - batch.logps) + (1 - q) * (torch.log(1 - q + _EPS) - torch.log(1 - p + _EPS))
            up, down = (kl > high) & (p > q), (kl > low) & (p < q)
        advantages = batch.advantages.expand_as(p)
        return torch.where(advantages > 0, up, torch.where(advantages < 0, down, torch.zeros_like(up)))


def validate_dppo(args) -> None:
    """Beyond the fields' own ranges: a TV threshold below 1 (a binary KL can exceed 1)."""
    for name in ("dppo_mask_low", "dppo_mask_high"):
        value = getattr(args, name)
        if args.dppo_divergence == "tv" and value is not None and value >= 1:
            raise ValueError(
                f"{name}: a probability moves by less than 1, so a TV threshold of {value} never masks a token; use a "
                f"value in (0, 1) (paper: 0.15)."
            )


@LOSSES.register(
    "dppo",
    description="trust region by divergence: mask tokens whose binary TV/KL to π_old leaves it; r·Â + c·(log r)²",
    source="DPPO, arXiv:2602.04879; prime-rl's default loss until 2026-08",
    aggregation="token_sum_over_max_length",
    validate=validate_dppo,
    fields=FIELDS,
)
def dppo_loss(batch: PolicyBatch, args) -> PolicyTerm:
    low, high = mask_thresholds(args)
    masked = outside_trust_region(batch, args.dppo_divergence, low, high)
    term, ratio, squared_log_ratio = masked_ratio_term(batch, masked, args.dppo_kl_coef)
    advantages = batch.advantages.expand_as(masked)
    metrics = {
        "dppo/masked_fraction": masked.float(),
        "dppo/masked_high_fraction": (masked & (advantages > 0)).float(),
        "dppo/masked_low_fraction": (masked & (advantages < 0)).float(),
        "dppo/squared_log_ratio": squared_log_ratio.detach(),
    }
    metrics.update(ratio_metrics(ratio))
    return PolicyTerm(term, metrics)
