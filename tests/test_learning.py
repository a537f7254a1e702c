"""A tiny policy really learns: RL with trl_zoo's trainer fixes a habit that a verifier can see.

The base policy is bootstrapped like the quickstart's (see `trl_zoo.tasks.bootstrap`), on one-digit sums so that it
takes seconds: it first learns to add, then picks up a habit from sloppy demonstrations — on carried sums it mostly
forgets the carry ("7+8=" → "5") — while still sampling the right answer sometimes. GRPO with an exact-match reward
must remove the habit.

Measured on a 2-core CPU for seeds 0–9 (with 1 and 2 threads, same numbers) before the margin was chosen: greedy
accuracy before → after 0.259 → 0.901, 0.457 → 0.877, 0.370 → 0.914, 0.370 → 0.840, 0.358 → 0.877, 0.395 → 0.852,
0.370 → 0.877, 0.420 → 0.938, 0.395 → 0.901, 0.383 → 0.914 (gains +0.42 to +0.64). The test asserts a gain of at
least 0.25 on one seed: other CPUs round differently and follow another trajectory, and the margin is there for that.
"""

from dataclasses import replace

import pytest
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_zoo import GRPOConfig, GRPOTrainer
from trl_zoo.tasks.arithmetic import AdditionTask
from trl_zoo.tasks.bootstrap import BootstrapRecipe, bootstrap_policy
from trl_zoo.tasks.evaluation import greedy_accuracy
from trl_zoo.tasks.rewards import exact_match_reward

ONE_DIGIT = AdditionTask("addition1", digits=1, num_train=61, num_heldout=20, description="one-digit addition")
RECIPE = BootstrapRecipe(
    hidden_size=64, num_layers=2, max_steps=600, check_every=25, batch_size=64, probe_size=61,
    carry_slip_rate=0.8, slip_steps=100, slip_learning_rate=3e-3,
)
MIN_GAIN = 0.25


def accuracy(model, tokenizer) -> float:
    """Greedy accuracy over all 81 one-digit sums (the training prompts and the 20 held out)."""
    pairs = ONE_DIGIT.train_pairs + ONE_DIGIT.heldout_pairs
    prompts, answers = [ONE_DIGIT.prompt(a, b) for a, b in pairs], [str(a + b) for a, b in pairs]
    return greedy_accuracy(
        model, tokenizer, prompts, ONE_DIGIT.max_completion_length, reward_kwargs={"answer": answers}
    )


@pytest.mark.parametrize("seed", [0])
def test_grpo_removes_the_carry_slip(tmp_path, seed):
    path = bootstrap_policy(ONE_DIGIT, replace(RECIPE, seed=seed), cache=tmp_path, log=lambda _: None)
    tokenizer = AutoTokenizer.from_pretrained(path)
    before = accuracy(AutoModelForCausalLM.from_pretrained(path), tokenizer)
    args = GRPOConfig(
        output_dir=str(tmp_path / "run"), loss_type="grpo", learning_rate=1e-3, max_steps=60, seed=seed,
        per_device_train_batch_size=64, num_generations=8, max_completion_length=ONE_DIGIT.max_completion_length,
        temperature=1.0, beta=0.0, bf16=False, use_cpu=True, report_to="none", save_strategy="no",
        logging_steps=100, gradient_checkpointing=False, dataloader_pin_memory=False,
    )
    trainer = GRPOTrainer(
        model=str(path), reward_funcs=exact_match_reward, args=args, train_dataset=ONE_DIGIT.train_dataset(),
        processing_class=tokenizer,
        peft_config=LoraConfig(
            r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
        ),
    )
    trainer.train()
    after = accuracy(trainer.model, tokenizer)
    print(f"seed {seed}: {before:.3f} -> {after:.3f}")
    assert after - before >= MIN_GAIN, f"GRPO gained {after - before:+.3f} ({before:.3f} -> {after:.3f})"
