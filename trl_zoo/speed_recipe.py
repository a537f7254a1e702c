"""`speed_recipe`: one field that sets the measured single-GPU LoRA speed-ups together.

The fields a recipe sets are ordinary config fields; the recipe only fills them in before TRL derives its batch
sizes (`GRPOConfig.__post_init__`), so the config a run prints and saves shows them.

    "lora"            merge_adapter_for_generation = True
                      steps_per_generation = 2 · gradient_accumulation_steps   (when neither it nor
                                                                                generation_batch_size is given)
    "lora_compiled"   the same, and compile_generation = True, generation_autocast = True

What they cost and gave (real-model task: SmolLM2-135M-Instruct with LoRA r 16, 128 completions a step; time to
90 % of TRL's 40-step held-out gain, × TRL's on the same card, median (range) over 4 seeds, 2 × H200, peak memory
equal to TRL's; README, "Time to TRL's accuracy"):

    "lora"            0.62 (0.55–0.69)   the LoRA adapter merged while TRL generates; two optimizer steps per
                                         generation batch, the second off-policy (TRL's clipped importance ratio)
    "lora_compiled"   0.54 (0.51–0.66)   with torch's compile cache warm (a machine's second run); 0.87
                                         (0.76–1.10) on a first run, which pays ~40 s compiling: for long or
                                         repeated runs. Needs transformers >= 5.24 and bf16 or fp16.

A value the user gives for `steps_per_generation` or `generation_batch_size` wins; the boolean fields are set on.
Refused (one line naming `speed_recipe`) where a recipe cannot work from the config alone: vLLM (it generates with
its own engine and weights), TRL's continuous batching, and for "lora_compiled" no mixed precision, a cache
implementation other than "static", or transformers < 5.24. What needs the model (a PEFT adapter, an unquantized
base, no ZeRO-3 or FSDP) is refused by the trainer, naming the recipe (hooks/merged_generation.py).

Tests: tests/test_speed_recipe.py.
"""

from __future__ import annotations

SPEED_RECIPES: dict[str, dict[str, bool]] = {
    "lora": {"merge_adapter_for_generation": True},
    "lora_compiled": {"merge_adapter_for_generation": True, "compile_generation": True, "generation_autocast": True},
}
OPTIMIZER_STEPS_PER_GENERATION = 2  # steps_per_generation = 2 · gradient_accumulation_steps


def apply_speed_recipe(config) -> None:
    """Fill in the fields of `config.speed_recipe` (before TRL's `__post_init__` derives the batch sizes); raise
    one line for a recipe that cannot work with the config's other fields."""
    name = config.speed_recipe
    if name is None:
        return
    if name not in SPEED_RECIPES:
        raise ValueError(f"speed_recipe: got {name!r}; choose one of {', '.join(map(repr, SPEED_RECIPES))} or None.")
    refusal = recipe_refusal(config)
    if refusal:
        raise ValueError(refusal)
    for field, value in SPEED_RECIPES[name].items():
        setattr(config, field, value)
    if config.steps_per_generation is None and config.generation_batch_size is None:
        config.steps_per_generation = OPTIMIZER_STEPS_PER_GENERATION * config.gradient_accumulation_steps


def recipe_refusal(config) -> str | None:
    """Why `config.speed_recipe` cannot work with the config's other fields, or None."""
    from .hooks.autocast_generation import MIXED_DTYPE_STATIC_CACHE_SINCE, static_cache_fails_on_mixed_dtypes

    name = config.speed_recipe
    if config.use_vllm:
        return (f"speed_recipe={name!r}: not with use_vllm=True (vLLM generates with its own engine and weights); "
                f"unset one of them.")
    if config.use_transformers_continuous_batching:
        return (f"speed_recipe={name!r}: not with use_transformers_continuous_batching=True (it merges nothing and "
                f"compiles by its own config); unset one of them.")
    if name == "lora_compiled":
        bf16 = not config.fp16 if config.bf16 is None else config.bf16  # TRL's default, set in its __post_init__
        if not (bf16 or config.fp16):
            return ("speed_recipe='lora_compiled': decodes under bf16 or fp16 autocast, but bf16 and fp16 are both "
                    "False; set one of them True, or use speed_recipe='lora'.")
        if config.cache_implementation not in (None, "static"):
            return (f"speed_recipe='lora_compiled': compiles the decoding with a static KV cache, but "
                    f"cache_implementation={config.cache_implementation!r}; leave it unset, or use "
                    f"speed_recipe='lora'.")
        if static_cache_fails_on_mixed_dtypes():
            return (f"speed_recipe='lora_compiled': compiled decoding under autocast needs transformers >= "
                    f"{MIXED_DTYPE_STATIC_CACHE_SINCE}; upgrade transformers, or use speed_recipe='lora'.")
    return None


def refusal_words(args, field: str) -> tuple[str, str]:
    """How a refusal of `field` names it and the fix it names: with the recipe that set it and "unset
    speed_recipe", else the field alone and "set it False"."""
    recipe = getattr(args, "speed_recipe", None)
    if recipe is not None and field in SPEED_RECIPES.get(recipe, {}):
        return f"{field} (set by speed_recipe={recipe!r})", "unset speed_recipe"
    return field, "set it False"
