"""Worker for tests/test_sampling_multiprocess.py, launched on 2 CPU processes (gloo) by `accelerate launch`.

Trains with dynamic_sampling="greso", local batches of 6 rows and G = 4 (one group straddles the two processes).
Every process records, per trained generation batch, its rows, its skip count and greso's state (history, p_easy,
p_hard, decision counter); all of it is gathered and written as JSON to the path in argv[1].
"""

from __future__ import annotations

import faulthandler
import sys

import torch

from tests.two_processes import WORKER_TIMEOUT_S, write_result


def main(output_path: str):
    from accelerate.utils import gather_object

    import trl_zoo
    from tests.scripts.resample_two_processes import describe
    from tests.test_greso import mixed_reward
    from tests.tiny import make_trainer, model_dir
    from tests.trl_internals import AfterGenerationBatch, metric_values

    model_dir(0)  # save the tiny model before the process group exists (transformers then saves on rank 0 only)

    class Recording(AfterGenerationBatch, trl_zoo.GRPOTrainer):
        def after_generation_batch(self, batch):
            if self.model.training:
                record = describe(self, batch)
                record["prompts_skipped"] = metric_values(self)["dynamic_sampling/prompts_skipped"][-1]
                record["greso_state"] = {
                    key: ({k: list(v) for k, v in value.items()} if isinstance(value, dict) else value)
                    for key, value in self.zoo_state.items()
                    if key.startswith("greso/")
                }
                self.recorded.append(record)

    trainer = make_trainer(
        Recording,
        trl_zoo.GRPOConfig,
        reward_funcs=mixed_reward,
        dynamic_sampling="greso",
        dynamic_sampling_max_rounds=8,
        per_device_train_batch_size=2,
        steps_per_generation=3,
        max_steps=24,
        max_completion_length=4,
    )
    trainer.recorded = []
    trainer.train()
    per_process = gather_object([trainer.recorded])
    if trainer.accelerator.is_main_process:
        write_result(output_path, {"per_process": per_process, "num_processes": trainer.accelerator.num_processes})
    # Shut the process group down explicitly: left to interpreter teardown, gloo's threads can abort one rank.
    trainer.accelerator.wait_for_everyone()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    # a hung rank prints every thread's stack, then exits
    faulthandler.dump_traceback_later(WORKER_TIMEOUT_S, exit=True)
    main(sys.argv[1])
