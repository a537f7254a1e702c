"""speed_recipe: the fields each recipe sets are those of the time-to-target contenders the README measured, a
steps_per_generation or generation_batch_size the user gives wins, a recipe that cannot work is refused in one line
naming it, and a LoRA run under the recipe trains two optimizer steps per generation batch with the adapter merged
while generating."""

from __future__ import annotations

import warnings

import pytest
from peft import LoraConfig

from benchmarks.time_to_target import CONTENDERS
from tests import tiny
from tests.trl_internals import buffered_micro_batches, replace_generate_and_score
from trl_zoo import GRPOConfig, GRPOTrainer
from trl_zoo.cli.arguments.train_arguments import parse_train_args
from trl_zoo.config import generation_speed
from trl_zoo.config.speed_recipe import RECIPE_FIELD_DEFAULTS, SPEED_RECIPES, set_by_recipe

RECIPE_FIELDS = ("merge_adapter_for_generation", "compile_generation", "compile_generation_backend",
                 "generation_autocast", "skip_on_policy_old_logps", "fused_lora", "compiled_layers",
                 "steps_per_generation",
                 "generation_batch_size")
# the recipe and the flags of the contenders of docs/benchmarks.md's table it stands for (fused_lora joined
# lora_graphed after that table; the size ladder measured it: docs/benchmarks.md)
MEASURED_AS = {
    "lora": CONTENDERS["merged_two_steps"],
    "lora_graphed": [*CONTENDERS["merged_cuda_graph_two_steps"], "--skip_on_policy_old_logps", "true",
                     "--fused_lora", "true"],
    "lora_compiled": CONTENDERS["merged_autocast_compiled_two_steps"],
}
needs_mixed_dtype_static_cache = pytest.mark.skipif(
    generation_speed.static_cache_fails_on_mixed_dtypes(),
    reason="generation_autocast with compiled decoding needs transformers >= 5.24",
)


def fields_of(training_args) -> dict:
    return {name: getattr(training_args, name) for name in RECIPE_FIELDS}


@pytest.mark.parametrize("recipe", [
    "lora", "lora_graphed", pytest.param("lora_compiled", marks=needs_mixed_dtype_static_cache),
])
def test_a_recipe_sets_the_fields_of_the_contender_it_was_measured_as(recipe, tmp_path):
    task = ["--task", "chat_arithmetic", "--output_dir", str(tmp_path / "run"), "--bf16", "true", "--use_cpu", "true"]
    _, by_recipe, _ = parse_train_args([*task, "--speed_recipe", recipe])
    _, by_flags, _ = parse_train_args([*task, *MEASURED_AS[recipe]])
    assert fields_of(by_recipe) == fields_of(by_flags)
    assert by_recipe.steps_per_generation == 2 * by_recipe.gradient_accumulation_steps == 8
    assert by_recipe.generation_batch_size == 2 * 128  # two optimizer steps of the task's 128 completions
    assert by_recipe.merge_adapter_for_generation


def test_recipes_set_only_their_listed_fields():
    plain = GRPOConfig(**tiny.config_kwargs(gradient_accumulation_steps=3))
    recipe = GRPOConfig(**tiny.config_kwargs(gradient_accumulation_steps=3, speed_recipe="lora"))
    changed = {name for name in RECIPE_FIELDS if getattr(plain, name) != getattr(recipe, name)}
    assert changed == {*SPEED_RECIPES["lora"], "steps_per_generation", "generation_batch_size"}
    assert (plain.steps_per_generation, recipe.steps_per_generation) == (3, 6)
    assert recipe.generation_batch_size == 2 * plain.generation_batch_size


@pytest.mark.parametrize("given, expected_steps", [
    ({"steps_per_generation": 3}, 3),
    ({"generation_batch_size": 8 * 3}, 3),  # 8 rows a micro-batch on one process
])
def test_a_steps_per_generation_or_generation_batch_size_the_user_gives_wins(given, expected_steps):
    config = GRPOConfig(**tiny.config_kwargs(gradient_accumulation_steps=2, speed_recipe="lora", **given))
    assert config.steps_per_generation == expected_steps and config.merge_adapter_for_generation


def test_a_field_the_user_gives_wins_over_the_recipe_and_unset_fields_are_off():
    config = GRPOConfig(**tiny.config_kwargs(speed_recipe="lora_graphed", fused_lora=False,
                                             compile_generation_backend="inductor"))
    assert config.fused_lora is False and config.compile_generation_backend == "inductor"  # the user's
    assert config.merge_adapter_for_generation and config.compile_generation and config.skip_on_policy_old_logps
    assert not set_by_recipe(config, "fused_lora") and set_by_recipe(config, "skip_on_policy_old_logps")
    plain = GRPOConfig(**tiny.config_kwargs())
    assert {name: getattr(plain, name) for name in RECIPE_FIELD_DEFAULTS} == RECIPE_FIELD_DEFAULTS
    assert {name for fields in SPEED_RECIPES.values() for name in fields} <= set(RECIPE_FIELD_DEFAULTS)
    _, parsed, _ = parse_train_args(["--task", "addition", "--speed_recipe", "lora_graphed", "--fused_lora", "false"])
    assert parsed.fused_lora is False and parsed.skip_on_policy_old_logps is True


@pytest.mark.parametrize("overrides, message", [
    ({"speed_recipe": "fast"},
     "speed_recipe: got 'fast'; choose one of 'lora', 'lora_graphed', 'lora_compiled', 'vllm' or None."),
    ({"speed_recipe": "vllm"},
     "speed_recipe='vllm': needs use_vllm=True (it speeds up TRL's vLLM generation); without vLLM choose "
     "speed_recipe='lora_graphed'."),
    ({"speed_recipe": "lora", "use_vllm": True},
     "merge_adapter_for_generation (set by speed_recipe='lora'): not with use_vllm=True (TRL already syncs merged "
     "weights to vLLM); unset speed_recipe."),
    ({"speed_recipe": "lora_compiled", "bf16": False, "fp16": False},
     "generation_autocast (set by speed_recipe='lora_compiled'): not with bf16=False and fp16=False (no mixed "
     "precision to generate under); unset speed_recipe."),
    ({"speed_recipe": "lora_compiled", "bf16": True, "cache_implementation": "dynamic"},
     "compile_generation (set by speed_recipe='lora_compiled'): not with cache_implementation ('dynamic' is not a "
     "compileable cache; leave it unset or use 'static'); unset speed_recipe."),
])
def test_a_recipe_that_cannot_work_is_one_line_naming_it(overrides, message):
    with pytest.raises(ValueError) as error:
        GRPOConfig(**tiny.config_kwargs(**overrides))
    assert str(error.value) == message


def test_a_field_set_by_hand_keeps_its_own_fix():
    with pytest.raises(ValueError) as error:
        GRPOConfig(**tiny.config_kwargs(merge_adapter_for_generation=True, use_vllm=True))
    assert str(error.value).startswith("merge_adapter_for_generation: not with use_vllm=True")
    assert str(error.value).endswith("; set one of them False.") and "speed_recipe" not in str(error.value)


def test_the_lora_recipe_works_with_continuous_batching():
    """The merge wraps both of TRL's transformers generation paths (the `merged_continuous_batching_bounded`
    contender ran them together), so the recipe does not refuse TRL's continuous batching."""
    config = GRPOConfig(**tiny.config_kwargs(speed_recipe="lora", use_transformers_continuous_batching=True))
    assert config.merge_adapter_for_generation and config.use_transformers_continuous_batching


def test_the_compiled_recipe_names_the_transformers_upgrade_where_it_fails(monkeypatch):
    import transformers

    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    refusal = (r"^generation_autocast \(set by speed_recipe='lora_compiled'\): not with a static KV cache .*"
               r"upgrade transformers to >= 5\.24\); unset speed_recipe\.$")
    with pytest.raises(ValueError, match=refusal):
        GRPOConfig(**tiny.config_kwargs(speed_recipe="lora_compiled", bf16=True))
    assert GRPOConfig(**tiny.config_kwargs(speed_recipe="lora")).merge_adapter_for_generation  # 'lora' still works


def test_without_an_adapter_the_trainer_names_the_recipe_and_its_fix():
    with pytest.raises(ValueError) as error:
        tiny.make_trainer(GRPOTrainer, GRPOConfig, speed_recipe="lora", max_steps=1)
    assert str(error.value) == (
        "merge_adapter_for_generation (set by speed_recipe='lora'): the policy has no PEFT adapter to merge; pass a "
        "peft_config or unset speed_recipe."
    )


def test_a_lora_run_under_the_recipe_generates_once_per_two_optimizer_steps_merged(monkeypatch):
    from trl_zoo.components import generation_speed

    merges = []
    real = generation_speed.merged_adapter

    def counted(peft_model, *copies):
        merges.append(peft_model)
        return real(peft_model, *copies)

    monkeypatch.setattr(generation_speed, "merged_adapter", counted)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    trainer = tiny.make_trainer(GRPOTrainer, GRPOConfig, peft_config=lora, speed_recipe="lora", max_steps=4,
                                per_device_train_batch_size=4, gradient_accumulation_steps=2)
    batches = []

    def counted_batches(inputs):
        batch = generate(inputs)
        batches.append(len(batch["completion_ids"]))
        return batch

    generate = replace_generate_and_score(trainer, counted_batches)
    trainer.train()
    assert trainer.state.global_step == 4
    assert batches == [16, 16]  # two generation batches of 2 steps × 2 micro-batches × 4 rows for 4 steps
    assert len(merges) == 2  # merged once per generation batch
    assert "old_per_token_logps" in buffered_micro_batches(trainer)[0]  # the second step is off-policy: TRL's ratio


@needs_mixed_dtype_static_cache
def test_the_compiled_recipe_on_a_cpu_says_in_one_line_that_compiling_does_not_pay_there():
    with pytest.warns(UserWarning) as warned:
        GRPOConfig(**tiny.config_kwargs(speed_recipe="lora_compiled", bf16=True))  # use_cpu=True
    assert [str(warning.message) for warning in warned if "speed_recipe" in str(warning.message)] == [
        "speed_recipe='lora_compiled' on a CPU: compile_generation spends about a minute in torch's compile before "
        "the first generation batch, which a CPU's decoding does not pay back; use speed_recipe='lora' there."
    ]
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        GRPOConfig(**tiny.config_kwargs(speed_recipe="lora_graphed"))  # compiles nothing
    assert not [warning for warning in warned if "speed_recipe" in str(warning.message)]


@pytest.mark.parametrize("given, expected", [
    (None, {"detokenize": False}),
    ({"min_tokens": 3}, {"detokenize": False, "min_tokens": 3}),
    ({"detokenize": True}, {"detokenize": True}),  # the user's key wins
])
def test_the_vllm_recipe_sets_two_steps_the_skip_and_no_text(given, expected):
    config = GRPOConfig(**tiny.config_kwargs(gradient_accumulation_steps=2, speed_recipe="vllm", use_vllm=True,
                                             generation_kwargs=given))
    assert config.steps_per_generation == 4 and config.skip_on_policy_old_logps and config.fused_lora
    assert config.compiled_layers
    assert config.vllm_importance_sampling_correction  # TRL's correction stays on
    assert config.generation_kwargs == expected
    assert not config.merge_adapter_for_generation and not config.compile_generation


def test_the_vllm_recipe_leaves_the_servers_sampling_parameters_as_trl_sends_them():
    config = GRPOConfig(**tiny.config_kwargs(speed_recipe="vllm", use_vllm=True, vllm_mode="server"))
    assert config.generation_kwargs is None and config.skip_on_policy_old_logps


def test_a_run_under_the_vllm_recipe_asks_vllm_for_no_text_and_skips_half_the_old_logps(monkeypatch, tmp_path):
    import math

    from tests import vllm_stand_in
    from trl_zoo.components.old_logps import ROWS

    stand_in = vllm_stand_in.install(monkeypatch)
    trainer = tiny.make_trainer(
        GRPOTrainer, GRPOConfig, use_vllm=True, vllm_mode="colocate", speed_recipe="vllm",
        per_device_train_batch_size=4, num_generations=4, gradient_accumulation_steps=2, max_steps=4,
        output_dir=str(tmp_path / "run"),
    )
    trainer.train()
    assert stand_in.detokenize == [False, False]  # two generation batches for four optimizer steps
    log = trainer.state.log_history
    assert all(math.isfinite(entry["loss"]) for entry in log if "loss" in entry)
    assert [entry[ROWS] for entry in log if ROWS in entry] == [8.0, 8.0]  # half of each batch's 16 rows
    ratios = [entry["sampling/importance_sampling_ratio/mean"] for entry in log
              if "sampling/importance_sampling_ratio/mean" in entry]
    assert len(ratios) == 2 and all(math.isfinite(value) for value in ratios)  # TRL's correction still applied
