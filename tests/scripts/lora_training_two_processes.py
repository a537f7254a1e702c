"""Worker for tests/test_fsdp_multiprocess.py: a few LoRA training steps of a preset (argv[2], "grpo" or "dapo", read
from configs/<preset>.yaml with tiny sizes, then the GRPOConfig fields of the JSON object argv[3] if given; its
"use_peft": false trains the whole model instead) on the two CPU processes `accelerate launch` started, under DDP or
under FSDP (the launcher's config file). Writes, as JSON to argv[1]: the logged loss, gradient norm, KL and reference
resets of every step, the trainable weights before and after training (gathered whole), the gradient of the tied
input embedding / output layer weight at every optimizer step (before clipping; empty when it is frozen), whether
that weight is still tied after training, the distributed type and the number of sharded (DTensor) parameters."""

from __future__ import annotations

import faulthandler
import json
import sys
from pathlib import Path

import torch
import yaml
from torch.distributed.tensor import DTensor

from tests.two_processes import WORKER_TIMEOUT_S, force_fsdp_on_cpu_processes, write_result

TINY_SIZES = dict(  # the preset's own loss, clipping, KL and sampling options; sizes fit a tiny model on a CPU
    num_generations=4,
    per_device_train_batch_size=4,
    steps_per_generation=2,
    max_completion_length=8,
    overlong_buffer_length=2,
    max_steps=3,
)


def main(output_path: str, preset: str, overrides: str = "{}"):
    force_fsdp_on_cpu_processes()
    from peft import LoraConfig

    import trl_zoo
    from tests.tiny import make_trainer, model_dir
    from tests.trl_internals import BeforeGradientNorm

    model_dir(0)  # save the tiny model before the process group exists
    recipe = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / f"{preset}.yaml").read_text())
    sizes = {k: v for k, v in TINY_SIZES.items() if k in recipe or k in ("per_device_train_batch_size", "max_steps")}
    options = {**recipe, **sizes, **json.loads(overrides)}
    peft_config = None
    if options.pop("use_peft", True):
        peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)

    class Recording(BeforeGradientNorm, trl_zoo.GRPOTrainer):
        tied_grads = []

        def before_gradient_norm(self):  # the step's gradients, before clipping
            grad = self.model.get_input_embeddings().weight.grad
            if grad is not None:  # gathered whole: a collective, on every process
                whole = grad.full_tensor() if isinstance(grad, DTensor) else grad
                self.tied_grads.append(whole.reshape(-1).tolist())

    trainer = make_trainer(Recording, trl_zoo.GRPOConfig, peft_config=peft_config, **options)
    initial_adapter = torch.cat(
        [p.detach().reshape(-1) for _, p in sorted(trainer.model.named_parameters()) if p.requires_grad]
    ).tolist()
    trainer.train()
    logged = [row for row in trainer.state.log_history if "loss" in row]
    adapter = [  # FSDP2 holds each process's shard as a DTensor: gathered whole (a collective, on every process)
        (p.full_tensor() if isinstance(p, DTensor) else p).detach().reshape(-1)
        for _, p in sorted(trainer.model.named_parameters()) if p.requires_grad
    ]
    if trainer.accelerator.is_main_process:
        write_result(
            output_path,
            {
                "losses": [row["loss"] for row in logged],
                "grad_norms": [row["grad_norm"] for row in logged],
                "kl": [row.get("kl") for row in logged],
                "ref_resets": [row.get("ref_resets") for row in logged],
                "adapter_before": initial_adapter,
                "adapter_after": torch.cat(adapter).tolist(),
                "distributed_type": trainer.accelerator.distributed_type.value,
                "sharded_parameters": sum(isinstance(p, DTensor) for p in trainer.model.parameters()),
                "num_processes": trainer.accelerator.num_processes,
                "tied_grads": trainer.tied_grads,
                "tied": trainer.model.get_output_embeddings().weight is trainer.model.get_input_embeddings().weight,
            },
        )
    trainer.accelerator.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    faulthandler.dump_traceback_later(WORKER_TIMEOUT_S, exit=True)
    main(*sys.argv[1:])
