"""Worker for tests/test_sampling_multiprocess.py, launched on 2 CPU processes (gloo) by `accelerate launch`.

Trains a few steps with dynamic_sampling="resample", local batches of 6 rows and G = 4, so one group straddles
the two processes. Every trained generation batch is gathered and written as JSON to the path in argv[1].
Also importable: the reward and the checks are shared with the single-process tests.
"""

from __future__ import annotations

import faulthandler
import sys
import zlib

import torch

from tests.trl_internals import AfterGenerationBatch
from tests.two_processes import WORKER_TIMEOUT_S, write_result


def half_constant_reward(prompts, completions, **kwargs):
    """0 for prompts whose first number is even (every such group has zero spread), a hash of the completion
    otherwise (spread with near certainty)."""
    return [
        0.0 if int(prompt.split("+")[0]) % 2 == 0 else (zlib.crc32(completion.encode()) % 1000) / 1000
        for prompt, completion in zip(prompts, completions)
    ]


def describe(trainer, batch) -> dict:
    """The batch as plain lists: decoded prompts and completions, advantages, token counts."""
    tokenizer = trainer.processing_class
    return {
        "prompts": tokenizer.batch_decode(batch["prompt_ids"], skip_special_tokens=True),
        "completions": tokenizer.batch_decode(batch["completion_ids"], skip_special_tokens=True),
        "advantages": batch["advantages"].tolist(),
        "mask_tokens": int(batch["completion_mask"].sum()),
        "num_items_in_batch": int(batch["num_items_in_batch"]),
    }


class RecordsTrainedBatches(AfterGenerationBatch):
    """Trainer mixin (before the trainer class): every trained generation batch, as `describe` writes it, appended
    to the trainer's `recorded` list (set it to [] after construction)."""

    def after_generation_batch(self, batch):
        if self.model.training:
            self.recorded.append(describe(self, batch))


def grpo_advantages(rewards: list[float], group_size: int) -> list[float]:
    """TRL's default advantages: (R − group mean) / (unbiased group std + 1e-4)."""
    grouped = torch.tensor(rewards).view(-1, group_size)
    advantages = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)
    return advantages.flatten().tolist()


def main(output_path: str):
    from accelerate.utils import gather_object

    import trl_zoo
    from tests.tiny import make_trainer, model_dir

    model_dir(0)  # save the tiny model before the process group exists (transformers then saves on rank 0 only)

    class Recording(RecordsTrainedBatches, trl_zoo.GRPOTrainer):
        pass

    trainer = make_trainer(
        Recording,
        trl_zoo.GRPOConfig,
        reward_funcs=half_constant_reward,
        dynamic_sampling="resample",
        dynamic_sampling_max_rounds=20,
        per_device_train_batch_size=2,
        steps_per_generation=3,
        max_steps=4,
        max_completion_length=6,
    )
    trainer.recorded = []
    trainer.train()
    per_process = gather_object([trainer.recorded])
    if trainer.accelerator.is_main_process:
        rounds = [
            row["dynamic_sampling/generation_rounds"]
            for row in trainer.state.log_history
            if "dynamic_sampling/generation_rounds" in row
        ]
        write_result(
            output_path,
            {"per_process": per_process, "logged_rounds": rounds, "num_processes": trainer.accelerator.num_processes},
        )
    # Shut the process group down explicitly: left to interpreter teardown, gloo's threads can abort one rank.
    trainer.accelerator.wait_for_everyone()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    # a hung rank prints every thread's stack, then exits
    faulthandler.dump_traceback_later(WORKER_TIMEOUT_S, exit=True)
    main(sys.argv[1])
