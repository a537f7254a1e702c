"""KL-Cov: a KL penalty on the highest-covariance tokens instead of a clip
(The Entropy Mechanism of RL for Reasoning LMs, arXiv:2505.22617).

    Cov_t = (log π_θ(y_t) − mean log π_θ) · (Â_t − mean Â)       means over the masked tokens of the micro-batch
    I_KL  = the max(⌊kl_cov_ratio · N⌋, 1) masked tokens with the largest Cov_t   (N = masked tokens)
    loss_t = −r_t·Â_t + [t ∈ I_KL] · kl_cov_coef · | log π_θ(y_t) − log π_old(y_t) |          (no clip anywhere)

The penalty is |log r|, as in the paper's reference code (verl's `kl_cov`, "abs_kl"), not the k2 form (log r)²/2;
it pulls a selected token back towards π_old with a constant-size force. Its gradient is 0 at r = 1 (on-policy),
where the loss is REINFORCE's. `kl_cov/selected_fraction` logs |I_KL| / N.

Tests: tests/test_losses_math.py (selected tokens and their |log r| penalty), tests/test_skip_zero_advantage.py
(refused), tests/test_validation.py.
"""

import torch

from ..registry import LOSSES
from ..specs import PluginField, check_clip_range
from .base import PolicyBatch, PolicyTerm, importance_ratio, ratio_metrics
from .clip_cov import first_by_rank, token_count, token_covariance


def top_covariance_tokens(batch: PolicyBatch, fraction: float) -> torch.Tensor:
    """Boolean (B, T): the max(⌊fraction · N⌋, 1) masked tokens with the largest covariance."""
    valid = batch.mask > 0
    count = torch.minimum(token_count(batch.mask, fraction).clamp(min=1), valid.sum())
    scores = token_covariance(batch).masked_fill(~valid, float("-inf"))
    return first_by_rank(scores, count) & valid


FIELDS = (
    PluginField("kl_cov_ratio", float, 2e-3, "KL-Cov: fraction of tokens (top covariance) that get the KL penalty.",
                low=0, high=1, low_open=True),
    PluginField("kl_cov_coef", float, 1.0, "KL-Cov: coefficient of the per-token |log r| penalty on selected tokens.",
                low=0),
)


@LOSSES.register(
    "kl_cov",
    description="−r·Â, plus a |log r| penalty on the top-covariance tokens (no clip)",
    source="The Entropy Mechanism of RL for Reasoning LMs, arXiv:2505.22617",
    aggregation="token_mean_global",
    zero_advantage_is_inert=False,  # Â = 0 rows shift the covariance means and so the selection
    validate=check_clip_range,
    fields=FIELDS,
)
def kl_cov_loss(batch: PolicyBatch, args) -> PolicyTerm:
    ratio = importance_ratio(batch.log_ratio)
    selected = top_covariance_tokens(batch, args.kl_cov_ratio)
    penalty = args.kl_cov_coef * batch.log_ratio.abs()
    loss = -ratio * batch.advantages + torch.where(selected, penalty, 0.0)
    metrics = {"kl_cov/selected_fraction": selected.float(), "kl_cov/abs_log_ratio": batch.log_ratio.abs().detach()}
    metrics.update(ratio_metrics(ratio))
    return PolicyTerm(loss, metrics)
