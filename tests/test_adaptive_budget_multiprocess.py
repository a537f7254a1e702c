"""adaptive_budget on two processes (gloo on CPU): both take the same decisions, every process trains exactly its
share of the batch, and the groups of unequal sizes (whole across the processes) get their own advantages.

This file is also the worker: `accelerate launch` runs it with the output path as its argument."""

from __future__ import annotations

import faulthandler
import sys

import pytest

from tests.scripts.resample_two_processes import RecordsTrainedBatches, half_constant_reward
from tests.test_adaptive_budget import grpo_by_hand
from tests.two_processes import REPO, WORKER_TIMEOUT_S, _run_worker, write_result

LOCAL_ROWS = 6  # per_device_train_batch_size 2 × steps_per_generation 3; G = 4, so the grid is 2, 4


def main(output_path: str):
    import torch
    from accelerate.utils import gather_object

    import trl_zoo
    from tests.tiny import make_trainer, model_dir

    model_dir(0)  # saved before the process group exists

    class Recording(RecordsTrainedBatches, trl_zoo.GRPOTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            sampling = self.pipeline.get("dynamic_sampling")
            regrouped_advantages = sampling.regrouped_advantages

            def recorded(batch, regrouped):
                self.regroupings.append(
                    {"sizes": regrouped.group_sizes.tolist(), "trained": regrouped.trained.tolist()}
                )
                return regrouped_advantages(batch, regrouped)

            sampling.regrouped_advantages = recorded

    trainer = make_trainer(
        Recording, trl_zoo.GRPOConfig, reward_funcs=half_constant_reward, dynamic_sampling="adaptive_budget",
        dynamic_sampling_max_rounds=20, per_device_train_batch_size=2, steps_per_generation=3, max_steps=6,
        max_completion_length=6,
    )
    trainer.recorded, trainer.regroupings = [], []
    trainer.train()
    per_process = gather_object([{"batches": trainer.recorded, "regroupings": trainer.regroupings}])
    if trainer.accelerator.is_main_process:
        write_result(output_path, {"num_processes": trainer.accelerator.num_processes, "per_process": per_process})
    # Shut the process group down explicitly: left to interpreter teardown, gloo's threads can abort one rank.
    trainer.accelerator.wait_for_everyone()
    torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    output = tmp_path_factory.mktemp("adaptive_budget") / "batches.json"
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "PORT",
        str(REPO / "tests" / "test_adaptive_budget_multiprocess.py"), str(output),
    ]
    return _run_worker(command, output)


def test_two_processes_take_the_same_decisions_and_train_whole_informative_groups(two_process_run):
    assert two_process_run["num_processes"] == 2
    first, second = two_process_run["per_process"]
    assert first["regroupings"] == second["regroupings"]  # the same groups on both processes
    assert len(first["batches"]) == len(second["batches"]) == 2  # a generation batch every 3 of the 6 steps
    for batch_0, batch_1, regrouped in zip(first["batches"], second["batches"], first["regroupings"]):
        assert len(batch_0["prompts"]) == len(batch_1["prompts"]) == LOCAL_ROWS
        assert all(regrouped["trained"]) and sum(regrouped["sizes"]) == 2 * LOCAL_ROWS
        prompts = batch_0["prompts"] + batch_1["prompts"]
        rewards = half_constant_reward(prompts, batch_0["completions"] + batch_1["completions"])
        advantages = batch_0["advantages"] + batch_1["advantages"]
        start = 0
        for size in regrouped["sizes"]:
            assert size in (2, 4)
            group = slice(start, start + size)
            assert len(set(prompts[group])) == 1  # one prompt's completions, also across the processes
            assert int(prompts[start].split("+")[0]) % 2 == 1  # no hopeless prompt is trained
            assert advantages[group] == pytest.approx(grpo_by_hand(rewards[group]), abs=1e-4)
            start += size
        tokens = batch_0["mask_tokens"] + batch_1["mask_tokens"]
        assert batch_0["num_items_in_batch"] == batch_1["num_items_in_batch"] == tokens


if __name__ == "__main__":
    faulthandler.dump_traceback_later(WORKER_TIMEOUT_S, exit=True)
    main(sys.argv[1])
