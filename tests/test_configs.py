"""Every recipe in configs/ parses into trl_zoo's GRPOConfig through the CLI and trains for two steps.

The glob covers every file, whoever wrote it. Sizes are shrunk by flags (steps, batch, completion length) so each
recipe runs on the tiny local model in seconds; every other value must arrive in the config unchanged.
"""

from pathlib import Path

import pytest
import torch
import yaml
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from trl_zoo import LOSSES
from trl_zoo.cli.arguments.train_arguments import parse_train_args
from trl_zoo.cli.train.command import run_train

from . import tiny

CONFIGS = sorted((Path(__file__).resolve().parent.parent / "configs").glob("*.yaml"))


@pytest.fixture(scope="module")
def moe_model_dir(tmp_path_factory) -> str:
    """A tiny Qwen3-MoE saved locally, for losses that need router statistics."""
    tokenizer = tiny.tokenizer()
    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16, num_experts=4,
        num_experts_per_tok=2, max_position_embeddings=64, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_moe")
    Qwen3MoeForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def test_the_recipes_are_there():
    names = {path.stem for path in CONFIGS}
    assert {"grpo", "gspo", "gspo_token", "cispo", "sapo", "gmpo", "maxrl", "dppo", "topr", "m2po"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.stem)
def test_recipe_parses_and_trains(path, tmp_path, moe_model_dir):
    text = path.read_text()
    assert text.startswith("#"), "a recipe opens with a comment naming its source"
    recipe = yaml.safe_load(text)
    assert recipe["loss_type"] in LOSSES, LOSSES.unknown_message(recipe["loss_type"], "loss_type")
    needs_moe = LOSSES.get(recipe["loss_type"]).spec.requires_moe
    group = recipe.get("num_generations", 8)
    shrink = {
        "max_steps": 2,
        "per_device_train_batch_size": group,  # one prompt per step
        "max_completion_length": 4,
        "eval_every_steps": 2,
        "logging_steps": 1,
    }
    if recipe.get("overlong_buffer_length"):
        shrink["overlong_buffer_length"] = 2
    argv = ["--config", str(path), "--model_name_or_path", moe_model_dir if needs_moe else tiny.model_dir(),
            "--reward_funcs", "tests.tiny.digit_reward", "--output_dir", str(tmp_path), "--write_report", "false"]
    for key, value in shrink.items():
        argv += [f"--{key}", str(value)]
    task_args, training_args, model_args = parse_train_args(argv)

    for key, value in recipe.items():
        if key in shrink:
            continue
        parsed = getattr(training_args, key) if hasattr(training_args, key) else getattr(model_args, key)
        assert parsed == pytest.approx(value) if isinstance(value, float) else parsed == value, key

    summary = run_train(task_args, training_args, model_args, log=lambda *_: None)
    assert summary.steps == 2 and summary.loss_type == recipe["loss_type"]
