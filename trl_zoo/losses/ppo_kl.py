"""PPO's KL-penalty objective: TRPO's trust-region constraint as an adaptive penalty (PPO, arXiv:1707.06347, §4).

    J = (1/G) Σ_i (1/T_i) Σ_t [ r_{i,t}·Â_{i,t} − β·KL_t(π_old ‖ π_θ) ]        loss = −(r·Â − β·KL)   (no clip)

KL_t is the configured `kl_estimator` applied to the pair (π_old, π_θ), i.e. with d = log π_old − log π_θ:
k3 = r − 1 − log r (default; unbiased for KL(π_old‖π_θ) on samples of π_old, ≥ 0, zero gradient on-policy),
k2 = (log r)²/2, k1 = −log r.

β starts at `ppo_kl_beta` and adapts once per optimizer step from the token-mean KL measured over that whole
step (the logged `ppo_kl/kl` of every training micro-batch on every process): KL > 1.5·target → β ← 2β;
KL < target/1.5 → β ← β/2 (target = `ppo_kl_target`; None keeps β fixed; `kl.adaptive_kl_coefficient`). β lives
in the trainer's persistent state, which the loss only reads; the update is the entry's `on_optimizer_step` hook,
which the trainer calls once after every optimizer step with that step's measured means.

Tests: tests/test_losses_math.py (the β rule on the step's KL), tests/test_losses_train.py (β once per optimizer step),
tests/test_resume.py (β across a resume).
"""


from ..kl import adaptive_kl_coefficient
from ..registry import KL_ESTIMATORS, LOSSES
from ..specs import PluginField, check_clip_range
from .base import PolicyBatch, PolicyTerm, importance_ratio, ratio_metrics

BETA = "ppo_kl/beta"
MEASURED_KL = "ppo_kl/kl"  # the loss's metric whose token mean over the optimizer step drives β


def adapt_beta(state: dict, args, step_means: dict[str, float]) -> dict[str, float]:
    """Once per optimizer step: the doubling/halving rule on the step's measured KL (`step_means`)."""
    beta = state[BETA] = state.get(BETA, float(args.ppo_kl_beta))
    kl = step_means.get(MEASURED_KL)
    if kl is None:
        return {BETA: beta}
    if args.ppo_kl_target is not None:
        state[BETA] = adaptive_kl_coefficient(beta, kl, args.ppo_kl_target)
    return {BETA: beta, "ppo_kl/step_kl": kl}


FIELDS = (
    PluginField(
        "ppo_kl_beta", float, 1.0, "Initial penalty β of the ppo_kl loss (KL(π_old‖π_θ) penalty form).", low=0
    ),
    PluginField(
        "ppo_kl_target", float, 0.01,
        "Target KL of the ppo_kl loss; β doubles above 1.5·target and halves below target/1.5. None keeps β fixed.",
        low=0, low_open=True,
    ),
)


@LOSSES.register(
    "ppo_kl",
    description="r·Â − β·KL(π_old‖π_θ), no clip; β doubles/halves around a target KL",
    source="PPO, arXiv:1707.06347",
    aggregation="sequence_mean",
    on_optimizer_step=adapt_beta,
    zero_advantage_is_inert=False,  # Â = 0 rows still carry the KL penalty and count in the measured KL
    validate=check_clip_range,
    fields=FIELDS,
)
def ppo_kl_loss(batch: PolicyBatch, args) -> PolicyTerm:
    beta = batch.state.get(BETA, float(args.ppo_kl_beta))
    kl_estimator = KL_ESTIMATORS.get(getattr(args, "kl_estimator", "k3")).fn
    kl = kl_estimator(batch.old_logps, batch.logps)
    ratio = importance_ratio(batch.log_ratio)
    metrics = {MEASURED_KL: kl.detach()}
    metrics.update(ratio_metrics(ratio))
    return PolicyTerm(-(ratio * batch.advantages - beta * kl), metrics)
