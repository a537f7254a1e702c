"""The time-to-target benchmark's logic on made-up numbers (target rule, stop decision, the stop callback, run
order, the summary's medians and ranges) and one tiny run of the whole pipeline on the CPU. No wall-clock asserts."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from benchmarks import time_to_target as ttt
from benchmarks.time_to_target_run import TargetStop, stop_decision, time_to_target


def test_target_rule():
    assert ttt.target_accuracy(0.156, 0.75, 0.9) == pytest.approx(0.156 + 0.9 * 0.594)
    assert ttt.target_accuracy(0.2, 0.6, 1.0) == pytest.approx(0.6)
    assert ttt.target_accuracy(0.3, 0.3, 0.9) is None  # no gain, no target
    assert ttt.target_accuracy(0.3, 0.1, 0.9) is None
    with pytest.raises(ValueError, match="--fraction"):
        ttt.target_accuracy(0.1, 0.5, 1.5)


def test_stop_decision():
    assert stop_decision(10.0, 100.0, 0.7, 0.69) == "target"
    assert stop_decision(10.0, 100.0, 0.68, 0.69) is None
    assert stop_decision(10.0, 100.0, None, 0.69) is None  # no evaluation at this step
    assert stop_decision(100.0, 100.0, None, 0.69) == "cutoff"
    assert stop_decision(150.0, 100.0, 0.5, 0.69) == "cutoff"
    assert stop_decision(150.0, 100.0, 0.69, 0.69) == "target"  # reached at the cutoff's evaluation
    assert stop_decision(1e9, None, 0.99, None) is None  # the reference run: no target, no budget


class FakeAccuracy:
    """The held-out callback's interface: `history` [(step, a)], `measure(model, step)`; accuracies by step."""

    def __init__(self, by_step):
        self.by_step = by_step
        self.history = [(0, by_step[0])]
        self.measured = []

    def measure(self, model, step):
        self.measured.append(step)
        self.history.append((step, self.by_step[step]))


def drive(stop: TargetStop, accuracy: FakeAccuracy, step_seconds: list[float], eval_every: int):
    """Feed the callback the steps as the trainer would: step time, evaluation every k steps, then on_step_end."""
    state, control = SimpleNamespace(global_step=0), SimpleNamespace(should_training_stop=False)
    stop.on_train_begin(None, state, control)
    for seconds in step_seconds:
        stop.clock.seconds.append(seconds)
        state.global_step += 1
        if state.global_step % eval_every == 0:
            accuracy.history.append((state.global_step, accuracy.by_step[state.global_step]))
        stop.on_step_end(None, state, control, model=None)
        if control.should_training_stop:
            break
    return state.global_step


def test_stop_at_target_at_an_evaluation():
    accuracy = FakeAccuracy({0: 0.1, 2: 0.5, 4: 0.72, 6: 0.8})
    stop = TargetStop(SimpleNamespace(seconds=[]), accuracy, target=0.7, budget=100.0)
    steps = drive(stop, accuracy, [3.0] * 8, eval_every=2)
    assert (steps, stop.reason, stop.stop_step) == (4, "target", 4)
    assert stop.curve == [(0, 0.1, 0.0), (2, 0.5, 6.0), (4, 0.72, 12.0)]
    assert time_to_target(stop.curve, 0.7) == (4, 12.0)
    assert accuracy.measured == []


def test_cutoff_measures_when_no_evaluation_ran():
    accuracy = FakeAccuracy({0: 0.1, 2: 0.3, 3: 0.4, 4: 0.5})
    stop = TargetStop(SimpleNamespace(seconds=[]), accuracy, target=0.7, budget=10.0)
    steps = drive(stop, accuracy, [4.0] * 8, eval_every=2)  # clock 12 ≥ 10 at step 3, no evaluation there
    assert (steps, stop.reason) == (3, "cutoff")
    assert accuracy.measured == [3]
    assert stop.curve[-1] == (3, 0.4, 12.0)
    assert time_to_target(stop.curve, 0.7) is None


def test_cutoff_evaluation_that_reaches_counts_as_target():
    accuracy = FakeAccuracy({0: 0.1, 3: 0.75})
    stop = TargetStop(SimpleNamespace(seconds=[]), accuracy, target=0.7, budget=10.0)
    drive(stop, accuracy, [4.0] * 8, eval_every=5)
    assert stop.reason == "target" and time_to_target(stop.curve, 0.7) == (3, 12.0)


def test_run_order_reference_first_contenders_rotated():
    names = ["a", "b", "c"]
    assert ttt.run_order(0, names) == ["trl", "a", "b", "c"]
    assert ttt.run_order(1, names) == ["trl", "b", "c", "a"]
    assert ttt.run_order(4, names) == ["trl", "b", "c", "a"]


def record(name, seed, time, accuracy, completions=100, memory=2.0):
    return {"name": name, "seed": seed, "time_to_target": time, "accuracy_at_stop": accuracy,
            "completions": completions, "completion_slots": 10 * completions, "peak_memory_gib": memory,
            "target": 0.6 if name == "trl" else None}


def test_summary_median_range_and_ratio():
    records = [
        record("trl", 0, 10.0, 0.70), record("trl", 1, 12.0, 0.72), record("trl", 2, 20.0, 0.68, memory=2.5),
        record("fast", 0, 4.0, 0.61, completions=50), record("fast", 1, 7.0, 0.62, completions=70),
        record("fast", 2, None, 0.55, completions=90, memory=1.5),
    ]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in ttt.summary_table(records).splitlines()[2:]}
    assert rows["trl"][:2] == ["3/3", "12.0 (10.0–20.0)"]
    assert rows["trl"][2] == "1.00 (1.00–1.00)"
    assert rows["trl"][-1] == "2.50"
    # times 4, 7, ∞ → median 7; ratios 0.4, 0.583, ∞ → median 0.58
    assert rows["fast"][:3] == ["2/3", "7.0 (4.0–not reached)", "0.58 (0.40–not reached)"]
    assert rows["fast"][3:] == ["61.0%", "70", "700", "2.00"]
    assert ttt.median_range([1.0, math.inf, math.inf]) == (math.inf, 1.0, math.inf)


def test_first_reaching():
    curve = [(0, 0.1, 0.0), (5, 0.5, 20.0), (10, 0.8, 41.0), (15, 0.7, 60.0)]
    assert ttt.first_reaching(curve, 0.65) == 41.0
    assert ttt.first_reaching(curve, 0.9) is None
    assert ttt.first_reaching(curve, None) is None


def test_cpu_smoke_pipeline(tmp_path):
    """TRL then one contender, one process each, tiny settings; a target no tiny run reaches, so the contender
    stops at the 2× budget or at max_steps."""
    code = ttt.main(["--out", str(tmp_path), "--cpu_smoke", "--seeds", "0", "--steps", "2", "--eval_every", "1",
                     "--contenders", "merged", "--fixed_target", "1.01"])
    assert code == 0
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [r["name"] for r in records] == ["trl", "merged"]
    reference, merged = records
    assert reference["trainer"] == "trl" and merged["trainer"] == "trl_zoo"
    assert "--merge_adapter_for_generation" in merged["flags"]
    assert reference["steps"] == 2 and reference["stop_reason"] == "max_steps"
    assert merged["budget_seconds"] == pytest.approx(2 * reference["training_seconds"])
    assert merged["stop_reason"] in ("cutoff", "max_steps") and not merged["reached"]
    for r in records:
        assert r["completions"] == 4 * r["steps"]  # 4 rows a step: 2 prompts × 2 completions
        assert 0 < r["completion_slots"] <= 4 * 4 * r["steps"]  # rows × width ≤ 4 × max_completion_length
        assert r["sequence_slots"] > r["completion_slots"]
        assert [point[0] for point in r["curve"]][:2] == [0, 1] and r["evaluations"] == len(r["curve"])
        assert r["training_seconds"] == pytest.approx(sum(r["step_seconds"]))
    assert (tmp_path / "summary.md").read_text().startswith("| run |")


def test_resume_reuses_finished_runs(tmp_path, monkeypatch):
    """A finished run's record is read back, not rerun; the target and budget are derived from it again."""
    curve = [[0, 0.2, 0.0], [2, 0.6, 8.0]]
    for name, extra in (("trl", {"training_seconds": 8.0}), ("merged", {"training_seconds": 3.0})):
        run_dir = tmp_path / "seed0" / name
        run_dir.mkdir(parents=True)
        line = {"trainer": name, "exit_code": 0, "steps": 2, "curve": curve, "stop_reason": "max_steps",
                "time_to_target": None, "accuracy_at_stop": 0.6, "completions": 8, "completion_slots": 32,
                "peak_memory_gib": None, **extra}
        (run_dir / "record.jsonl").write_text(json.dumps(line) + "\n")
    monkeypatch.setattr(ttt.subprocess, "run", lambda *a, **k: pytest.fail("a finished run was rerun"))
    argv = ["--out", str(tmp_path), "--seeds", "0", "--steps", "2", "--contenders", "merged", "--resume"]
    assert ttt.main(argv) == 0
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [r["name"] for r in records] == ["trl", "merged"]
    assert records[0]["target"] == pytest.approx(0.2 + 0.9 * 0.4)
    assert records[0]["budget_seconds"] == pytest.approx(16.0)
    assert records[0]["time_to_target"] == 8.0
