"""LUFFY's mixed-policy loss (Yan et al., "Learning to Reason under Off-Policy Guidance", arXiv:2504.14945).

Each prompt's group of G holds N_off expert traces (off-policy rollouts, put there by the trainer's component,
`components/luffy.py`, from the dataset column `expert_column`) and G − N_off of the policy's own completions; the
advantages are the estimator's over the mixed group. Per token, with o the row's off-policy flag
(`batch.extras["off_policy"]`, (B,)):

    on-policy  (o = 0):  ℓ_t = −min(r_t·Â, clip(r_t, 1 − ε_low, 1 + ε_high)·Â)      r_t = π_θ(y_t) / π_old(y_t)
    off-policy (o = 1):  ℓ_t = −f(π_θ(y_t))·Â                                       f(p) = p / (p + γ)

"Policy shaping": the off-policy ratio π_θ/π_expert with π_expert taken as 1 (the traces carry no sampler
log-probabilities), regularised by f; ∇f = γ/(p + γ)² · ∇p re-weights the gradient towards the expert's
low-probability tokens. No clip and no old log-prob on the off-policy part. γ = `luffy_gamma` (the paper's and the
authors' script's 0.1, `p_div_p_0.1`); `luffy_clip=False` drops the on-policy clip too, as the authors' training
script does (`loss_remove_clip=True`), while the paper's objective keeps it (the default here).

Aggregation: the token mean over the batch (`token_mean_global`), the paper's 1/Z with Z the tokens of every
trace; the authors' script divides the micro-batch's token sum by the response width instead
(`loss_remove_token_mean=True`), nearest here `loss_aggregation="token_sum_over_max_length"`. A batch without the
flag (evaluation, or a row without an expert answer) is all on-policy: the loss is the clipped GRPO term.

The reference: ElliottYan/LUFFY, luffy/verl/verl/mix_src/mix_core_alg.py, `compute_token_on_off_policy_loss`
(`prefix_mask` the off-policy tokens, `target_probs=None`, `off_policy_reshape="p_div_p_0.1"`).

Tests: tests/test_luffy.py (against a transcription of the authors' loss, the mixed groups on a tiny model, a
training step).
"""

from __future__ import annotations

import torch

from ..registry import LOSSES
from ..specs import PluginField, check_clipped_objective
from .base import PolicyBatch, PolicyTerm, importance_ratio
from .ppo_clip import clipped_surrogate

OFF_POLICY = "off_policy"  # the per-row flag the component adds to the batch

GAMMA = PluginField(
    "luffy_gamma", float, 0.1,
    "LUFFY: γ of the policy shaping f(p) = p / (p + γ) of the expert tokens' probability (paper: 0.1).",
    low=0, low_open=True,
)
OFF_POLICY_ROWS = PluginField(
    "luffy_off_policy_rows", int, 1,
    "LUFFY: N_off, the completions of each prompt's group replaced by its expert trace from expert_column (paper: "
    "1 of 8); at most num_generations − 1.",
    low=1,
)
CLIP = PluginField(
    "luffy_clip", bool, True,
    "LUFFY: clip the on-policy ratio (the paper's objective); False drops the clip as the authors' training script "
    "does (loss_remove_clip=True). The off-policy part is never clipped.",
)

def check_luffy(args) -> None:
    """The settings LUFFY needs: the expert column, N_off < G, no vLLM (the traces have no sampler log-probs)."""
    if getattr(args, "luffy_clip", True):
        check_clipped_objective(args)
    if getattr(args, "expert_column", None) is None:
        raise ValueError("expert_column: loss_type='luffy' needs the dataset column of expert traces; name it.")
    generations = getattr(args, "num_generations", None)
    rows = getattr(args, "luffy_off_policy_rows", 1)
    if generations is not None and rows >= generations:
        raise ValueError(
            f"luffy_off_policy_rows: {rows} expert traces leave no on-policy completion in a group of "
            f"num_generations={generations}; use at most {generations - 1} (paper: 1 of 8)."
        )
    if getattr(args, "use_vllm", False):
        raise ValueError("use_vllm: not with loss_type='luffy' (the expert traces have no vLLM log-probs for TRL's "
                         "importance-sampling correction); generate with transformers.")


@LOSSES.register(
    "luffy",
    description="expert traces in each group: clipped r·Â on the policy's rows, f(π_θ)·Â, f(p) = p/(p+γ), on theirs",
    source="LUFFY, arXiv:2504.14945",
    aggregation="token_mean_global",
    zero_advantage_is_inert=True,
    validate=check_luffy,
    fields=(GAMMA, OFF_POLICY_ROWS, CLIP),
)
def luffy_loss(batch: PolicyBatch, args) -> PolicyTerm:
    advantages = batch.advantages
    ratio = importance_ratio(batch.log_ratio)
    if getattr(args, "luffy_clip", True):
        on_policy = clipped_surrogate(ratio, advantages, args)
    else:
        on_policy = PolicyTerm(-ratio * advantages)
    probs = batch.logps.exp()
    shaped = probs / (probs + args.luffy_gamma)
    flag = batch.extras.get(OFF_POLICY)
    if flag is None:
        return on_policy
    off = flag.to(torch.bool).reshape(-1, 1)
    loss = torch.where(off, -shaped * advantages, on_policy.loss)
    metrics = dict(on_policy.metrics)
    metrics["luffy/off_policy_token_fraction"] = off.to(probs.dtype).expand_as(probs)
    return PolicyTerm(loss, metrics)
