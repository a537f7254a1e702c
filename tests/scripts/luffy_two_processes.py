"""Worker for tests/test_luffy_multiprocess.py, launched on 2 CPU processes (gloo, DDP) by `accelerate launch`.

Trains LUFFY (`loss_type="luffy"`) for two steps with 2 rows a process and groups of 4, so each group spans both
processes: the expert trace (slot 0 of the group) is on the first process only. Writes, as JSON to argv[1], every
process's trainable parameters after training, the rows its reward function saw (completion and expert answer) and
the logged losses.
"""

from __future__ import annotations

import faulthandler
import sys

from tests.two_processes import WORKER_TIMEOUT_S, write_result


def main(output_path: str):
    import torch
    from accelerate.utils import gather_object
    from datasets import Dataset

    import trl_zoo
    from tests.tiny import digit_reward, make_trainer, model_dir

    model_dir(0)  # save the tiny model before the process group exists (transformers then saves on rank 0 only)
    pairs = list(zip(range(10, 26), range(30, 46)))
    dataset = Dataset.from_dict({"prompt": [f"{a}+{b}=" for a, b in pairs], "answer": [str(a + b) for a, b in pairs]})
    seen = []

    def recorded_reward(completions, answer, **kwargs):
        seen.append([[c, a] for c, a in zip(completions, answer)])
        return digit_reward(completions)

    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=recorded_reward, dataset=dataset, loss_type="luffy",
        expert_column="answer", per_device_train_batch_size=2, num_generations=4, max_steps=2,
    )
    trainer.train()
    trained = torch.cat([p.detach().float().reshape(-1) for p in trainer.model.parameters() if p.requires_grad])
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    per_process = gather_object([{"trained": trained.tolist(), "seen": seen, "losses": losses}])
    if trainer.accelerator.is_main_process:
        write_result(output_path, {"num_processes": trainer.accelerator.num_processes, "per_process": per_process})


if __name__ == "__main__":
    faulthandler.dump_traceback_later(WORKER_TIMEOUT_S, exit=True)
    main(sys.argv[1])
