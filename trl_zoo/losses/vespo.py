"""VESPO: a smooth Gamma weight on the sequence importance ratio (arXiv:2602.10693).

    w = Π_t r_t (clamped in log space),  φ(w) = e^λ · w^k · e^{−λw}   (φ(1) = 1; k, λ by the sign of Â)
    loss = −sg(φ(w)) · Â · log π_θ

φ is computed by TRL's own `GRPOTrainer.get_gamma_weights`, which also folds in the vLLM correction, so the
trainer does not multiply this loss by the sampling ratio again. Aggregated like DAPO.

Tests: tests/test_parity.py (against TRL's vespo), tests/test_hyperparameter_ranges.py (negative shapes refused),
tests/test_skip_zero_advantage.py.
"""

from ..registry import LOSSES
from ..specs import check_clip_range
from .base import PolicyBatch, PolicyTerm


def validate_vespo(args) -> None:
    """φ(w) = e^λ · w^k · e^{−λw} is a Gamma-shaped weight only for k ≥ 0 and λ ≥ 0: a negative k or λ makes it grow
    without bound as w moves away from 1."""
    check_clip_range(args)
    for name in ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"):
        if getattr(args, name) < 0:
            raise ValueError(f"{name}: must be ≥ 0 (φ(w) grows without bound otherwise), got {getattr(args, name)}.")


@LOSSES.register(
    "vespo",
    description="Gamma weight φ(w) of the sequence IS ratio × Â × log π (stop-grad weight)",
    source="VESPO, arXiv:2602.10693",
    aggregation="token_mean_global",
    applies_sampling_ratio=True,
    zero_advantage_is_inert=True,
    validate=validate_vespo,
)
def vespo_loss(batch: PolicyBatch, args) -> PolicyTerm:
    from trl import GRPOTrainer as TRLGRPOTrainer  # here: reading the loss table (`trl-zoo list`) imports no trainer

    phi = TRLGRPOTrainer.get_gamma_weights(
        advantages=batch.advantages,
        log_ratio_per_token=batch.log_ratio,
        mask=batch.mask,
        importance_sampling_ratio=batch.sampling_ratio,
        k_pos=args.vespo_k_pos,
        lambda_pos=args.vespo_lambda_pos,
        k_neg=args.vespo_k_neg,
        lambda_neg=args.vespo_lambda_neg,
    )
    return PolicyTerm(-phi * batch.advantages * batch.logps, {"vespo/phi_seq_mean": phi})
