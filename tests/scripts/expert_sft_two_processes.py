"""Worker for tests/test_expert_sft_multiprocess.py, launched on 2 CPU processes (gloo, DDP) by `accelerate launch`.

Trains CHORD's expert SFT (`expert_column`) for two steps on a dataset where every other prompt has no expert answer,
so a micro-batch of one process can hold answers while the other's holds none (it then skips the SFT forward).
Writes, as JSON to argv[1], every process's trainable parameters after training and the logged losses.
"""

from __future__ import annotations

import faulthandler
import sys

from tests.two_processes import WORKER_TIMEOUT_S, write_result


def main(output_path: str):
    import torch
    from accelerate.utils import gather_object
    from datasets import Dataset
    from peft import LoraConfig

    import trl_zoo
    from tests.tiny import make_trainer, model_dir

    model_dir(0)  # save the tiny model before the process group exists (transformers then saves on rank 0 only)
    prompts = [f"{a}+{b}=" for a, b in zip(range(10, 26), range(30, 46))]
    answers = [None if i % 2 else str(a + b) for i, (a, b) in enumerate(zip(range(10, 26), range(30, 46)))]
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0),
        dataset=Dataset.from_dict({"prompt": prompts, "answer": answers}), expert_column="answer",
        expert_mu_peak=0.5, expert_mu_valley=0.5, per_device_train_batch_size=4, num_generations=4, max_steps=2,
    )
    trainer.train()
    trained = torch.cat([p.detach().float().reshape(-1) for p in trainer.model.parameters() if p.requires_grad])
    sft_losses = [log["expert/sft_loss"] for log in trainer.state.log_history if "loss" in log]
    per_process = gather_object([{"trained": trained.tolist(), "sft_losses": sft_losses}])
    if trainer.accelerator.is_main_process:
        write_result(output_path, {"num_processes": trainer.accelerator.num_processes, "per_process": per_process})


if __name__ == "__main__":
    faulthandler.dump_traceback_later(WORKER_TIMEOUT_S, exit=True)
    main(sys.argv[1])
