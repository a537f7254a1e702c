"""One `trl-zoo train` run of the real-model study, instrumented: per-step wall time, peak GPU memory, and the
training completions' lengths split by correctness.

    python benchmarks/real_model_run.py [--trainer trl] <trl-zoo train flags>

`--trainer trl` runs the same setup (data, rewards, LoRA, evaluation) with `trl.GRPOTrainer` in place of trl_zoo's,
for side-by-side curves and costs. Writes `<output_dir>/costs.json` (median step time, evaluation excluded; peak
memory) and `<output_dir>/completions.jsonl` (per generation batch: mean reward, mean token length of the right
and of the wrong completions). The reward is `final_number`, recorded before any null-reward shuffling.

Under a distributed launch every process also writes `<output_dir>/costs.rank{r}.json`: its own step times and peak
memory, the trainer's log history, float64 checksums (sum, sum of squares) of its trainable policy parameters and
of the critic's (`advantage_estimator="gae"`), and, with `REAL_MODEL_RECORD_BATCHES=1`, every trained generation
batch (rows, a CRC32 of each decoded prompt, advantages, prompts skipped by dynamic sampling) — what
`benchmarks/multi_gpu.py` compares across processes. costs.json is the first process's.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import zlib
from pathlib import Path

import torch
from transformers import TrainerCallback

from trl_zoo.tasks.rewards import final_number_reward

RECORD_ENV = "REAL_MODEL_COMPLETIONS"
BATCHES_ENV = "REAL_MODEL_RECORD_BATCHES"
TRAINERS: list = []  # the instrumented trainer, once built


def recorded_final_number(completions, answer, completion_ids=None, **kwargs):
    """final_number, and for training batches (completion_ids given) a record of lengths by correctness."""
    rewards = final_number_reward(completions, answer)
    if completion_ids is not None and os.environ.get(RECORD_ENV):
        lengths = [len(ids) for ids in completion_ids]
        right = [n for n, r in zip(lengths, rewards) if r == 1.0]
        wrong = [n for n, r in zip(lengths, rewards) if r != 1.0]
        record = {
            "reward": sum(rewards) / len(rewards),
            "length": sum(lengths) / len(lengths),
            "length_right": sum(right) / len(right) if right else None,
            "length_wrong": sum(wrong) / len(wrong) if wrong else None,
        }
        with open(os.environ[RECORD_ENV], "a") as handle:
            handle.write(json.dumps(record) + "\n")
    return rewards


class StepTimer(TrainerCallback):
    """Wall time of each optimizer step, from its begin to its end (device synchronised)."""

    def __init__(self):
        self.seconds: list[float] = []
        self.started = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.seconds.append(time.perf_counter() - self.started)


def instrumented(trainer_class, timer: StepTimer):
    class Instrumented(trainer_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # first, so that the held-out evaluation (another on_step_end) falls outside the timed span
            self.callback_handler.callbacks.insert(0, timer)
            self.recorded_batches: list[dict] = []
            TRAINERS.append(self)

        def _generate_and_score_completions(self, inputs):
            batch = super()._generate_and_score_completions(inputs)
            if self.model.training and os.environ.get(BATCHES_ENV):
                self.recorded_batches.append(describe_batch(self, batch))
            return batch

    Instrumented.__name__ = trainer_class.__name__
    return Instrumented


def describe_batch(trainer, batch) -> dict:
    """A trained generation batch of this process: rows, a CRC32 per decoded prompt, advantages, skipped prompts."""
    prompts = trainer.processing_class.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
    skipped = trainer._metrics["train"].get("dynamic_sampling/prompts_skipped") or [None]
    return {
        "rows": len(prompts),
        "prompt_crc": [zlib.crc32(prompt.encode()) for prompt in prompts],
        "advantages": [round(value, 6) for value in batch["advantages"].float().reshape(len(prompts), -1)[:, 0].tolist()],
        "prompts_skipped": skipped[-1],
    }


def checksum(parameters) -> dict:
    """sum and sum of squares in float64 of this process's values (its shards under FSDP)."""
    total = squares = 0.0
    count = 0
    for parameter in parameters:
        values = parameter.detach()
        values = values.to_local() if hasattr(values, "to_local") else values
        values = values.double()
        total += values.sum().item()
        squares += (values * values).sum().item()
        count += values.numel()
    return {"sum": total, "sum_squares": squares, "numel": count}


def process_record(trainer, timer: StepTimer) -> dict:
    """This process's costs and state after training (see the module docstring)."""
    critic = list(getattr(trainer, "critic_parameters", None) or [])
    critic_ids = {id(parameter) for parameter in critic}
    policy = [p for p in trainer.model.parameters() if p.requires_grad and id(p) not in critic_ids]
    return {
        "rank": trainer.accelerator.process_index,
        "world_size": trainer.accelerator.num_processes,
        "distributed_type": str(trainer.accelerator.distributed_type),
        "mixed_precision": str(trainer.accelerator.mixed_precision),
        "step_seconds": timer.seconds,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "log_history": trainer.state.log_history,
        "policy_checksum": checksum(policy),
        "critic_checksum": checksum(critic) if critic else None,
        "batches": trainer.recorded_batches,
    }


def versions() -> dict:
    import accelerate
    import peft
    import transformers
    import trl

    found = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
             "trl": trl.__version__, "peft": peft.__version__, "accelerate": accelerate.__version__}
    try:
        import deepspeed

        found["deepspeed"] = deepspeed.__version__
    except ImportError:
        pass
    return found


def main(argv: list[str]) -> int:
    import trl

    import trl_zoo.cli.train
    from trl_zoo.cli import main as cli_main

    trainer = "trl_zoo"
    if argv[:2] == ["--trainer", "trl"]:
        trainer, argv = "trl", argv[2:]
    output_dir = Path(argv[argv.index("--output_dir") + 1])
    output_dir.mkdir(parents=True, exist_ok=True)
    os.environ[RECORD_ENV] = str(output_dir / "completions.jsonl")
    Path(os.environ[RECORD_ENV]).unlink(missing_ok=True)
    timer = StepTimer()
    base = trl.GRPOTrainer if trainer == "trl" else trl_zoo.cli.train.GRPOTrainer
    trl_zoo.cli.train.GRPOTrainer = instrumented(base, timer)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    code = cli_main(["train", *argv, "--reward_funcs", "benchmarks.real_model_run.recorded_final_number"])
    costs = {
        "trainer": trainer,
        "steps": len(timer.seconds),
        "median_step_seconds": statistics.median(timer.seconds) if timer.seconds else None,
        "step_seconds": timer.seconds,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "versions": versions(),
    }
    if TRAINERS:
        record = process_record(TRAINERS[-1], timer)
        (output_dir / f"costs.rank{record['rank']}.json").write_text(json.dumps(record, indent=2))
        if record["rank"] != 0:
            return code
    (output_dir / "costs.json").write_text(json.dumps(costs, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
