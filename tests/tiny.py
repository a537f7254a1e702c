"""Shared test fixtures: a tiny local model, a prompt dataset and a reward with spread. No hub access."""

from __future__ import annotations

import functools
import os
import tempfile

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM

from trl_zoo.dataset_values import REFERENCE_REWARDS
from trl_zoo.registry import LOSSES
from trl_zoo.tasks.tiny import build_char_tokenizer, build_tiny_causal_lm

TEST_OUTPUT_DIR = os.path.join(tempfile.gettempdir(), "trl_zoo_test_runs")


@functools.lru_cache(maxsize=1)
def tokenizer():
    return build_char_tokenizer()


@functools.lru_cache(maxsize=4)
def model_dir(seed: int = 0) -> str:
    """A tiny random Qwen2 model saved locally, so it loads by path like a hub model would by name."""
    path = tempfile.mkdtemp(prefix=f"trl_zoo_tiny_{seed}_")
    build_tiny_causal_lm(tokenizer(), hidden_size=32, num_layers=2, num_heads=2, seed=seed).save_pretrained(path)
    tokenizer().save_pretrained(path)
    return path


def model(seed: int = 0):
    """A fresh copy of the same tiny random Qwen2 model (identical weights for the same seed), fp32."""
    return AutoModelForCausalLM.from_pretrained(model_dir(seed), dtype=torch.float32)


def prompts_dataset(n: int = 16, answers: bool = False) -> Dataset:
    """Prompts "a+b="; with `answers`, the expert answer "a+b" of each as the column `answer` (expert_column)."""
    pairs = list(zip(range(10, 10 + n), range(30, 30 + n)))
    columns = {"prompt": [f"{a}+{b}=" for a, b in pairs]}
    if answers:
        columns["answer"] = [str(a + b) for a, b in pairs]
    return Dataset.from_dict(columns)


def with_reference_rewards(dataset: Dataset) -> Dataset:
    """`dataset` with A*-PO's `reference_rewards` column, three fixed rewards per prompt (advantages/a2po.py)."""
    return dataset.add_column(REFERENCE_REWARDS, [[0.0, 0.25, 1.0]] * len(dataset))


def required_settings(loss_type: str) -> dict:
    """The settings a loss cannot run without: a KL coefficient for one that holds the KL itself (a2po's β₂), the
    column of expert traces for luffy (make_trainer's default dataset then has it)."""
    if loss_type == "luffy":
        return {"expert_column": "answer"}
    return {"beta": 1e-3} if LOSSES.get(loss_type).spec.applies_kl else {}


def digit_reward(completions, **kwargs):
    """Fraction of digits in the completion: varied, so groups have spread."""
    return [sum(c.isdigit() for c in completion) / max(len(completion), 1) for completion in completions]


def config_kwargs(**overrides):
    kwargs = dict(
        output_dir=TEST_OUTPUT_DIR,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        learning_rate=1e-2,
        max_steps=2,
        logging_steps=1,
        report_to="none",
        bf16=False,
        use_cpu=True,
        save_strategy="no",
        seed=0,
        temperature=1.0,
        disable_tqdm=True,
    )
    kwargs.update(overrides)
    return kwargs


def make_trainer(
    trainer_cls, config_cls, seed: int = 0, peft_config=None, reward_funcs=None, dataset=None, **overrides
):
    torch.manual_seed(seed)
    args = config_cls(**config_kwargs(**overrides))
    return trainer_cls(
        model=model(seed),
        reward_funcs=reward_funcs or digit_reward,
        args=args,
        train_dataset=dataset if dataset is not None else prompts_dataset(answers="expert_column" in overrides),
        processing_class=tokenizer(),
        peft_config=peft_config,
    )


def perturb(model, seed=1, scale=0.05):
    """Move every parameter by the same seeded noise, so a generated batch becomes off-policy."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator))


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| / max |b|."""
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-12)).item()
