"""PPO's KL-penalty objective: TRPO's trust-region constraint as an adaptive penalty (PPO, arXiv:1707.06347, §4).

    J = (1/G) Σ_i (1/T_i) Σ_t [ r_{i,t}·Â_{i,t} − β·KL_t(π_old ‖ π_θ) ]        loss = −(r·Â − β·KL)   (no clip)

KL_t is the configured `kl_estimator` applied to the pair (π_old, π_θ), i.e. with d = log π_old − log π_θ:
k3 = r − 1 − log r (default; unbiased for KL(π_old‖π_θ) on samples of π_old, ≥ 0, zero gradient on-policy),
k2 = (log r)²/2, k1 = −log r.

β starts at `ppo_kl_beta` and adapts once per optimizer step from the token-mean KL measured over that whole
step (every micro-batch, every process): KL > 1.5·target → β ← 2β; KL < target/1.5 → β ← β/2
(target = `ppo_kl_target`; None keeps β fixed). β lives in the trainer's persistent state; the update is the
entry's `on_optimizer_step` hook, which the trainer calls once per optimizer step, after that step's last loss.
Only training forwards (log-probs that carry a gradient) count towards the measured KL.
"""

import torch
from accelerate import PartialState

from ..registry import KL_ESTIMATORS, LOSSES
from .base import PolicyBatch, PolicyTerm, ratio_metrics

BETA = "ppo_kl/beta"
KL_WINDOW = "ppo_kl/kl_window"  # tensor [Σ m·KL, Σ m] over the current optimizer step


def adapt_beta(state: dict, args) -> dict[str, float]:
    """Once per optimizer step: measure the step's KL, apply the doubling/halving rule, reset the window."""
    beta = state.setdefault(BETA, float(args.ppo_kl_beta))
    window = state.pop(KL_WINDOW, None)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        window = torch.zeros(2, device=PartialState().device) if window is None else window.clone()
        torch.distributed.all_reduce(window)
    if window is None or window[1] == 0:
        return {BETA: beta}
    kl = (window[0] / window[1]).item()
    target = args.ppo_kl_target
    if target is not None and kl > 1.5 * target:
        state[BETA] = beta * 2
    elif target is not None and kl < target / 1.5:
        state[BETA] = beta / 2
    return {BETA: beta, "ppo_kl/step_kl": kl}


@LOSSES.register(
    "ppo_kl",
    description="r·Â − β·KL(π_old‖π_θ), no clip; β doubles/halves around a target KL",
    source="PPO, arXiv:1707.06347",
    aggregation="sequence_mean",
    on_optimizer_step=adapt_beta,
    zero_advantage_is_inert=False,  # Â = 0 rows still carry the KL penalty and count in the measured KL
)
def ppo_kl_loss(batch: PolicyBatch, args) -> PolicyTerm:
    beta = batch.state.setdefault(BETA, float(args.ppo_kl_beta))
    kl_estimator = KL_ESTIMATORS.get(getattr(args, "kl_estimator", "k3")).obj
    kl = kl_estimator(batch.old_logps, batch.logps)
    if torch.is_grad_enabled() and batch.logps.requires_grad:  # a training forward
        step = torch.stack([(kl.detach() * batch.mask).sum(), batch.mask.sum().to(kl.dtype)])
        window = batch.state.get(KL_WINDOW)
        batch.state[KL_WINDOW] = step if window is None else window + step
    ratio = torch.exp(batch.log_ratio)
    metrics = {"ppo_kl/kl": kl.detach()}
    metrics.update(ratio_metrics(ratio))
    return PolicyTerm(-(ratio * batch.advantages - beta * kl), metrics)
