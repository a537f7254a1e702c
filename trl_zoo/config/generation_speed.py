"""The generation-speed axis: the LoRA adapter merged while TRL generates, generation under autocast or from a bf16
copy of the weights (components/decode_precision.py), compiled decoding, and `speed_recipe`, which sets them together
(config/speed_recipe.py). Their fields and what each cannot work with, refused when the config is built (naming the
recipe that set the field, if one did); what needs the model (a PEFT adapter, a quantized base, ZeRO-3, FSDP) is
refused by the trainer's components.

Tests: tests/test_autocast_generation.py, tests/test_speed_recipe.py, tests/test_decode_precision.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import transformers
from packaging.version import Version

from .fields import help_field
from .generation_buffer import generation_on_policy
from .speed_recipe import SPEED_RECIPES, refusal_words, set_by_recipe

# the first transformers whose StaticLayer allocates the values in their own dtype, not the keys'
MIXED_DTYPE_STATIC_CACHE_SINCE = Version("5.24")


def static_cache_fails_on_mixed_dtypes() -> bool:
    """Whether the installed transformers' static KV cache fails on the fp32 keys and bf16 values of autocast."""
    return Version(transformers.__version__).release < MIXED_DTYPE_STATIC_CACHE_SINCE.release


def refuse_conflicts(config, field: str, conflicts) -> None:
    """Raise a one-line ValueError for the first (setting, active, why) of `conflicts` that is active: the boolean
    `field` cannot work with that setting (naming the speed_recipe that set the field, if one did)."""
    label, fix = refusal_words(config, field, fix=f"set {field}=False")
    for name, active, why in conflicts:
        if active:
            raise ValueError(f"{label}: not with {name} ({why}); {fix}.")


def old_logps_skip_conflicts(config, requires_moe: bool) -> tuple:
    """(setting, active, why) under which skip_on_policy_old_logps cannot apply (`refuse_conflicts`); the second and
    third are the two halves of TRL's old-log-prob condition (config/generation_buffer.py)."""
    return (
        ("num_iterations > 1", config.num_iterations > 1,
         "later iterations train the batch after updates, and TRL's old log-probs of every row serve them"),
        ("gradient_accumulation_steps a multiple of steps_per_generation",
         config.num_iterations == 1 and generation_on_policy(config),
         "every micro-batch is on-policy, TRL computes no old log-probs"),
        ("teacher_model", config.teacher_model is not None, "the teacher signal reads every row's old log-probs"),
        ("kl_placement='reward'", config.kl_placement == "reward" and config.beta != 0,
         "the reward's KL penalty reads every row's old log-probs"),
        ("a loss on MoE routers", requires_moe, "old routers are recorded with TRL's old log-probs"),
    )


def old_logps_skip_applies(config, requires_moe: bool) -> bool:
    """Whether skip_on_policy_old_logps is on and no setting keeps it from applying."""
    return bool(config.skip_on_policy_old_logps) and not any(
        active for _, active, _ in old_logps_skip_conflicts(config, requires_moe)
    )


@dataclass
class GenerationSpeedFields:
    """Faster generation with the same completions (up to float rounding)."""

    speed_recipe: str | None = help_field(
        "Set the measured single-GPU LoRA speed-ups together (trl_zoo/config/speed_recipe.py). 'lora': "
        "merge_adapter_for_generation and steps_per_generation = 2 x gradient_accumulation_steps. 'lora_graphed' "
        "(recommended): also compile_generation with compile_generation_backend='cuda_graph' (no torch.compile), "
        "skip_on_policy_old_logps and fused_lora. 'lora_compiled': 'lora' with compile_generation and "
        "generation_autocast (fast only once torch's compile cache is warm; transformers >= 5.24). 'vllm' (with "
        "use_vllm=True): steps_per_generation = 2 x gradient_accumulation_steps, skip_on_policy_old_logps, "
        "fused_lora, compiled_layers and, colocated, vLLM's tokens without their text (generation_kwargs "
        "detokenize=False). Each one's time against TRL's: docs/benchmarks.md, 'Time to a target' (the lora "
        "recipes) and docs/vllm.md (vllm). A value you give for any of these fields wins (compiled_layers=False: "
        "the recipe without its compile).",
        None,
        choices=list(SPEED_RECIPES),
    )
    merge_adapter_for_generation: bool | None = help_field(
        "Merge the LoRA adapter into the base weights while TRL generates with model.generate (W + s·BA, one matmul "
        "per layer instead of three), then restore the base weights exactly. Same completions up to float rounding; "
        "needs a PEFT adapter, no vLLM, no quantized base, no ZeRO-3/FSDP. "
        "None: off unless speed_recipe sets it; a value you give wins.",
        None,
    )
    generation_autocast: bool | None = help_field(
        "Generate under the training forward's mixed precision (accelerate's autocast, bf16 or fp16). TRL generates "
        "outside autocast, so with float32 weights (TRL's default dtype) every decoding matmul runs in fp32 while the "
        "old log-probs and the loss run in bf16. Weights untouched; needs bf16 or fp16; not with vLLM or continuous "
        "batching. It pays off with compile_generation (measured: docs/benchmarks.md); that pair needs transformers "
        ">= 5.24. None: off unless speed_recipe sets it; a value you give wins.",
        None,
    )
    generation_bf16_copy: bool = help_field(
        "Generate from a bf16 copy of the weights, made when TRL starts generating and freed when it returns (with "
        "merge_adapter_for_generation, the adapter merged into the copy); the training weights are not written. "
        "TRL generates from float32 weights by default (its dtype field) while the rest of a bf16 step runs in bf16. "
        "Costs 2 bytes a weight while generating; needs bf16; not with vLLM or continuous batching; no quantized "
        "base, ZeRO-3 or FSDP (trl_zoo/components/decode_precision.py).",
        False,
    )
    compile_generation: bool | None = help_field(
        "Compile the decoding of TRL's model.generate with a static KV cache (transformers' compiled decoding, CUDA "
        "graphs on a GPU), which TRL turns off (disable_compile=True). The first generation batch pays the compile "
        "(less once torch's compile cache holds it), then decoding runs faster (measured: docs/benchmarks.md); not "
        "with vLLM or continuous batching; cache_implementation unset or 'static'. "
        "None: off unless speed_recipe sets it; a value you give wins.",
        None,
    )
    compile_generation_backend: str | None = help_field(
        "How compile_generation compiles: 'inductor' (transformers' default CompileConfig: generated kernels and CUDA "
        "graphs) or 'cudagraphs' (CUDA graphs of the traced decoding only, no kernel generation: a shorter compile, "
        "slower decoding than inductor's) or 'cuda_graph' (no torch.compile: trl_zoo records the decode step as a "
        "CUDA graph once per generation batch, one eager step and one recording, and replays it; eager on a CPU). "
        "Measured: docs/benchmarks.md. None: 'inductor' unless speed_recipe sets it; a value you give wins.",
        None,
        choices=["inductor", "cudagraphs", "cuda_graph"],
    )
    skip_on_policy_old_logps: bool | None = help_field(
        "Skip the half of TRL's old-log-prob pass that equals the policy's own log-probs. With steps_per_generation "
        "> gradient_accumulation_steps and num_iterations = 1, the micro-batches of the first optimizer step after "
        "a generation are trained with the weights that generated them, so their old log-probs are the policy's "
        "own (detached, ratio 1); only the later steps' micro-batches get old log-probs, computed right after "
        "generation, before any update (same forward as TRL's). Under vLLM's importance-sampling correction the "
        "first step's correction is computed in its loss forward (where π_old = π_θ), the later steps' with their "
        "old log-probs. Not with num_iterations > 1, a teacher_model, kl_placement='reward' or a MoE-router loss, "
        "which read every row's old log-probs, nor where TRL computes none (gradient_accumulation_steps a "
        "multiple of steps_per_generation): set by you, such a setting is refused in one line; set by a "
        "speed_recipe, the field then does nothing. None: off unless speed_recipe sets it; a value you give wins.",
        None,
    )

    def _check_old_logps_skip(self, requires_moe: bool) -> None:
        """skip_on_policy_old_logps set by the user with a setting under which it can never apply: one line. Set by
        a speed_recipe, it then silently does not apply (`old_logps_skip_applies`)."""
        if not self.skip_on_policy_old_logps or set_by_recipe(self, "skip_on_policy_old_logps"):
            return
        refuse_conflicts(self, "skip_on_policy_old_logps", old_logps_skip_conflicts(self, requires_moe))

    def _check_generation_speed_combinations(self) -> None:
        if self.compile_generation:
            refuse_conflicts(self, "compile_generation", (
                ("use_vllm", self.use_vllm, "vLLM compiles its own decoding"),
                ("use_transformers_continuous_batching", self.use_transformers_continuous_batching,
                 "set the compile options of transformers_continuous_batching_config instead"),
                ("cache_implementation", self.cache_implementation not in (None, "static"),
                 f"{self.cache_implementation!r} is not a compileable cache; leave it unset or use 'static'"),
            ))
        elif self.compile_generation_backend != "inductor":
            raise ValueError(
                f"compile_generation_backend={self.compile_generation_backend!r} has no effect without "
                f"compile_generation=True; set both or neither."
            )
        if self.generation_autocast:
            refuse_conflicts(self, "generation_autocast", (
                ("bf16=False and fp16=False", not (self.bf16 or self.fp16), "no mixed precision to generate under"),
                ("use_vllm", self.use_vllm, "vLLM generates in its own dtype"),
                ("use_transformers_continuous_batching", self.use_transformers_continuous_batching,
                 "TRL casts the model for continuous batching itself"),
                ("a static KV cache (compile_generation or cache_implementation='static')",
                 (self.compile_generation or self.cache_implementation == "static")
                 and static_cache_fails_on_mixed_dtypes(),
                 f"transformers < {MIXED_DTYPE_STATIC_CACHE_SINCE} allocates autocast's bf16 values in the fp32 keys' "
                 f"dtype and fails in index_copy_; upgrade transformers to >= {MIXED_DTYPE_STATIC_CACHE_SINCE}"),
            ))
        if self.generation_bf16_copy:
            refuse_conflicts(self, "generation_bf16_copy", (
                ("bf16=False", not self.bf16, "the copy decodes in the bf16 step's precision"),
                ("use_vllm", self.use_vllm, "vLLM generates in its own dtype"),
                ("use_transformers_continuous_batching", self.use_transformers_continuous_batching,
                 "TRL casts the model for continuous batching itself"),
            ))
        if self.merge_adapter_for_generation and self.use_vllm:
            label, fix = refusal_words(self, "merge_adapter_for_generation", fix="set one of them False")
            raise ValueError(f"{label}: not with use_vllm=True (TRL already syncs merged weights to vLLM); {fix}.")
