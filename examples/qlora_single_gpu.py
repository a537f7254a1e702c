"""QLoRA on one GPU: a 4-bit (NF4) base model with a LoRA adapter, trained with trl_zoo's GRPOTrainer.

Needs a CUDA GPU and bitsandbytes (`pip install "trl-zoo[quantization]"`). The base weights are stored in 4 bits
and computed in bf16; only the adapter trains, so a 1.5B model fits comfortably in a few GB. Same task as
examples/lora_math.py (GSM8K, final-number reward); the command-line equivalent is

    trl-zoo train --model_name_or_path Qwen/Qwen2.5-1.5B-Instruct --load_in_4bit --dtype bfloat16 \
        --dataset_name openai/gsm8k --dataset_config main --prompt_column question --reward_funcs final_number

    python examples/qlora_single_gpu.py [--model Qwen/Qwen2.5-1.5B-Instruct] [--max_steps 200]
"""

import argparse
import importlib.util
import sys

import torch
from lora_math import load_math_dataset, to_prompts  # examples/lora_math.py, next to this file
from peft import LoraConfig
from transformers import AutoTokenizer, BitsAndBytesConfig

from trl_zoo import GRPOConfig, GRPOTrainer
from trl_zoo.tasks.evaluation import HeldOutAccuracyCallback, greedy_accuracy
from trl_zoo.tasks.rewards import final_number_reward


def check_requirements():
    if importlib.util.find_spec("bitsandbytes") is None:
        sys.exit("QLoRA needs bitsandbytes: pip install 'trl-zoo[quantization]'.")
    if not torch.cuda.is_available():
        sys.exit("QLoRA needs a CUDA GPU (bitsandbytes' 4-bit kernels); use examples/lora_math.py on a CPU.")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="Qwen/Qwen2.5-1.5B-Instruct")
    parser.add_argument("--dataset", default="openai/gsm8k")
    parser.add_argument("--dataset_config", default="main")
    parser.add_argument("--loss_type", default="dapo")
    parser.add_argument("--max_steps", type=int, default=200)
    parser.add_argument("--learning_rate", type=float, default=2e-5)
    parser.add_argument("--max_completion_length", type=int, default=512)
    parser.add_argument("--num_heldout", type=int, default=100)
    parser.add_argument("--output_dir", default="runs/qlora_math")
    args = parser.parse_args()
    check_requirements()

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dataset = load_math_dataset(args.dataset, args.dataset_config)
    train = to_prompts(dataset["train"], tokenizer)
    heldout = to_prompts(dataset["test"], tokenizer).select(range(min(args.num_heldout, len(dataset["test"]))))

    def heldout_accuracy(model) -> float:
        return greedy_accuracy(
            model, tokenizer, heldout["prompt"], args.max_completion_length, reward=final_number_reward,
            reward_kwargs={"answer": heldout["answer"]}, batch_size=32,
        )

    quantization = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    config = GRPOConfig(
        output_dir=args.output_dir,
        loss_type=args.loss_type,
        learning_rate=args.learning_rate,
        max_steps=args.max_steps,
        per_device_train_batch_size=32,  # 4 prompts × 8 completions
        num_generations=8,
        max_completion_length=args.max_completion_length,
        beta=0.0,
        bf16=True,
        gradient_checkpointing=True,
        model_init_kwargs={"dtype": "bfloat16", "device_map": {"": torch.cuda.current_device()}},
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        seed=0,
    )
    progress = HeldOutAccuracyCallback(heldout_accuracy, 50, on_result=lambda s, a: print(f"  step {s}: {a:.1%}"))
    trainer = GRPOTrainer(
        model=args.model,
        reward_funcs=final_number_reward,
        args=config,
        train_dataset=train,
        processing_class=tokenizer,
        quantization_config=quantization,
        peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"),
        callbacks=[progress],
    )
    before = heldout_accuracy(trainer.model)
    print(f"held-out accuracy before RL: {before:.1%}")
    trainer.train()
    trainer.save_model(args.output_dir)
    print(f"held-out accuracy after RL: {progress.history[-1][1]:.1%} (before {before:.1%}); adapter in {args.output_dir}")


if __name__ == "__main__":
    main()
