"""RSPO: router-shift policy optimisation for Mixture-of-Experts policies (arXiv:2510.23027; docs/formulas.md, RSPO).

GMPO's sign-aware log-space token clip and geometric mean (see `gmpo.py`), with each token also weighted by how
little its routing drifted between the policy that sampled it and the policy being trained:

    d_{i,t} = (1/L) Σ_ℓ (1/K) Σ_k | log p_φ^ℓ(e_k) − log p_φold^ℓ(e_k) |      e_k: old router's top-K at layer ℓ
    γ_{i,t} = sg( max( exp(−d_{i,t}), γ_min ) )                               γ_min = `rspo_gamma_min`
    S_i     = exp( (1/T_i) Σ_t m (δ̃_{i,t} + log γ_{i,t}) ) = ρ̄_i · Γ_i,      Γ_i = geometric mean of γ_{i,t}
    J       = (1/G) Σ_i S_i · Â_i                                             loss_i = −S_i · Â_i

Against the paper's formula S_i = [Π_t W_{i,t} γ_{i,t}]^{sgn(Â_i)/T_i}, ours differs in γ's exponent and fixes
where γ sits relative to the clip:

- γ's exponent for Â < 0. The paper's exponent −1/T_i would turn γ into 1/γ ≥ 1 and *amplify* the tokens whose
  routing drifted, the opposite of what γ is for. Here γ enters with exponent +1/T_i for both signs, so
  Γ_i ∈ [γ_min, 1] always shrinks the sequence's term and its gradient: ∇J_i = Γ_i · ∇J_i^GMPO. For Â > 0 the two
  agree.
- γ after the clip. δ̃ is GMPO's clipped log-ratio (range ±`gmpo_epsilon`) and log γ is added to it afterwards:
  γ is never clipped, and a damped token is not pulled back inside the clip range. Clipping the γ-weighted ratio
  instead would leave a token with a large drift and a ratio near the upper bound unclipped.

A drifted token damps its whole sequence by γ_{i,t}^{1/T_i} (the multiplicative, geometric-mean form); with γ ≡ 1
RSPO is exactly GMPO.

Inputs (in ``batch.extras``, (B, T, L, K) each, filled by the trainer's router hook):
``old_router_logps`` log p_φold^ℓ(e_k) recorded with the old policy's log-probs, and ``router_logps`` log p_φ^ℓ(e_k)
of the same experts captured during this loss's own forward. Without them the batch is on-policy (the trainer
records router statistics whenever TRL keeps old log-probs), and γ ≡ 1.
"""

import torch

from ..registry import LOSSES
from ..specs import PluginField
from .base import PolicyBatch, PolicyTerm, ratio_metrics
from .gmpo import EPSILON as GMPO_EPSILON
from .gmpo import clipped_log_ratio, geometric_mean_ratio, validate_gmpo
from .gspo import sequence_advantages


def router_shift_drift(router_logps: torch.Tensor, old_router_logps: torch.Tensor) -> torch.Tensor:
    """d_{i,t} = mean over layers and top-K experts of |log p_φ − log p_φold|, shape (B, T)."""
    return (router_logps - old_router_logps).abs().mean(dim=(-1, -2))


def router_shift_weight(batch: PolicyBatch, gamma_min: float) -> tuple[torch.Tensor, torch.Tensor]:
    """γ_{i,t} = max(exp(−d_{i,t}), γ_min), detached, 1 on masked positions; and where the floor binds (float)."""
    current, old = batch.extras.get("router_logps"), batch.extras.get("old_router_logps")
    if current is None and old is None:
        ones = torch.ones_like(batch.mask, dtype=batch.logps.dtype)
        return ones, torch.zeros_like(ones)
    if current is None or old is None:
        present = "old_router_logps" if current is None else "router_logps"
        missing = "router_logps" if current is None else "old_router_logps"
        raise ValueError(
            f"loss_type 'rspo': batch.extras has {present!r} but not {missing!r}; train with trl_zoo.GRPOTrainer, "
            f"which records both for Mixture-of-Experts models."
        )
    unfloored = torch.exp(-router_shift_drift(current.detach(), old.detach())).to(batch.logps.dtype)
    valid = batch.mask > 0
    gamma = torch.where(valid, unfloored.clamp(min=gamma_min), torch.ones_like(unfloored))
    at_floor = (valid & (unfloored <= gamma_min)).to(batch.logps.dtype)
    return gamma, at_floor


GAMMA_MIN = PluginField("rspo_gamma_min", float, 0.1, "RSPO: floor γ_min of the router-shift weight.", low=0, high=1,
                        low_open=True)


@LOSSES.register(
    "rspo",
    description="GMPO with each token weighted by its MoE router shift γ = exp(−mean |Δ log p_router|) ≥ γ_min",
    source="RSPO, arXiv:2510.23027",
    aggregation="sequence_mean",
    sequence_level=True,
    requires_moe=True,
    validate=validate_gmpo,  # GMPO's clip
    fields=(GMPO_EPSILON, GAMMA_MIN),
)
def rspo_loss(batch: PolicyBatch, args) -> PolicyTerm:
    clipped, is_clipped = clipped_log_ratio(batch, args.gmpo_epsilon)
    gamma, at_floor = router_shift_weight(batch, args.rspo_gamma_min)
    score = geometric_mean_ratio(clipped + torch.log(gamma), batch)
    metrics = {
        "clip_ratio/region_mean": is_clipped,
        "rspo/gamma_mean": gamma,
        "rspo/gamma_min": ("min", gamma),
        "rspo/gamma_floor_fraction": at_floor,
    }
    metrics.update(ratio_metrics(score, "rspo/sequence_score"))
    return PolicyTerm(-score * sequence_advantages(batch), metrics)
