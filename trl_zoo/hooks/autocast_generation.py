"""Trainer hook: TRL's generation under the training forward's mixed precision (`generation_autocast`).

TRL computes the old log-probs and the loss under accelerate's autocast (`_get_per_token_logps_and_entropies`), but
generates outside it: `Trainer.training_step` calls `_prepare_inputs` before its autocast context, and accelerate's
autocast wrapper sits on the wrapped model's `forward`, which `model.generate` does not call. With float32 weights
(TRL's default `ModelConfig.dtype`) every decoding matmul therefore runs in fp32, while every other forward of the
step runs in bf16 (or fp16). With the field on, this layer runs TRL's `_generate_single_turn` inside
`accelerator.autocast()`:

    decoding:  fp32 weights, fp32 matmuls   →   fp32 weights, bf16 matmuls (the training forward's precision)

The weights are not touched (no copy, no cast in place); the sampler then computes at the precision of the old
log-probs and the loss. It is not the same computation (one token at a time with a KV cache against whole
sequences), so the sampled distribution still differs from the one the loss scores by rounding, as it does in fp32.
Compiled decoding (`compile_generation`) traces the decoding under the same autocast.

Measured (SmolLM2-135M with a merged LoRA adapter, 256 × 64 tokens, H200): compiled, the decoding takes 0.59 s in
bf16 against 1.07 s in fp32; eager decoding is launch-bound and autocast's casts make it slower (2.17 s against
2.00 s), so the field pays only with `compile_generation`. On the real-model task with the merge, two optimizer
steps per generation batch and a warm compile cache: 0.54× TRL's time to TRL's held-out accuracy, at TRL's peak
memory (benchmarks/results/2026-11-27-h200x2-time-to-target-6).

Refused when the config is built (`config.py`): without bf16 or fp16 (no mixed precision to apply), with vLLM (its
own dtype), with TRL's continuous batching (TRL casts the model for it itself), and with a static KV cache
(`compile_generation`, `cache_implementation="static"`) under transformers < 5.24: under autocast the keys leave
the rotary embedding in fp32 (the fp32 residual stream's cos/sin) while the values stay bf16, and those versions'
`StaticLayer` allocates both in the keys' dtype, so the first cache update fails in `index_copy_` (measured on an
H200 with transformers 5.17); 5.24 allocates each in its own dtype.

The config refuses that pair under such a transformers (`static_cache_fails_on_mixed_dtypes`,
config/generation_speed.py).

Tests: tests/test_autocast_generation.py.
"""

from __future__ import annotations


class AutocastGenerationMixin:
    """Wraps TRL's `_generate_single_turn` in `accelerator.autocast()` when `generation_autocast` is on."""

    def _generate_single_turn(self, *args, **kwargs):
        if not getattr(self.args, "generation_autocast", False):
            return super()._generate_single_turn(*args, **kwargs)
        with self.accelerator.autocast():
            return super()._generate_single_turn(*args, **kwargs)
