"""vLLM's log-probs under truncated sampling (huggingface/trl#6789, open upstream in TRL 1.16).

TRL runs vLLM with `logprobs_mode="processed_logprobs"`: with `top_p < 1`, `top_k > 0` or `min_p > 0` the log-probs
vLLM returns are those of the truncated distribution, log(π(y_t)/S_t), S_t the probability mass of the tokens kept
at step t, while the trainer's are over the full vocabulary. Every log ratio log π_old − log π_vLLM then carries
log S_t ≤ 0 besides the engine/trainer mismatch it is there to measure: vLLM's importance-sampling correction scales
each token by S_t (top_k = 20 can keep a tenth of the mass), and the off-policy mask reads a KL shifted by −log S_t.

Refused here rather than corrected: renormalising the trainer's log-probs over vLLM's kept set needs, at every
completion token, the kept set itself (which vLLM does not return to TRL 1.16) or the full logits to rebuild it
(TRL's log-prob pass returns the chosen tokens' log-probs only, through its fused LM head); a rebuilt set differs
from vLLM's where a token sits at the cut (bf16 kernels against the trainer's); and the renormalised log-probs would
have to become π_old as well, which changes every loss's ratio and its parity with TRL. A user keeps truncated
sampling by turning the correction off, or the correction by sampling untruncated.

TRL's vLLM generation takes `top_p`, `top_k` and `min_p` from the config and lets `generation_kwargs` override them
(colocate: `SamplingParams(**{..., **generation_kwargs})`; server: the same dictionary, merged by the server); vLLM
reads `top_k` 0 or -1 and `min_p` 0 or None as off.

Tests: tests/test_vllm_paths.py (the stand-in's truncated sampling: the log-prob offset is log S_t; training with
the correction off), tests/test_validation.py (the refusals and the settings that pass).
"""

from __future__ import annotations

TRUNCATING_FIELDS = ("top_p", "top_k", "min_p")
UNTRUNCATED = "top_p=1.0, top_k=0, min_p=None"


def truncates(name: str, value) -> bool:
    """Whether the sampling setting `name` = `value` truncates vLLM's sampling distribution."""
    if value is None:
        return False
    if name == "top_p":
        return value < 1
    if name == "top_k":
        return value not in (0, -1)
    return value > 0  # min_p


def truncating_settings(config) -> list[str]:
    """The settings that truncate vLLM's sampling, as TRL hands them to vLLM: ["top_p=0.9",
    "generation_kwargs['top_k']=20"] (a `generation_kwargs` key overrides the field of that name)."""
    overrides = config.generation_kwargs if isinstance(config.generation_kwargs, dict) else {}
    settings = []
    for name in TRUNCATING_FIELDS:
        if name in overrides:
            label, value = f"generation_kwargs[{name!r}]", overrides[name]
        else:
            label, value = name, getattr(config, name)
        if truncates(name, value):
            settings.append(f"{label}={value!r}")
    return settings


def check_vllm_truncated_sampling(config) -> None:
    """Raise a one-line ValueError when vLLM samples from a truncated distribution and its log-probs feed the
    importance-sampling correction or the off-policy mask (module docstring)."""
    if not config.use_vllm:
        return
    readers = [
        name for name, active in (
            ("vllm_importance_sampling_correction=True", config.vllm_importance_sampling_correction),
            (f"off_policy_mask_threshold={config.off_policy_mask_threshold}",
             config.off_policy_mask_threshold is not None),
        ) if active
    ]
    settings = truncating_settings(config)
    if readers and settings:
        fixes = " and ".join(
            "vllm_importance_sampling_correction=False" if "correction" in reader else "off_policy_mask_threshold=None"
            for reader in readers
        )
        raise ValueError(
            f"{', '.join(settings)}: with use_vllm, vLLM returns log-probs renormalised over the tokens top_p/top_k/"
            f"min_p keep while the trainer's cover the full vocabulary, which biases {' and '.join(readers)} by the "
            f"kept probability mass (huggingface/trl#6789); set {fixes}, or sample untruncated ({UNTRUNCATED})."
        )
