"""One `trl-zoo train` run of the real-model study, instrumented: per-step wall time, peak GPU memory, and the
training completions' lengths split by correctness.

    python benchmarks/lib/real_model_run.py [--trainer trl] <trl-zoo train flags>

`--trainer trl` runs the same setup (data, rewards, LoRA, evaluation) with `trl.GRPOTrainer` in place of trl_zoo's,
for side-by-side curves and costs. Writes `<output_dir>/costs.json` (median step time, evaluation excluded; peak
memory) and `<output_dir>/completions.jsonl` (per generation batch: mean reward, mean token length of the right
and of the wrong completions; under a distributed launch, process r > 0 writes its share to
`completions.rank{r}.jsonl`). The reward is `final_number`, recorded before any null-reward shuffling. A run that
names its own `--reward_funcs` (TTRL's label-free majority_vote, GDPO's second objective) gets the recording reward
before them: it is the first, so it scores the greedy held-out evaluation, and the run's `--reward_weights` weigh it
too (0: recorded and scoring the evaluation, never trained on).

Under a distributed launch every process also writes `<output_dir>/costs.rank{r}.json`: its own step times and peak
memory, the trainer's log history, float64 checksums (sum, sum of squares) of its trainable policy parameters and
of the critic's (`advantage_estimator="gae"`), and, with `REAL_MODEL_RECORD_BATCHES=1`, every trained generation
batch (rows, a CRC32 of each decoded prompt, advantages, prompts skipped by dynamic sampling) — what
`benchmarks/multi_gpu.py` compares across processes. costs.json is the first process's.

Replay, so that two runs (e.g. DDP and FSDP2) train on the same completions:

    python benchmarks/lib/real_model_run.py --record_generations <flags>
        # writes generations.rank{r}.jsonl
    python benchmarks/lib/real_model_run.py --replay_generations RUN_DIR <flags>
        # reads RUN_DIR/generations.rank{r}.jsonl

With `--record_generations` every process appends, for each training generation (TRL's `_generate_single_turn`,
the one call that turns prompt token ids into completion token ids), the prompt ids, `num_generations`, the
completion ids, the sampling log-probs (None on the transformers path) and torch's CPU (and current CUDA device's)
random state right after generating, to `<output_dir>/generations.rank{r}.jsonl`. With `--replay_generations
RUN_DIR` that call returns the recorded completions in order instead of generating, and restores the recorded random
state (so anything random after generation, e.g. TRL's shuffle of the batch, draws the same); everything else (the
decoded text, rewards, advantages, the loss and the update) is computed by the run itself. The replay must see the
same prompts in the same order on the same rank (same data, seed, batch layout and process count): otherwise it
stops with one line, `real_model_run: error: replay ...`, and exit code 2. Held-out evaluation generates as usual.
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import sys
import time
import zlib
from pathlib import Path

import torch
from transformers import TrainerCallback

from trl_zoo.cli.train.run_folder import prepare_run_folder
from trl_zoo.tasks.evaluation import not_recorded
from trl_zoo.tasks.rewards import final_number_reward

RECORD_ENV = "REAL_MODEL_COMPLETIONS"
RECORDING_REWARD = "benchmarks.lib.real_model_run.recorded_final_number"
BATCHES_ENV = "REAL_MODEL_RECORD_BATCHES"
TRAINERS: list = []  # the instrumented trainer, once built
GENERATIONS = {"record": None, "replay": None}  # --record_generations (output dir) / --replay_generations (run dir)


class ReplayMismatch(RuntimeError):
    """The replayed run asked for a generation the recording does not hold (other prompts, or more batches)."""


def generations_file(folder, rank: int) -> Path:
    return Path(folder) / f"generations.rank{rank}.jsonl"


def resumed_step(argv: list[str], output_dir: Path) -> int:
    """The step a `--resume_from_checkpoint true` run goes on from (0 for a fresh run)."""
    from trl_zoo.cli.train.resume_checkpoint import checkpoint_step
    from trl_zoo.components.resume import last_complete_checkpoint

    if "--resume_from_checkpoint" not in argv or argv[argv.index("--resume_from_checkpoint") + 1].lower() != "true":
        return 0
    last = last_complete_checkpoint(str(output_dir), lambda *_: None)
    return checkpoint_step(last) if last else 0


def keep_records_up_to(path: Path, step: int) -> None:
    """A resumed run keeps the batch records of the steps its checkpoint holds and drops the rest (those are
    generated again); a fresh run starts an empty file."""
    kept = []
    if step and path.exists():
        kept = [line for line in path.read_text().splitlines() if (json.loads(line).get("step") or 0) <= step]
    path.write_text("".join(line + "\n" for line in kept))


def with_recording_reward(argv: list[str]) -> list[str]:
    """`argv` with the recording reward first of its `--reward_funcs` (the flag added when it has none)."""
    if "--reward_funcs" not in argv:
        return [*argv, "--reward_funcs", RECORDING_REWARD]
    at = argv.index("--reward_funcs") + 1
    return [*argv[:at], RECORDING_REWARD, *argv[at:]]


def random_state() -> dict:
    state = {"cpu": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode()}
    if torch.cuda.is_available():
        state["cuda"] = base64.b64encode(torch.cuda.get_rng_state().numpy().tobytes()).decode()
    return state


def restore_random_state(state: dict) -> None:
    def tensor(text):
        return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)

    torch.set_rng_state(tensor(state["cpu"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensor(state["cuda"]))


def recorded_final_number(completions, answer, completion_ids=None, trainer_state=None, answer_first_line=None,
                          **kwargs):
    """final_number (reading the answer line where the dataset's `answer_first_line` says so: a base model's
    few-shot prompts), and for every batch the trainer scores (completion_ids and its state given) a record of
    lengths by correctness, with the optimizer step a training batch is generated for (None for the held-out
    evaluation's)."""
    rewards = final_number_reward(completions, answer, answer_first_line=answer_first_line)
    # no trainer state: A*-PO's reference samples, scored before training, are no batch of the run
    if completion_ids is not None and trainer_state is not None and os.environ.get(RECORD_ENV):
        lengths = [len(ids) for ids in completion_ids]
        right = [n for n, r in zip(lengths, rewards) if r == 1.0]
        wrong = [n for n, r in zip(lengths, rewards) if r != 1.0]
        record = {
            "step": None if trainer_state is None or kwargs.get("log_metric") is not_recorded
            else trainer_state.global_step + 1,
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
            self.generation_records: list[dict] | None = None  # the replayed run's, read at the first generation
            self.generations_done = 0  # training generations recorded or replayed by this process
            TRAINERS.append(self)

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs):
            if not self.model.training or not (GENERATIONS["record"] or GENERATIONS["replay"]):
                return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                     *args, **kwargs)
            rank = self.accelerator.process_index
            if GENERATIONS["replay"]:
                return self._replayed(generations_file(GENERATIONS["replay"], rank), prompt_ids, num_generations)
            completion_ids, logprobs = super()._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                                     num_generations, *args, **kwargs)
            record = {"index": self.generations_done, "num_generations": num_generations,
                      "prompt_ids": [list(ids) for ids in prompt_ids],
                      "completion_ids": [list(ids) for ids in completion_ids], "logprobs": logprobs,
                      "random_state": random_state()}
            # each process its own file, started afresh at its first generation
            with open(generations_file(GENERATIONS["record"], rank), "a" if self.generations_done else "w") as handle:
                handle.write(json.dumps(record) + "\n")
            self.generations_done += 1
            return completion_ids, logprobs

        def _replayed(self, path: Path, prompt_ids, num_generations):
            if self.generation_records is None:
                if not path.exists():
                    raise ReplayMismatch(f"replay file {path} does not exist (record it with --record_generations)")
                self.generation_records = [json.loads(line) for line in path.read_text().splitlines()]
            index = self.generations_done
            if index >= len(self.generation_records):
                raise ReplayMismatch(f"replay of {path}: this run asks for generation batch {index + 1}, the "
                                     f"recording holds {len(self.generation_records)}")
            record = self.generation_records[index]
            same = record["prompt_ids"] == [list(ids) for ids in prompt_ids]
            if not same or record["num_generations"] != num_generations:
                raise ReplayMismatch(f"replay of {path}: the prompts of generation batch {index + 1} differ from the "
                                     "recorded ones (the runs' data, seed, batch layout and process count must match)")
            restore_random_state(record["random_state"])
            self.generations_done += 1
            return record["completion_ids"], record["logprobs"]

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
        "advantages": [
            round(value, 6) for value in batch["advantages"].float().reshape(len(prompts), -1)[:, 0].tolist()
        ],
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
    critic = [] if trainer.critic is None else list(trainer.critic.parameters)
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
        "generations": {"record": GENERATIONS["record"] is not None, "replay": GENERATIONS["replay"],
                        "batches": trainer.generations_done},
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

    import trl_zoo.cli.train.training_setup
    from trl_zoo.cli import main as cli_main

    trainer = "trl_zoo"
    if argv[:2] == ["--trainer", "trl"]:
        trainer, argv = "trl", argv[2:]
    argv = list(argv)
    record = "--record_generations" in argv
    if record:
        argv.remove("--record_generations")
    replay = None
    if "--replay_generations" in argv:
        at = argv.index("--replay_generations")
        replay, argv = argv[at + 1], argv[:at] + argv[at + 2:]
    if record and replay:
        print("real_model_run: error: --record_generations and --replay_generations exclude each other",
              file=sys.stderr)
        return 2
    output_dir = Path(argv[argv.index("--output_dir") + 1])
    prepare_run_folder(output_dir)  # the records below are written before the run claims the folder
    GENERATIONS.update(record=str(output_dir) if record else None, replay=replay)
    rank = int(os.environ.get("RANK", "0"))  # set by a distributed launcher; each process records its own share
    os.environ[RECORD_ENV] = str(output_dir / ("completions.jsonl" if rank == 0 else f"completions.rank{rank}.jsonl"))
    keep_records_up_to(Path(os.environ[RECORD_ENV]), resumed_step(argv, output_dir))
    timer = StepTimer()
    base = trl.GRPOTrainer if trainer == "trl" else trl_zoo.cli.train.training_setup.GRPOTrainer
    trl_zoo.cli.train.training_setup.GRPOTrainer = instrumented(base, timer)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    try:
        code = cli_main(["train", *with_recording_reward(argv)])
    except ReplayMismatch as error:
        print(f"real_model_run: error: {error}", file=sys.stderr)
        return 2
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
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # every file is written: skip the interpreter's teardown, where a finished gloo run's threads can abort the
    # process ("terminate called without an active exception") and turn a good run into a failed one
    os._exit(code)
