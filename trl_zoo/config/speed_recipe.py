"""`speed_recipe`: one field that sets the single-GPU LoRA speed-ups together.

The fields a recipe sets are ordinary config fields; the recipe only fills them in before TRL derives its batch
sizes (`GRPOConfig.__post_init__`), so the config a run prints and saves shows them.

    "lora"            merge_adapter_for_generation = True
                      steps_per_generation = 2 · gradient_accumulation_steps   (when neither it nor
                                                                                generation_batch_size is given)
    "lora_graphed"    the same, and compile_generation = True, compile_generation_backend = "cuda_graph"
                      (the decode step recorded as a CUDA graph once per generation batch, components/decode_graph.py),
                      skip_on_policy_old_logps = True (the first step's old log-probs are the policy's own; where
                      it cannot apply, e.g. num_iterations > 1, it silently does not),
                      fused_lora = True (each plain LoRA layer in two matrix products; layers it cannot fuse are
                      left to peft)
    "lora_compiled"   "lora", and compile_generation = True, generation_autocast = True
    "vllm"            the vLLM path (use_vllm=True): steps_per_generation = 2 · gradient_accumulation_steps,
                      skip_on_policy_old_logps = True (vLLM's importance-sampling correction kept: the first step's
                      computed in its loss forward), and in colocate mode generation_kwargs["detokenize"] = False
                      (vLLM returns token ids alone, all TRL reads; a value the user gives wins), fused_lora = True
                      (where the policy has a PEFT adapter), compiled_layers = True (the decoder layers under
                      torch.compile in the training passes, where the base is not quantized nor sharded)

"vllm" takes two optimizer steps per generation batch like "lora" (the second off-policy); its other fields change
no sampled token and no importance-sampling ratio: only the text nobody reads and the old-log-prob forward of the
rows trained before any update are not computed, the LoRA layers' products run without elementwise passes and the
decoder layers' elementwise operations run fused (its first steps pay the compile).
Without use_vllm it is refused (the transformers path has the "lora" recipes).

The second optimizer step of a "lora" batch is off-policy (TRL's clipped importance ratio); "lora_compiled" pays
torch's compile on a first run (for long or repeated runs; transformers >= 5.24 and bf16 or fp16). What each costs
and gives: docs/benchmarks.md, "Time to a target".

On a CPU, "lora_compiled" warns in one line that torch's compile does not pay there, and names "lora";
"lora_graphed" runs its decode step eagerly there.

A value the user gives wins: for `steps_per_generation` or `generation_batch_size`, and for each field the recipe sets
(they default to None, which a recipe fills in and which otherwise means off; `speed_recipe="vllm",
compiled_layers=False` is the recipe without its compile).
A recipe that cannot work stops at the refusals of the fields it set, and those name the recipe and say "unset
speed_recipe" (`refusal_words`): the config's (vLLM; for the compiled fields continuous batching, no mixed
precision, a cache other than "static", transformers < 5.24) and the trainer's (no PEFT adapter, DoRA, ZeRO-3,
FSDP). On a quantized base (QLoRA) a recipe applies without the merge and, where transformers does not compile the
quantization (bitsandbytes), without compiled decoding, in one line (`components/generation_speed.py`). "lora" works
with TRL's continuous batching: the merge wraps both transformers generation paths.

Tests: tests/test_speed_recipe.py.
"""

from __future__ import annotations

import warnings

import torch

SPEED_RECIPES: dict[str, dict[str, bool | str]] = {
    "lora": {"merge_adapter_for_generation": True},
    "lora_graphed": {
        "merge_adapter_for_generation": True, "compile_generation": True, "compile_generation_backend": "cuda_graph",
        "skip_on_policy_old_logps": True, "fused_lora": True,
    },
    "lora_compiled": {"merge_adapter_for_generation": True, "compile_generation": True, "generation_autocast": True},
    "vllm": {"skip_on_policy_old_logps": True, "fused_lora": True, "compiled_layers": True},
}
# the fields recipes set, and what each is when neither the user nor the recipe gives it (they default to None)
RECIPE_FIELD_DEFAULTS: dict[str, bool | str] = {
    "merge_adapter_for_generation": False, "compile_generation": False, "compile_generation_backend": "inductor",
    "skip_on_policy_old_logps": False, "fused_lora": False, "compiled_layers": False, "generation_autocast": False,
}
VLLM_GENERATION_KWARGS = {"detokenize": False}  # what "vllm" adds to generation_kwargs (the user's keys win)
OPTIMIZER_STEPS_PER_GENERATION = 2  # steps_per_generation = 2 · gradient_accumulation_steps


def apply_speed_recipe(config) -> None:
    """Fill in the fields of `config.speed_recipe` the user left None, and every other recipe field still None with
    its default (`RECIPE_FIELD_DEFAULTS`), before TRL's `__post_init__` derives the batch sizes."""
    name = config.speed_recipe
    if name is not None and name not in SPEED_RECIPES:
        raise ValueError(f"speed_recipe: got {name!r}; choose one of {', '.join(map(repr, SPEED_RECIPES))} or None.")
    if name == "vllm":
        if not config.use_vllm:
            raise ValueError("speed_recipe='vllm': needs use_vllm=True (it speeds up TRL's vLLM generation); without "
                             "vLLM choose speed_recipe='lora_graphed'.")
        if config.vllm_mode == "colocate":  # the server's request path is vLLM's own: left as TRL sends it
            config.generation_kwargs = {**VLLM_GENERATION_KWARGS, **(config.generation_kwargs or {})}
    recipe = SPEED_RECIPES.get(name, {})
    for field, default in RECIPE_FIELD_DEFAULTS.items():
        if getattr(config, field) is None:
            setattr(config, field, recipe.get(field, default))
    if name is None:
        return
    if config.steps_per_generation is None and config.generation_batch_size is None:
        config.steps_per_generation = OPTIMIZER_STEPS_PER_GENERATION * config.gradient_accumulation_steps
    compiles = config.compile_generation and config.compile_generation_backend != "cuda_graph"
    if compiles and (config.use_cpu or not torch.accelerator.is_available()):
        warnings.warn(
            f"speed_recipe={name!r} on a CPU: compile_generation spends about a minute in torch's compile before the "
            f"first generation batch, which a CPU's decoding does not pay back; use speed_recipe='lora' there.",
            stacklevel=3,
        )


def set_by_recipe(args, field: str) -> bool:
    """Whether `args.speed_recipe` sets `field` and it holds the recipe's value (the one place that reads a recipe's
    fields after it was applied); a field the user turned off is theirs."""
    wanted = SPEED_RECIPES.get(getattr(args, "speed_recipe", None), {}).get(field)
    return bool(wanted) and getattr(args, field, None) == wanted


def refusal_words(args, field: str, fix: str = "set it False") -> tuple[str, str]:
    """How a refusal of the boolean `field` names it and the fix it names: with the recipe that set it and "unset
    speed_recipe", else the field alone and `fix`."""
    if set_by_recipe(args, field):
        return f"{field} (set by speed_recipe={args.speed_recipe!r})", "unset speed_recipe"
    return field, fix
