"""IPO: prime-rl's RL loss (PrimeIntellect-ai/prime-rl, `ipo_loss_fn` in src/prime_rl/trainer/rl/loss.py, its
config `IPOLossConfig` in packages/prime-rl-configs/src/prime_rl/configs/trainer.py). prime-rl's documentation names
it "INTELLECT Policy Optimization"; it is an importance-ratio policy gradient with a two-sided trust region on the
token's probability, and no paper of its own.

With p = π_θ(y_t) (the trainer), q = π_infer(y_t) (the policy that sampled y_t), δ = log p − log q, r = e^δ:

    M_t = 1 if |p − q| ≤ ε, else 0      (sg: a mask, no gradient; masked on either side, whatever the sign of Â)

    loss_t = −M_t · r_t · Â_t + c · δ_t²        ∇ = −M r Â ∇log π + 2 c δ ∇log π

aggregated as the token sum over the batch's completion tokens divided by their count (`token_mean_global`;
prime-rl divides each sample's token sum by the all-reduced token count of the step). The policy term is weighted
by the unclipped ratio (its gradient is r·Â·∇log π, as sg(r)·Â·log π's would be); the trust region is the mask, not
a clip. The KL term acts on every token, masked or not, and pulls π_θ back towards the sampling policy. On-policy
p = q and δ = 0: nothing is masked, the KL gradient is 0, and the gradient is REINFORCE's under token_mean_global.

DPPO (`loss_type="dppo"`) has the same policy and KL terms but masks one-sidedly, by the sign of Â (docs/formulas.md,
"IPO", with prime-rl's history of the loss). The defaults are prime-rl's since 2026-09:
- `ipo_eps` = ε = 0.3 (prime-rl's `eps`), in (0, 1): a probability moves by less than 1.
- `ipo_kl_coef` = c = 0 (prime-rl's `kl_tau`; 1e-3 before 2026-09).
- prime-rl's `adv_tau` (a factor on Â, default 1) has no field: scale the rewards or the advantages instead.
Where this reading departs from prime-rl's code:
- q is π_old, the policy that generated the batch as the trainer recomputes it: TRL does not hand the inference
  engine's log-probs to the loss. Without vLLM the two are the same policy; under vLLM generation TRL's
  importance-sampling correction (π_old / π_vLLM) is applied on top by the trainer, so the mask measures staleness
  (π_θ against π_old), not the trainer/engine mismatch prime-rl measures with it. As for dppo.
- r is e^min(δ, 20) (trl_zoo's finite ratio, losses/base.py): prime-rl's is unclamped. Under the mask r > e^20 needs
  q < 0.3·e^-20 ≈ 6e-10; the two differ only there.
- prime-rl's optional per-token loss weights (its multi-component losses) are absent: every completion token has
  weight 1, prime-rl's plain RL run.

Tests: tests/test_ipo.py (closed form, the two-sided mask, the mask in the trainer, the sanity law, a transcription of
prime-rl's function on random tensors), tests/test_table_fields.py, tests/test_cli.py.
"""

import torch

from ..registry import LOSSES
from ..specs import PluginField, no_checks
from .base import PolicyBatch, PolicyTerm, masked_ratio_term, ratio_metrics

FIELDS = (
    PluginField(
        "ipo_eps", float, 0.3,
        "IPO: trust-region width ε on the token's probability: a token with |π_θ(y_t) − π_old(y_t)| > ε is masked "
        "from the policy term, on either side and whatever the sign of Â (prime-rl's eps, default 0.3).",
        low=0, high=1, low_open=True, high_open=True,
    ),
    PluginField(
        "ipo_kl_coef", float, 0.0,
        "IPO: coefficient of the per-token (log π_θ − log π_old)² added to every token's loss, masked or not "
        "(prime-rl's kl_tau: 0 by default since 2026-09, 1e-3 before).",
        low=0,
    ),
)


def outside_trust_region(batch: PolicyBatch, eps: float) -> torch.Tensor:
    """True where the token's probability moved by more than ε, up or down (bool, (B, T))."""
    with torch.no_grad():
        return (batch.logps.exp() - batch.old_logps.exp()).abs() > eps


@LOSSES.register(
    "ipo",
    description="mask tokens whose probability moved by more than ε either way (|π_θ − π_old| > ε); r·Â + c·(log r)²",
    source="prime-rl's IPO loss (PrimeIntellect-ai/prime-rl), its default since 2026-08",
    aggregation="token_mean_global",
    validate=no_checks,  # no clip range read; ε's and c's ranges are their fields'
    fields=FIELDS,
)
def ipo_loss(batch: PolicyBatch, args) -> PolicyTerm:
    masked = outside_trust_region(batch, args.ipo_eps)
    term, ratio, squared_log_ratio = masked_ratio_term(batch, masked, args.ipo_kl_coef)
    log_ratio = batch.log_ratio.detach()
    advantages = batch.advantages.expand_as(masked)
    metrics = {
        "ipo/masked_fraction": masked.float(),
        "ipo/masked_up_fraction": (masked & (log_ratio > 0)).float(),
        "ipo/masked_against_advantage_fraction": (masked & (advantages * log_ratio < 0)).float(),
        "ipo/squared_log_ratio": squared_log_ratio.detach(),
    }
    metrics.update(ratio_metrics(ratio))
    return PolicyTerm(term, metrics)
