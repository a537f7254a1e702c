"""Worker for tests/test_critic_multiprocess.py, launched on 2 CPU processes (gloo, DDP) by `accelerate launch`, on
one distributed process (DDP around a single process) by torchrun, or run plainly without any process group.

Trains PPO with GAE (one value pre-training step, then policy and critic) for a few steps with the critic named in
argv[2] ("adapter": LoRA policy and a value adapter; "head": a full model and a value head). Writes, as JSON to
argv[1], every process's critic and policy parameters before and after training and the critic's gradients before
and after the cross-process averaging of the first optimizer step.
"""

from __future__ import annotations

import faulthandler
import sys

import torch
from torch.nn.parallel import DistributedDataParallel

from tests.two_processes import WORKER_TIMEOUT_S, write_result


def flat(tensors) -> list[float]:
    return torch.cat([t.detach().float().reshape(-1) for t in tensors]).tolist()


def record_first_averaging(critic, record: dict):
    """The critic's gradients before and after its first cross-process averaging go into `record`."""
    average = critic.average_gradients

    def recording_average():
        if "local_gradients" in record:
            return average()
        record["local_gradients"] = flat(p.grad for p in critic.parameters)
        average()
        record["averaged_gradients"] = flat(p.grad for p in critic.parameters)

    critic.average_gradients = recording_average


def main(output_path: str, critic_model: str):
    from accelerate.utils import gather_object
    from peft import LoraConfig

    import trl_zoo
    from tests.tiny import make_trainer, model_dir

    model_dir(0)  # save the tiny model before the process group exists (transformers then saves on rank 0 only)

    peft_config = None
    if critic_model == "adapter":
        peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    trainer = make_trainer(
        trl_zoo.GRPOTrainer,
        trl_zoo.GRPOConfig,
        peft_config=peft_config,
        advantage_estimator="gae",
        critic_model=critic_model,
        vapo_value_warmup_steps=1,
        num_iterations=2,
        per_device_train_batch_size=4,
        max_steps=3,
        max_completion_length=6,
    )
    policy = [
        p for p in trainer.model.parameters() if p.requires_grad and all(p is not c for c in trainer.critic.parameters)
    ]
    trainer.record = {"critic_before": flat(trainer.critic.parameters), "policy_before": flat(policy)}
    record_first_averaging(trainer.critic, trainer.record)
    trainer.train()
    trainer.record["critic_after"] = flat(trainer.critic.parameters)
    trainer.record["policy_after"] = flat(policy)
    trainer.record["value_losses"] = [
        row["critic/value_loss"] for row in trainer.state.log_history if "critic/value_loss" in row
    ]
    per_process = gather_object([trainer.record])
    if trainer.accelerator.is_main_process:
        write_result(
            output_path,
            {
                "per_process": per_process,
                "num_processes": trainer.accelerator.num_processes,
                "wrapped_in_ddp": isinstance(trainer.model_wrapped, DistributedDataParallel),
            },
        )
    trainer.accelerator.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    # a hung rank prints every thread's stack, then exits
    faulthandler.dump_traceback_later(WORKER_TIMEOUT_S, exit=True)
    main(sys.argv[1], sys.argv[2])
