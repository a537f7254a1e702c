"""Quickstart from Python: RL with LoRA makes a tiny policy better at two-digit addition, offline, on a CPU.

The same run as `trl-zoo train` with no arguments, written out with the public API:

1. bootstrap (or load from the cache) a tiny causal LM that has learned to add and then picked up a habit of
   forgetting carries from sloppy demonstrations (see trl_zoo/tasks/bootstrap.py),
2. measure greedy accuracy on held-out sums it never trains on,
3. train a LoRA adapter with trl_zoo's GRPOTrainer (any `loss_type` from `trl-zoo list`), measuring as it goes,
4. save the adapter.

    python examples/quickstart.py [--loss_type grpo] [--max_steps 200] [--seed 0]
"""

import argparse
import time

import torch
from peft import LoraConfig
from transformers import AutoTokenizer

from trl_zoo import GRPOConfig, GRPOTrainer
from trl_zoo.tasks import ADDITION
from trl_zoo.tasks.bootstrap import BootstrapRecipe, bootstrap_policy
from trl_zoo.tasks.evaluation import HeldOutAccuracyCallback, greedy_accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loss_type", default="grpo")
    parser.add_argument("--max_steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output_dir", default="runs/quickstart")
    parser.add_argument("--bootstrap_max_steps", type=int, default=BootstrapRecipe.max_steps, help="cap on supervised steps")
    parser.add_argument("--bootstrap_hidden_size", type=int, default=BootstrapRecipe.hidden_size)
    parser.add_argument("--bootstrap_num_layers", type=int, default=BootstrapRecipe.num_layers)
    args = parser.parse_args()

    task = ADDITION
    recipe = BootstrapRecipe(
        hidden_size=args.bootstrap_hidden_size,
        num_layers=args.bootstrap_num_layers,
        max_steps=args.bootstrap_max_steps,
        check_every=min(BootstrapRecipe.check_every, args.bootstrap_max_steps),
        seed=args.seed,
    )
    model_dir = str(bootstrap_policy(task, recipe))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    heldout = task.heldout_dataset()

    def heldout_accuracy(model) -> float:
        return greedy_accuracy(
            model, tokenizer, heldout["prompt"], task.max_completion_length, reward_kwargs={"answer": heldout["answer"]}
        )

    config = GRPOConfig(
        output_dir=args.output_dir,
        loss_type=args.loss_type,
        learning_rate=1e-3,  # linear decay to 0, as `trl-zoo train`
        max_steps=args.max_steps,
        per_device_train_batch_size=64,  # completions per step: 8 prompts × 8 completions
        num_generations=8,
        max_completion_length=task.max_completion_length,
        temperature=1.0,
        beta=0.0,
        bf16=torch.cuda.is_available(),
        logging_steps=50,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        gradient_checkpointing=False,
        seed=args.seed,
    )
    progress = HeldOutAccuracyCallback(
        heldout_accuracy, every_steps=50, on_result=lambda step, accuracy: print(f"  step {step}: {accuracy:.1%}")
    )
    trainer = GRPOTrainer(
        model=model_dir,
        reward_funcs=task.reward,
        args=config,
        train_dataset=task.train_dataset(),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"),
        callbacks=[progress],
    )
    before = heldout_accuracy(trainer.model)
    print(f"held-out greedy accuracy before RL: {before:.1%}")
    started = time.perf_counter()
    trainer.train()
    after = progress.history[-1][1]
    trainer.save_model(args.output_dir)
    print(
        f"held-out greedy accuracy after RL: {after:.1%} (before {before:.1%}); "
        f"{trainer.state.global_step} steps in {time.perf_counter() - started:.0f} s; adapter in {args.output_dir}"
    )


if __name__ == "__main__":
    main()
