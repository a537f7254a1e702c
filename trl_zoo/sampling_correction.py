"""vLLM's importance-sampling correction: the weight TRL puts on every token's loss under `use_vllm=True,
vllm_importance_sampling_correction=True` for the gap between vLLM's sampler and the trained model.

    δ_{i,t} = (log π_old(y_{i,t}) − log π_vLLM(y_{i,t})) · m_{i,t}        (NaN → 0: a token vLLM did not score)
    token_*:     w_{i,t} = exp(δ_{i,t})                                   shape (B, T)
    sequence_*:  w_i = exp(Σ_t δ_{i,t})                                   shape (B, 1)
    *_truncate:  w ← clamp(w, clip_min, clip_max)
    *_mask:      w ← 0 where w < clip_min or w > clip_max                 (a bound of None is no bound)

m is the loss mask: the completion mask times the tool mask of multi-turn rows (a tool's reply is not sampled;
`hooks/model_inputs.loss_mask`). TRL computes w inline at generation; trl_zoo computes it here where it defers the
correction: with `skip_on_policy_old_logps` under vLLM the first optimizer step's rows have π_old = π_θ, known only
in their loss forward (components/old_logps.py). The metrics are TRL's names over the rows at hand.

Tests: tests/test_old_logps_skip.py (the deferred correction against TRL's, every mode).
"""

from __future__ import annotations

import math

import torch

MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
METRICS = (
    "sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
    "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
    "sampling/importance_sampling_ratio/max",
)


def sampling_ratio(old_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor, args) -> torch.Tensor:
    """w of the module docstring, from the config's `vllm_importance_sampling_mode` and its clip bounds."""
    mode = args.vllm_importance_sampling_mode
    if mode not in MODES:
        raise ValueError(f"vllm_importance_sampling_mode: got {mode!r}; choose one of {', '.join(MODES)}.")
    delta = torch.nan_to_num((old_logps - sampling_logps) * mask, nan=0.0)
    if mode.startswith("sequence"):
        delta = delta.sum(dim=-1, keepdim=True)
    ratio = torch.exp(delta)
    low, high = args.vllm_importance_sampling_clip_min, args.vllm_importance_sampling_clip_max
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=low, max=high)
    low = -math.inf if low is None else low
    high = math.inf if high is None else high
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


def correction_metrics(old_logps, sampling_logps, mask, ratio, gather=lambda values: values) -> dict[str, float]:
    """TRL's five `sampling/…` metrics over these rows: |δ| mean and max on the scored tokens, w min, mean, max;
    `gather` stacks one row of the five per process (one host sync in all)."""
    kept = mask.bool()
    delta = (old_logps - sampling_logps).abs()[kept]
    delta = delta[~torch.isnan(delta)]
    weights = ratio[kept] if ratio.shape == mask.shape else ratio.flatten()

    def stat(values, reduce) -> torch.Tensor:
        return reduce(values) if values.numel() else values.new_zeros(())

    local = torch.stack([stat(delta, torch.mean), stat(delta, torch.max), stat(weights, torch.min),
                         stat(weights, torch.mean), stat(weights, torch.max)]).float()
    rows = gather(local.unsqueeze(0)).view(-1, 5)
    mean_delta, max_delta, min_w, mean_w, max_w = (
        rows[:, 0].mean(), rows[:, 1].max(), rows[:, 2].min(), rows[:, 3].mean(), rows[:, 4].max()
    )
    values = torch.stack([mean_delta, max_delta, min_w, mean_w, max_w]).tolist()
    return dict(zip(METRICS, values))
