"""Worker for tests/test_heldout_eval_multiprocess.py: `trl_zoo.cli.train.command.run_train` (the `trl-zoo train`
command) with LoRA on a tiny model (argv[3]) and a local dataset (argv[2]: a folder with train.jsonl and test.jsonl),
into the run folder argv[4], on the two CPU processes `accelerate launch` started, under DDP or FSDP2 (the launcher's
config file). Writes, as JSON to argv[1], every process's held-out accuracy history [(step, accuracy), ...], the eval
records of the run log and the distributed type."""

from __future__ import annotations

import faulthandler
import sys
from pathlib import Path

import torch

from tests.two_processes import WORKER_TIMEOUT_S, force_fsdp_on_cpu_processes, write_result


def main(output_path: str, data_dir: str, model_path: str, output_dir: str):
    force_fsdp_on_cpu_processes()
    from accelerate import PartialState
    from accelerate.state import AcceleratorState
    from accelerate.utils import gather_object

    import trl_zoo.cli.train.command
    import trl_zoo.cli.train.heldout_accuracy
    from trl_zoo.cli.arguments.train_arguments import parse_train_args
    from trl_zoo.cli.report.run_log import METRICS_FILE, read_records

    histories = []

    class Recording(trl_zoo.cli.train.heldout_accuracy.HeldOutAccuracyCallback):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            histories.append(self.history)

    trl_zoo.cli.train.heldout_accuracy.HeldOutAccuracyCallback = Recording
    task_args, training_args, model_args = parse_train_args([
        "--model_name_or_path", model_path, "--dataset_name", data_dir, "--output_dir", output_dir,
        "--overwrite_output_dir", "true", "--max_steps", "3", "--eval_every_steps", "1", "--eval_batch_size", "3",
        "--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "6",
        "--learning_rate", "0.1", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "q_proj", "v_proj",
        # exact_match scores the held-out set; the digit reward gives the training groups a spread to learn from
        "--reward_funcs", "exact_match", "tests.tiny.digit_reward",
        "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none", "--bf16", "false", "--seed", "0",
        "--temperature", "1.0", "--beta", "0.0", "--disable_tqdm", "true",
    ])
    trl_zoo.cli.train.command.run_train(task_args, training_args, model_args, log=lambda *args: None)
    state = PartialState()
    every_process = gather_object([[list(point) for point in histories[0]]])
    if state.is_main_process:
        records = [r for r in read_records(Path(output_dir) / METRICS_FILE) if r["kind"] == "eval"]
        write_result(output_path, {
            "histories": every_process,
            "eval_records": [[r["step"], r["heldout_accuracy"]] for r in records],
            "distributed_type": AcceleratorState().distributed_type.value,
        })
    state.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    faulthandler.dump_traceback_later(WORKER_TIMEOUT_S, exit=True)
    main(*sys.argv[1:])
