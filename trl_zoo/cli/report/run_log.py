"""What a training run records, and the finished run read back.

A run directory holds `metrics.jsonl` (one JSON record per line: `{"kind": "train", "step", ...TRL's logged
metrics}` every `logging_steps`, `{"kind": "eval", "step", "heldout_accuracy"}` every evaluation, step 0 being
the policy before RL, and `{"kind": "end", ...}` with the trainer's closing runtime numbers) and `summary.json`
(accuracy before/after, best, held-out size, seed, wall time, adapter location).

    RunLog, TrainLogRecorder   write metrics.jsonl during training (a resumed run keeps the records up to its step)
    read_records, load_run     read a run directory back as a `Run`: its name, summary and records (a half-written
                               last line, from a run stopped while writing it, is dropped with a one-line note)

The verdict on runs is `verdict.py`; the report that shows them is `report.py`.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from transformers import TrainerCallback

from ...numerics import short_repr
from ...run_files import open_for_writing
from ..errors import ConfigError

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"

# Table column -> TRL metric names to try, in order (losses log their clip diagnostics under different names).
TRAIN_METRICS = {
    "reward": ("reward",),
    "entropy": ("entropy",),
    "completion length": ("completions/mean_length",),
    "clip fraction": ("clip_ratio/region_mean", "cispo_clip_ratio"),
}


def read_records(path: str | Path, log=None) -> list[dict]:
    """The JSON records of a metrics file, one per line. A half-written last line (a run killed while writing it) is
    dropped with one line through `log` (default: stderr): the records are appended one at a time, so only the last
    can be torn, and a resumed run logs the steps after its checkpoint again. A bad line before the last is damage,
    not a crash: a ConfigError naming the file and the line."""
    lines = Path(path).read_text().splitlines()
    last = max((number for number, line in enumerate(lines) if line.strip()), default=-1)
    records = []
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            if number == last:
                (log or _to_stderr)(
                    f"{path}: dropped its half-written last line {number + 1} ({error.msg}); a run stopped while "
                    f"writing it, and the resumed run logs those steps again."
                )
                break
            raise ConfigError(
                f"{path}: line {number + 1} is not JSON ({error.msg}: {short_repr(line, 60)}); every line of a run "
                f"log is one JSON record: fix or delete that line, or start afresh with --overwrite_output_dir true."
            ) from None
    return records


def _to_stderr(line: str):
    print(line, file=sys.stderr)


class RunLog:
    """Appends JSON records to a run's metrics file.

    A new run starts the file empty. A resumed run (`resume_step`: the checkpoint's global step) keeps the records
    up to that step, `kept`, and appends after them; later records belong to steps the resumed run does again.

    Under several processes only the main one (`main_process`) touches the file: the others read `kept` and write
    nothing, so a process that starts late cannot empty the file after the main one has written to it. The main one
    rewrites it through a temporary file and a rename, so another process reading `kept` meanwhile reads the earlier
    file or the rewritten one, never a half-written one (both give the same `kept`).
    """

    def __init__(self, path: str | Path, resume_step: int | None = None, main_process: bool = True):
        self.path = Path(path)
        self.main_process = main_process
        self.path.parent.mkdir(parents=True, exist_ok=True)
        quiet = None if main_process else (lambda line: None)  # one process says it
        earlier = read_records(self.path, quiet) if resume_step is not None and self.path.is_file() else []
        self.kept = [record for record in earlier if record["step"] <= resume_step]
        if main_process:
            rewritten = self.path.with_name(self.path.name + ".tmp")
            with open_for_writing(rewritten) as handle:
                handle.write("".join(json.dumps(record) + "\n" for record in self.kept))
            os.replace(rewritten, self.path)

    def write(self, record: dict):
        if not self.main_process:
            return
        with open_for_writing(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")


class TrainLogRecorder(TrainerCallback):
    """Copies every training log TRL emits (reward, entropy, clip ratios, ...) into the run log; the trainer's
    closing log (runtime, mean loss) is recorded as kind "end", TRL's own evaluation (`eval_strategy`, its
    `eval_*` metrics) as kind "trl_eval"."""

    def __init__(self, run_log: RunLog):
        self.run_log = run_log

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and state.is_world_process_zero:
            numbers = {key: value for key, value in logs.items() if isinstance(value, (int, float))}
            evaluation = any(key.startswith("eval_") for key in logs)
            kind = "end" if "train_runtime" in logs else "trl_eval" if evaluation else "train"
            self.run_log.write({"kind": kind, "step": state.global_step, **numbers})
        return control


@dataclass
class Run:
    """One finished run: its name, its summary and every record it logged."""

    name: str
    summary: dict
    records: list[dict]

    def series(self, metric: str, kind: str = "train") -> list[tuple[int, float]]:
        return [
            (record["step"], record[metric])
            for record in self.records
            if record.get("kind") == kind and isinstance(record.get(metric), (int, float))
        ]

    def accuracy(self) -> list[tuple[int, float]]:
        return self.series("heldout_accuracy", kind="eval")

    def final(self, column: str) -> float | None:
        for metric in TRAIN_METRICS[column]:
            points = self.series(metric)
            if points:
                return points[-1][1]
        return None

    @property
    def final_accuracy(self) -> float:
        return self.summary["accuracy_after"]

    @property
    def best(self) -> tuple[float, int]:
        step, accuracy = max(self.accuracy(), key=lambda point: (point[1], -point[0]))
        return accuracy, step


def load_run(directory: str | Path, name: str | None = None) -> Run:
    directory = Path(directory)
    summary = json.loads((directory / SUMMARY_FILE).read_text())
    records = read_records(directory / METRICS_FILE)
    return Run(name or summary.get("name") or directory.name, summary, records)
