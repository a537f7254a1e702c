"""The time-to-target benchmark's logic on made-up numbers (target rule, stop decision, the stop callback, run
order, the summary's medians and ranges) and one tiny run of the whole pipeline on the CPU. No wall-clock asserts."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import time_to_target as ttt
from benchmarks.lib.time_to_target_run import TargetStop, compile_counts, stop_decision, time_to_target

from .packaged_model import needs_packaged_model


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
    """The held-out callback's interface: `history` [(step, a)], `measure(model, step, state)`; accuracies by step."""

    def __init__(self, by_step):
        self.by_step = by_step
        self.history = [(0, by_step[0])]
        self.measured = []

    def measure(self, model, step, state=None):
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


def test_to_the_end_goes_past_the_target_and_stops_only_at_the_budget():
    accuracy = FakeAccuracy({0: 0.1, 2: 0.5, 4: 0.72, 6: 0.65, 8: 0.9})
    stop = TargetStop(SimpleNamespace(seconds=[]), accuracy, target=0.7, budget=100.0, to_the_end=True)
    assert drive(stop, accuracy, [3.0] * 8, eval_every=2) == 8 and stop.reason is None
    assert time_to_target(stop.curve, 0.7) == (4, 12.0) and stop.curve[-1] == (8, 0.9, 24.0)
    accuracy = FakeAccuracy({0: 0.1, 2: 0.75, 4: 0.8})
    stop = TargetStop(SimpleNamespace(seconds=[]), accuracy, target=0.7, budget=10.0, to_the_end=True)
    assert drive(stop, accuracy, [3.0] * 8, eval_every=2) == 4 and stop.reason == "cutoff"


def test_a_to_the_end_study_reruns_runs_that_stopped_at_the_target_and_says_where_they_end(tmp_path, monkeypatch):
    """A contender's run made without --to_the_end is not counted by a --to_the_end study (and the other way round);
    the summary gives each contender's end accuracy against TRL's end, per seed."""
    target = 0.2 + 0.9 * 0.4
    run_dir = tmp_path / "seed0" / "merged"
    run_dir.mkdir(parents=True)
    (run_dir / "record.jsonl").write_text(json.dumps(reference_line(
        trainer="trl_zoo", target=target, budget_seconds=16.0)) + "\n")
    assert ttt.finished_record(run_dir, target, 16.0, False) is not None
    assert ttt.finished_record(run_dir, target, 16.0, True) is None

    def run(command, **kwargs):
        record = Path(command[command.index("--record") + 1])
        name = record.parent.name
        ends = "--to_the_end" in command
        assert ends == (name != "trl")
        line = reference_line(trainer="trl" if name == "trl" else "trl_zoo", to_the_end=ends,
                              accuracy_at_stop=0.55 if ends else 0.6)
        if name != "trl":
            line.update(target=float(command[command.index("--target") + 1]),
                        budget_seconds=float(command[command.index("--budget_seconds") + 1]))
        record.write_text(json.dumps(line) + "\n")
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(ttt.subprocess, "run", run)
    assert ttt.main(["--out", str(tmp_path), "--seeds", "0", "--steps", "2", "--contenders", "merged", "--resume",
                     "--to_the_end"]) == 0
    summary = (tmp_path / "summary.md").read_text()
    assert "accuracy at the end minus TRL's at its end" in summary and "merged -5.0 (-5.0–-5.0)" in summary


def test_run_order_reference_first_contenders_rotated():
    names = ["a", "b", "c"]
    assert ttt.run_order(0, names) == ["trl", "a", "b", "c"]
    assert ttt.run_order(1, names) == ["trl", "b", "c", "a"]
    assert ttt.run_order(4, names) == ["trl", "b", "c", "a"]


def test_a_warm_cache_contender_runs_right_after_its_cold_twin():
    warm = "b" + ttt.WARM
    assert ttt.run_order(0, ["a", warm, "b", "c"]) == ["trl", "a", "b", warm, "c"]
    assert ttt.run_order(2, ["a", "b", "c", warm]) == ["trl", "c", "a", "b", warm]
    assert ttt.run_order(1, [warm, "a"]) == ["trl", "a", warm]  # without its twin: rotated like any other


def test_compiled_runs_start_cold_and_the_warm_twin_reuses_the_cache(tmp_path, monkeypatch):
    """Every run's TORCHINDUCTOR_CACHE_DIR is DIR/compile_cache/seed<s>/<cold twin> (and VLLM_CACHE_ROOT inside it:
    a colocated vLLM moves the process's inductor cache under its root); a cold run finds it empty
    whatever an earlier run left, the warm contender finds what its twin of the same seed wrote."""
    cold, warm = "merged_compiled_two_steps", "merged_compiled_two_steps" + ttt.WARM
    seen = {}

    def run(command, env, **kwargs):
        name = Path(command[command.index("--output_dir") + 1]).name
        cache = Path(env["TORCHINDUCTOR_CACHE_DIR"])
        assert Path(env["VLLM_CACHE_ROOT"]) == cache / "vllm"  # vLLM redirects the process's caches there
        seen[name] = (cache, sorted(p.name for p in cache.glob("*")) if cache.exists() else [])
        cache.mkdir(parents=True, exist_ok=True)
        (cache / f"written_by_{name}").touch()
        curve = [[0, 0.2, 0.0], [2, 0.6, 8.0]]
        line = {"trainer": "trl" if "trl" == name else "trl_zoo", "exit_code": 0, "steps": 2, "curve": curve,
                "stop_reason": "max_steps", "time_to_target": 8.0, "accuracy_at_stop": 0.6, "completions": 8,
                "completion_slots": 32, "peak_memory_gib": None, "training_seconds": 8.0, "step_seconds": [4.0, 4.0],
                "target": 0.2 + 0.9 * 0.4, "budget_seconds": 16.0}
        Path(command[command.index("--record") + 1]).write_text(json.dumps(line) + "\n")
        return SimpleNamespace(returncode=0)

    stale = tmp_path / "compile_cache" / "seed0" / cold
    stale.mkdir(parents=True)
    (stale / "left_by_an_earlier_study").touch()
    monkeypatch.setattr(ttt.subprocess, "run", run)
    assert ttt.main(["--out", str(tmp_path), "--seeds", "0", "--steps", "2", "--contenders", f"{warm},{cold}"]) == 0
    assert seen[cold] == (stale, [])
    assert seen[warm] == (stale, [f"written_by_{cold}"])
    assert seen["trl"][0] == tmp_path / "compile_cache" / "seed0" / "trl"


def record(name, seed, time, accuracy, completions=100, memory=2.0, steps=None):
    return {"name": name, "seed": seed, "time_to_target": time, "accuracy_at_stop": accuracy,
            "completions": completions, "completion_slots": 10 * completions, "peak_memory_gib": memory,
            "target": 0.6 if name == "trl" else None, "step_seconds": steps}


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
    assert rows["trl"][-2:] == ["2.50", "n/a"]  # training peak (an older record's process peak), evaluation peak
    # times 4, 7, ∞ → median 7; ratios 0.4, 0.583, ∞ → median 0.58
    assert rows["fast"][:3] == ["2/3", "7.0 (4.0–not reached)", "0.58 (0.40–not reached)"]
    assert rows["fast"][3:] == ["n/a", "61.0%", "n/a", "n/a", "70", "700", "2.00", "n/a"]  # n/a: no TRL-best run
    assert ttt.median_range([1.0, math.inf, math.inf]) == (math.inf, 1.0, math.inf)


def test_every_time_is_also_stated_against_trl_at_its_best_and_memory_splits_training_from_evaluation():
    """TRL's best (its own trainer, two optimizer steps a generation batch) reaches in 8 s and 6 s: a contender's
    4 s and 9 s are 0.5× and 1.5× it (median 1.0); a seed where TRL's best did not reach is left out of that column.
    Training and evaluation peaks are reported apart, each the max over seeds."""
    def run(name, seed, time, training, evaluation):
        return {**record(name, seed, time, 0.7), "training_peak_memory_gib": training,
                "evaluation_peak_memory_gib": evaluation}

    records = [run("trl", 0, 10.0, 1.3, 3.7), run("trl", 1, 10.0, 1.3, 3.7), run("trl", 2, 10.0, 1.3, 3.7),
               run(ttt.TRL_BEST, 0, 8.0, 2.0, 3.7), run(ttt.TRL_BEST, 1, 6.0, 2.1, 3.7),
               run(ttt.TRL_BEST, 2, None, 2.0, 3.7),
               run("fast", 0, 4.0, 2.4, 3.6), run("fast", 1, 9.0, 2.2, 3.8), run("fast", 2, 5.0, 2.3, 3.7)]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in ttt.summary_table(records).splitlines()[2:]}
    assert rows["fast"][3] == "1.00 (0.50–1.50)"
    assert rows[ttt.TRL_BEST][3] == "1.00 (1.00–1.00)"  # its seed 2 did not reach: no ratio there
    assert rows["fast"][-2:] == ["2.40", "3.80"] and rows["trl"][-2:] == ["1.30", "3.70"]


def test_trl_at_its_best_runs_on_trls_own_trainer_with_its_own_field(tmp_path):
    args = SimpleNamespace(cpu_smoke=False, steps=40, max_steps_factor=1.0, to_the_end=False, task="chat_arithmetic",
                           eval_every=5, eval_batch_size=500, extra=[])
    command = ttt.run_command(ttt.TRL_BEST, 0, tmp_path, args, 0.5, 100.0)
    assert command[command.index("--trainer") + 1] == "trl"
    assert command[command.index("--steps_per_generation") + 1] == str(2 * ttt.TASK_ACCUMULATION)
    assert ttt.trainer_of("merged_two_steps") == "trl_zoo" and ttt.TRL_BEST in ttt.DEFAULT_CONTENDERS


def test_the_training_peak_leaves_the_held_out_evaluation_out(monkeypatch):
    """The device's peak counter is read and reset around each evaluation: before the first (step 0) into the setup
    peak, before a later one into the training peak, after each into the evaluation peak. Neither a 3.9 GiB model
    load nor a 3.7 GiB evaluation hides a 1.3 GiB training peak."""
    from benchmarks.lib import time_to_target_run as run

    peak = {"now": 0.0}
    monkeypatch.setattr(run.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(run.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(run.torch.cuda, "max_memory_allocated", lambda: peak["now"])
    monkeypatch.setattr(run.torch.cuda, "reset_peak_memory_stats", lambda: peak.update(now=0.5))
    instrumentation = run.Instrumentation(target=None, budget=None)

    def evaluate(model):
        peak["now"] = 3.7
        return 0.5

    timed = instrumentation.timed(evaluate)
    peak["now"] = 3.9  # loading the model, before the evaluation at step 0
    assert timed(None) == 0.5
    peak["now"] = 1.3  # training
    assert timed(None) == 0.5
    peak["now"] = 1.1  # training after the last evaluation
    instrumentation.close_training_peak()
    peaks = instrumentation.setup_peak, instrumentation.training_peak, instrumentation.evaluation_peak
    assert peaks == (3.9, 1.3, 3.7)


def test_step_time_ratio_over_the_same_steps_without_the_first():
    """(2 + 2) / (4 + 4) over steps 2..3, TRL's later steps and both first steps left out; ratios 0.5 and 1.5 →
    median 1.0 (0.5–1.5); a run of one step has no ratio."""
    trl_steps = [9.0, 4.0, 4.0, 100.0]
    records = [record("trl", 0, 10.0, 0.7, steps=trl_steps), record("trl", 1, 10.0, 0.7, steps=trl_steps),
               record("half", 0, 5.0, 0.7, steps=[30.0, 2.0, 2.0]), record("half", 1, 5.0, 0.7, steps=[1.0, 6.0, 6.0])]
    assert ttt.step_time_ratio(records[2], records[0]) == pytest.approx(0.5)
    assert ttt.step_time_ratio({"step_seconds": [3.0]}, records[0]) is None
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in ttt.summary_table(records).splitlines()[2:]}
    assert rows["half"][5] == "1.00 (0.50–1.50)" and rows["trl"][5] == "1.00 (1.00–1.00)"
    # the first step (one-time costs such as compiling), apart: median of 30 and 1
    assert rows["half"][6] == "15.5" and rows["trl"][6] == "9.0"


def test_first_reaching():
    curve = [(0, 0.1, 0.0), (5, 0.5, 20.0), (10, 0.8, 41.0), (15, 0.7, 60.0)]
    assert ttt.first_reaching(curve, 0.65) == 41.0
    assert ttt.first_reaching(curve, 0.9) is None
    assert ttt.first_reaching(curve, None) is None


@needs_packaged_model
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
    assert not list(tmp_path.rglob("*.safetensors")) and (tmp_path / "seed0" / "merged" / "metrics.jsonl").exists()


def test_resume_reuses_finished_runs(tmp_path, monkeypatch):
    """A finished run's record is read back, not rerun; the target and budget are derived from it again."""
    curve = [[0, 0.2, 0.0], [2, 0.6, 8.0]]
    for name, extra in (("trl", {"training_seconds": 8.0}),
                        ("merged", {"training_seconds": 3.0, "target": 0.2 + 0.9 * 0.4, "budget_seconds": 16.0})):
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



def test_summarize_reads_finished_runs_and_runs_nothing(tmp_path, monkeypatch):
    """Seed folders of two cards copied into one DIR: every finished run is counted, a missing one skipped, a seed
    without its TRL reference left out; no process starts."""
    target = 0.2 + 0.9 * 0.4
    for seed, names in ((0, ("trl", "merged", "static_cache")), (1, ("trl", "merged")), (2, ("merged",))):
        for name in names:
            run_dir = tmp_path / f"seed{seed}" / name
            run_dir.mkdir(parents=True)
            extra = {} if name == "trl" else {"target": target, "budget_seconds": 16.0, "time_to_target": 4.0}
            (run_dir / "record.jsonl").write_text(json.dumps(reference_line(
                trainer="trl" if name == "trl" else "trl_zoo", **extra)) + "\n")
    monkeypatch.setattr(ttt.subprocess, "run", lambda *a, **k: pytest.fail("--summarize started a run"))
    argv = ["--out", str(tmp_path), "--seeds", "0,1,2", "--steps", "2", "--contenders", "merged,static_cache",
            "--summarize"]
    assert ttt.main(argv) == 0
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [(r["seed"], r["name"]) for r in records] == [(0, "trl"), (0, "merged"), (0, "static_cache"),
                                                         (1, "trl"), (1, "merged")]
    rows = {line.split(" | ")[0].strip("| "): line for line in (tmp_path / "summary.md").read_text().splitlines()}
    assert "| 2/2 |" in rows["merged"] and "0.50 (0.50–0.50)" in rows["merged"]
    assert "| 1/1 |" in rows["static_cache"]

# --- records under interruption: a killed run is rerun, not counted; a failed run is reported, not rerun ---------


def reference_line(**extra):
    return {"trainer": "trl", "exit_code": 0, "steps": 2, "curve": [[0, 0.2, 0.0], [2, 0.6, 8.0]],
            "stop_reason": "max_steps", "time_to_target": None, "accuracy_at_stop": 0.6, "completions": 8,
            "completion_slots": 32, "peak_memory_gib": None, "training_seconds": 8.0, "eval_seconds": 3.0,
            "evaluations": 3, **extra}


def fake_child(behaviour):
    """A stand-in for the run's process: `behaviour(name, record_path)` writes (or not) and returns the exit code."""
    calls = []

    def run(command, **kwargs):
        record = Path(command[command.index("--record") + 1])
        name = record.parent.name
        calls.append(name)
        target = float(command[command.index("--target") + 1]) if "--target" in command else None
        budget = float(command[command.index("--budget_seconds") + 1]) if "--budget_seconds" in command else None
        return SimpleNamespace(returncode=behaviour(name, record, target, budget))

    return run, calls


def write_record(record, name, target, budget, **extra):
    line = reference_line(trainer="trl" if name == "trl" else "trl_zoo", target=target, budget_seconds=budget,
                          **extra)
    with open(record, "a") as handle:
        handle.write(json.dumps(line) + "\n")
    return 0


def study(tmp_path, *extra):
    return ["--out", str(tmp_path), "--seeds", "0", "--steps", "2", "--contenders", "merged,static_cache",
            "--resume", *extra]


def test_a_killed_run_is_rerun_and_not_counted(tmp_path, monkeypatch):
    def killed_midway(name, record, target, budget):
        if name == "static_cache":
            record.write_text('{"trainer": "trl_zoo", "exit_co')  # cut mid-line, then killed
            return -15
        return write_record(record, name, target, budget)

    run, calls = fake_child(killed_midway)
    monkeypatch.setattr(ttt.subprocess, "run", run)
    monkeypatch.setattr(ttt, "run_order", lambda index, names: ["trl", "merged", "static_cache"])
    assert ttt.main(study(tmp_path)) == 3  # incomplete
    assert calls == ["trl", "merged", "static_cache"]
    names = [json.loads(line)["name"] for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert names == ["trl", "merged"]  # the killed run is not counted
    assert not (tmp_path / "seed0" / "static_cache" / "record.jsonl").exists()

    run, calls = fake_child(lambda name, record, target, budget: write_record(record, name, target, budget))
    monkeypatch.setattr(ttt.subprocess, "run", run)
    assert ttt.main(study(tmp_path)) == 0
    assert calls == ["static_cache"]  # only the killed run runs again
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [r["name"] for r in records] == ["trl", "merged", "static_cache"]
    assert all(r["exit_code"] == 0 for r in records)


def test_a_cut_record_line_is_rerun(tmp_path, monkeypatch):
    """A process killed while writing its line (no signal seen by the study: the study was killed too)."""
    run_dir = tmp_path / "seed0" / "trl"
    run_dir.mkdir(parents=True)
    (run_dir / "record.jsonl").write_text('{"trainer": "trl", "exit_code": 0, "ste')
    run, calls = fake_child(lambda name, record, target, budget: write_record(record, name, target, budget))
    monkeypatch.setattr(ttt.subprocess, "run", run)
    assert ttt.main(study(tmp_path, "--contenders", "merged")) == 0
    assert calls == ["trl", "merged"]


def test_a_failed_run_is_reported_and_not_rerun(tmp_path, monkeypatch):
    def failing(name, record, target, budget):
        if name == "static_cache":
            (record.parent / "log.txt").write_text("ValueError: refused\n")
            return 1
        return write_record(record, name, target, budget)

    run, calls = fake_child(failing)
    monkeypatch.setattr(ttt.subprocess, "run", run)
    assert ttt.main(study(tmp_path)) == 0
    assert "failed: static_cache seed 0 (exit 1): ValueError: refused" in (tmp_path / "summary.md").read_text()
    run, calls = fake_child(lambda *a: pytest.fail("a failed run was rerun without --retry_failed"))
    monkeypatch.setattr(ttt.subprocess, "run", run)
    assert ttt.main(study(tmp_path)) == 0
    run, calls = fake_child(lambda name, record, target, budget: write_record(record, name, target, budget))
    monkeypatch.setattr(ttt.subprocess, "run", run)
    assert ttt.main(study(tmp_path, "--retry_failed")) == 0
    assert calls == ["static_cache"]
    assert "failed" not in (tmp_path / "summary.md").read_text()


def test_a_contender_run_against_another_target_is_rerun(tmp_path, monkeypatch):
    run, calls = fake_child(lambda name, record, target, budget: write_record(record, name, target, budget))
    monkeypatch.setattr(ttt.subprocess, "run", run)
    assert ttt.main(study(tmp_path, "--contenders", "merged")) == 0
    assert ttt.main(study(tmp_path, "--contenders", "merged")) == 0
    assert calls == ["trl", "merged"]
    assert ttt.main(study(tmp_path, "--contenders", "merged", "--fraction", "0.5")) == 0
    assert calls == ["trl", "merged", "merged"]  # TRL's run is reused, the contender's target changed


def test_deadline_stops_before_a_run_it_cannot_finish(tmp_path, monkeypatch):
    run, calls = fake_child(lambda name, record, target, budget: write_record(record, name, target, budget,
                                                                              wall_seconds=20.0))
    monkeypatch.setattr(ttt.subprocess, "run", run)
    # TRL's estimate from the flags: 10 + 2 · 30 + 3 · 5 = 85 s; 1 minute is too short to start it
    flags = ["--step_seconds", "30", "--eval_seconds", "5", "--startup_seconds", "10"]
    assert ttt.main(study(tmp_path, *flags, "--deadline_minutes", "1")) == 3
    assert calls == []
    # 1.5 minutes: TRL's run; contenders estimated from its record: startup 20 − 8 − 3 = 9 s, 8 s training, 3 evals
    # of 1 s = 20 s each; the fake runs take no time, so all fit
    assert ttt.main(study(tmp_path, *flags, "--deadline_minutes", "1.5")) == 0
    assert calls == ["trl", "merged", "static_cache"]


def test_estimates_and_plan(tmp_path, capsys):
    args = SimpleNamespace(steps=40, max_steps_factor=1.0, eval_every=5, estimate_factor=1.0, step_seconds=4.6,
                           eval_seconds=15.0, startup_seconds=30.0, resume=False, cpu_smoke=False, piece_minutes=9.0,
                           to_the_end=False,
                           plan_minutes=30.0)
    assert ttt.evaluations_in(40, 5) == 9 and ttt.evaluations_in(42, 5) == 10 and ttt.evaluations_in(2, 1) == 3
    assert ttt.estimate_seconds("trl", args) == pytest.approx(30 + 40 * 4.6 + 9 * 15)
    reference = {"steps": 40, "training_seconds": 200.0, "eval_seconds": 90.0, "evaluations": 9, "wall_seconds": 320.0}
    assert ttt.estimate_seconds("merged", args, reference) == pytest.approx(30 + 200 + 90)
    args.estimate_factor = 2.0
    assert ttt.estimate_seconds("merged", args, reference) == pytest.approx(30 + 400 + 90)
    args.estimate_factor = 1.0
    rows = ttt.plan(args, [0, 1], ["merged", "static_cache"], tmp_path)
    assert [(r["seed"], r["name"], r["piece"]) for r in rows] == [
        (0, "trl", 1), (0, "merged", 2), (0, "static_cache", 3), (1, "trl", 4), (1, "static_cache", 5),
        (1, "merged", 6)]  # 5.8 min a run: one run a 9-minute piece
    assert [r["fits"] for r in rows] == [True] * 5 + [False]  # 5 × 5.82 = 29.1 ≤ 30 min
    assert ttt.main(["--out", str(tmp_path), "--seeds", "0", "--contenders", "merged", "--plan_minutes", "30",
                     "--eval_seconds", "15", "--startup_seconds", "30"]) == 0
    printed = capsys.readouterr().out
    assert "| 0 | merged | 5.8 | 2 | 11.6 | yes |" in printed
    assert "--resume --deadline_minutes 9.0" in printed and "--plan_minutes" not in printed.split("timeout")[-1]


def test_a_contender_is_estimated_from_its_own_finished_seeds():
    args = SimpleNamespace(steps=40, max_steps_factor=1.0, eval_every=5, estimate_factor=1.0, step_seconds=4.6,
                           eval_seconds=15.0, startup_seconds=30.0)
    reference = {"steps": 40, "training_seconds": 200.0, "eval_seconds": 90.0, "evaluations": 9, "wall_seconds": 320.0}
    from_trl = ttt.estimate_seconds("merged", args, reference)
    earlier = [{"name": "merged", "wall_seconds": 100.0}, {"name": "merged", "wall_seconds": 120.0},
               {"name": "merged", "wall_seconds": 900.0, "failed": True}]
    assert ttt.estimate_seconds("merged", args, reference, earlier) == pytest.approx(120.0 * ttt.SAME_RUN_MARGIN)
    # never above the TRL-based estimate, and TRL's own run is always estimated from the flags
    assert ttt.estimate_seconds("merged", args, reference, [{"name": "merged", "wall_seconds": 400.0}]) == from_trl
    assert ttt.estimate_seconds("trl", args, None, earlier) == pytest.approx(30 + 40 * 4.6 + 9 * 15)


def test_the_deadline_uses_a_contenders_earlier_seeds(tmp_path, monkeypatch):
    """Seed 0's runs finish; seed 1's contender fits the deadline only on seed 0's own measurement (20 s), not on
    TRL's pace (TRL's records say 500 s of training)."""
    clock = [0.0]

    def behaviour(name, record, target, budget):
        # seed 1's TRL run leaves 50 s of the 5-minute deadline; the contender's process takes 20 s
        clock[0] += 250.0 if (name == "trl" and record.parent.parent.name == "seed1") else 20.0
        return write_record(record, name, target, budget, **({"training_seconds": 500.0} if name == "trl" else {}))

    run, calls = fake_child(behaviour)
    monkeypatch.setattr(ttt.subprocess, "run", run)
    monkeypatch.setattr(ttt.time, "perf_counter", lambda: clock[0])
    argv = ["--out", str(tmp_path), "--seeds", "0", "--steps", "2", "--contenders", "merged", "--resume",
            "--step_seconds", "1", "--startup_seconds", "1", "--eval_seconds", "1"]
    assert ttt.main(argv) == 0 and calls == ["trl", "merged"]
    calls.clear()
    clock[0] = 0.0
    argv[argv.index("--seeds") + 1] = "0,1"
    assert ttt.main([*argv, "--deadline_minutes", "5"]) == 0
    assert calls == ["trl", "merged"]  # seed 1's: merged estimated at 20 × 1.25 = 25 s ≤ 50 s left


def test_define_adds_a_contender():
    try:
        name = ttt.define_contender("combo=--merge_adapter_for_generation true --cache_implementation static")
        assert ttt.CONTENDERS[name] == ["--merge_adapter_for_generation", "true", "--cache_implementation", "static"]
    finally:
        ttt.CONTENDERS.pop("combo", None)
    with pytest.raises(SystemExit, match="--define"):
        ttt.define_contender("trl=--foo 1")


# a contender named by its speed recipe: the explicit flags of the fields the recipe sets
RECIPE_CONTENDER_FLAGS = {
    "lora_graphed": [*ttt.CONTENDERS["merged_cuda_graph_two_steps"], "--skip_on_policy_old_logps", "true",
                     "--fused_lora", "true"],
    "vllm": ["--steps_per_generation", "8", "--skip_on_policy_old_logps", "true", "--fused_lora", "true",
             "--compiled_layers", "true"],
}


@pytest.mark.parametrize("name", sorted(ttt.CONTENDERS))
def test_every_contender_is_config_fields_trl_zoo_accepts(name, tmp_path):
    """Each contender is a set of fields a user sets: they parse into trl_zoo's GRPOConfig, with the values meant."""
    from trl_zoo.cli.arguments.train_arguments import parse_train_args

    flags = ttt.CONTENDERS[name]
    cpu = ["--use_cpu", "true"] if "--bf16" in flags else []  # bf16 without a GPU: TrainingArguments asks for it
    _, training, model = parse_train_args(["--task", "chat_arithmetic", "--output_dir", str(tmp_path / "out"),
                                           *ttt.contender_flags(name), *cpu], log=lambda *a: None)
    if "--speed_recipe" in flags:  # a recipe contender: the fields it sets, spelled out
        at = flags.index("--speed_recipe")
        flags = [*RECIPE_CONTENDER_FLAGS[flags[at + 1]], *flags[:at], *flags[at + 2:]]  # a field it gives wins

    def on(flag: str) -> bool:  # the last value given for a boolean field's flag
        values = [flags[i + 1] for i, f in enumerate(flags) if f == flag]
        return bool(values) and values[-1] == "true"

    assert model.dtype == ("bfloat16" if "--dtype" in flags else "float32")  # TRL's ModelConfig default: float32
    assert training.merge_adapter_for_generation == ("--merge_adapter_for_generation" in flags)
    assert training.use_transformers_continuous_batching == ("--use_transformers_continuous_batching" in flags)
    assert training.cache_implementation == ("static" if "--cache_implementation" in flags else None)
    expected = int(flags[flags.index("--steps_per_generation") + 1]) if "--steps_per_generation" in flags else 4
    assert training.steps_per_generation == expected and expected % 4 == 0  # whole optimizer steps a generation
    assert training.gradient_accumulation_steps == 4  # the preset's: 8 = two optimizer steps a generation batch
    assert (training.dynamic_sampling == "greso") == ("--dynamic_sampling" in flags)
    assert training.skip_zero_advantage == ("--skip_zero_advantage" in flags)
    assert training.length_bucketing == ("--length_bucketing" in flags)
    assert training.compile_generation == ("--compile_generation" in flags)
    assert training.generation_autocast == ("--generation_autocast" in flags)
    given = "--compile_generation_backend" in flags
    backend = flags[flags.index("--compile_generation_backend") + 1] if given else "inductor"
    assert training.compile_generation_backend == backend
    assert training.skip_on_policy_old_logps == on("--skip_on_policy_old_logps")
    assert training.fused_lora == on("--fused_lora")
    assert training.compiled_layers == on("--compiled_layers")
    assert training.use_vllm == ("--use_vllm" in flags)
    if "--transformers_continuous_batching_config" in flags:
        assert training.transformers_continuous_batching_config["num_blocks"] == 128


def test_cpu_smoke_flags_keep_the_levers():
    assert ttt.contender_flags("two_steps_per_generation", cpu_smoke=True) == ["--steps_per_generation", "2"]
    flags = ttt.contender_flags("continuous_batching", cpu_smoke=True)
    assert flags[-1] == ttt.CPU_SMOKE_CB_CONFIG and "--use_transformers_continuous_batching" in flags
    assert ttt.CONTENDERS["two_steps_per_generation"] == ["--steps_per_generation", "8"]  # not changed in place
    four = ttt.contender_flags("merged_compiled_four_steps", cpu_smoke=True)
    assert four[four.index("--steps_per_generation") + 1] == "4"  # four optimizer steps of one micro-batch


# the levers whose code paths no faster test covers run by default; the rest (a TRL field alone, torch's cudagraphs
# backend, bf16 weights, decoding under autocast: each covered by its own tests) with -m soak, to keep the suite short
SOAK = pytest.mark.soak


@pytest.mark.parametrize("contenders", [
    "continuous_batching_bounded", "merged_static_cache", pytest.param("two_steps_per_generation", marks=SOAK),
    "continuous_batching_compiled", pytest.param("merged_cudagraphs_two_steps", marks=SOAK),
    pytest.param("merged_bf16_two_steps", marks=SOAK), pytest.param("merged_autocast_two_steps", marks=SOAK),
])
@needs_packaged_model
def test_cpu_smoke_of_the_generation_levers(contenders, tmp_path, capsys):
    """The generation levers run end to end on the CPU, one contender a test (TRL's reference record made up and
    reused by --resume); continuous_batching_compiled is skipped there with a line. Every contender ran this way
    once by hand (docs/benchmarks.md); four run only with -m soak."""
    run_dir = tmp_path / "seed0" / "trl"
    run_dir.mkdir(parents=True)
    (run_dir / "record.jsonl").write_text(json.dumps(reference_line(training_seconds=1000.0)) + "\n")
    code = ttt.main(["--out", str(tmp_path), "--cpu_smoke", "--seeds", "0", "--steps", "2", "--eval_every", "1",
                     "--contenders", contenders, "--fixed_target", "1.01", "--resume"])
    assert code == 0
    printed = capsys.readouterr().out
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    ran = [name for name in contenders.split(",") if name not in ttt.CPU_SMOKE_SKIP]
    assert sorted(r["name"] for r in records) == sorted(["trl", *ran])
    for r in records[1:]:
        assert r["exit_code"] == 0 and r["steps"] == 2 and not r["reached"] and r["completions"] >= 8
        assert r["wall_seconds"] > 0
    if "continuous_batching_compiled" in contenders:
        assert "--cpu_smoke: continuous_batching_compiled skipped" in printed


def test_figure_draws_one_panel_per_seed_with_a_reference(tmp_path):
    """Seeds with a finished TRL run are drawn; a seed without one and a failed run are left out."""
    import benchmarks.time_to_target_figure as figure
    curve = [[0, 0.2, 0.0], [5, 0.5, 10.0]]
    records = [{"name": "trl", "seed": 0, "curve": curve, "target": 0.47},
               {"name": "merged", "seed": 0, "curve": curve},
               {"name": "merged", "seed": 1, "curve": curve},
               {"name": "trl", "seed": 2, "failed": True}]
    seeds = figure.curves_by_seed(records)
    assert list(seeds) == [0] and [name for name, _, _ in seeds[0]] == ["trl", "merged"]
    assert seeds[0][0][2] == 0.47
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert figure.main([str(tmp_path)]) == 0 and (tmp_path / "time_to_target.png").stat().st_size > 1000


def test_devices_run_seeds_in_parallel_each_seed_on_one_device(tmp_path, monkeypatch):
    """--devices 0,1: seed i on device i mod 2 (its TRL run and contenders alike, CUDA_VISIBLE_DEVICES), the two
    devices at once (both TRL runs wait for each other at a barrier), the records in seed and run order."""
    import threading

    both_running = threading.Barrier(2, timeout=20)
    devices: dict[str, set] = {}

    def run(command, **kwargs):
        record = Path(command[command.index("--record") + 1])
        name, seed = record.parent.name, record.parent.parent.name
        devices.setdefault(seed, set()).add(kwargs["env"].get("CUDA_VISIBLE_DEVICES"))
        if name == "trl" and seed in ("seed0", "seed1"):
            both_running.wait()  # raises BrokenBarrierError if the devices ran one after the other
        target = float(command[command.index("--target") + 1]) if "--target" in command else None
        budget = float(command[command.index("--budget_seconds") + 1]) if "--budget_seconds" in command else None
        return SimpleNamespace(returncode=write_record(record, name, target, budget))

    monkeypatch.setattr(ttt.subprocess, "run", run)
    assert ttt.main(["--out", str(tmp_path), "--seeds", "0,1,2", "--steps", "2", "--contenders",
                     "merged,static_cache", "--devices", "0,1"]) == 0
    assert devices == {"seed0": {"0"}, "seed1": {"1"}, "seed2": {"0"}}
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [(r["seed"], r["name"]) for r in records] == [
        (0, "trl"), (0, "merged"), (0, "static_cache"), (1, "trl"), (1, "static_cache"), (1, "merged"),
        (2, "trl"), (2, "merged"), (2, "static_cache")]


def test_every_run_evaluates_in_the_study_batch_and_extra_flags_come_last(tmp_path, capsys):
    """One greedy batch of --eval_batch_size prompts for TRL's run and the contenders alike; flags the driver does not
    know go to every run after its own, so they override (the CPU smoke's batch of 2)."""
    assert ttt.main(["--out", str(tmp_path), "--seeds", "0", "--list"]) == 0
    command = capsys.readouterr().out.split()
    assert command[command.index("--eval_batch_size") + 1] == "500"
    assert ttt.main(["--out", str(tmp_path), "--seeds", "0", "--list", "--eval_batch_size", "64",
                     "--num_heldout", "100"]) == 0
    command = capsys.readouterr().out.split()
    assert command[command.index("--eval_batch_size") + 1] == "64" and command[-2:] == ["--num_heldout", "100"]


def test_the_figures_legend_names_every_run_also_one_the_last_seed_lacks(tmp_path, monkeypatch):
    import matplotlib.figure

    import benchmarks.time_to_target_figure as figure
    curve = [[0, 0.2, 0.0], [5, 0.5, 10.0]]
    records = [{"name": "trl", "seed": 0, "curve": curve, "target": 0.47},
               {"name": "compiled", "seed": 0, "curve": curve},
               {"name": "trl", "seed": 1, "curve": curve, "target": 0.47},
               {"name": "merged", "seed": 1, "curve": curve}]
    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: drawn.append(self))
    figure.draw(records, tmp_path / "f.png")
    legend = drawn[0].axes[-1].get_legend()
    assert [text.get_text() for text in legend.get_texts()] == ["trl", "compiled", "merged"]


def test_compile_counts_time_the_phases_of_what_was_compiled():
    import torch

    before = compile_counts()
    double = torch.compile(lambda x: x.cos() * 2, backend="eager")
    assert torch.allclose(double(torch.ones(3)), torch.ones(3).cos() * 2)
    after = compile_counts()
    assert after["unique_graphs"] == before["unique_graphs"] + 1
    assert after["seconds"]["bytecode_tracing"] > before["seconds"].get("bytecode_tracing", 0.0)


def test_the_vllm_path_runs_trl_and_the_recipe_with_trls_colocated_vllm_and_states_times_against_trl_vllm(tmp_path):
    from trl_zoo.cli.arguments.train_arguments import parse_train_args

    args = SimpleNamespace(cpu_smoke=False, steps=40, max_steps_factor=1.0, to_the_end=False, task="chat_arithmetic",
                           eval_every=5, eval_batch_size=500, extra=[])
    command = ttt.run_command(ttt.TRL_VLLM, 0, tmp_path, args, 0.5, 100.0)
    assert command[command.index("--trainer") + 1] == "trl"
    assert ttt.trainer_of(ttt.VLLM_RECIPE) == "trl_zoo" and ttt.trainer_of(ttt.VLLM_RECIPE + ttt.WARM) == "trl_zoo"
    assert ttt.trainer_of(ttt.TRL_VLLM + ttt.WARM) == "trl"  # TRL's second run is TRL's trainer too
    task = ["--task", "chat_arithmetic", "--output_dir", str(tmp_path / "run")]
    configs = {}
    for name in (ttt.TRL_VLLM, ttt.TRL_VLLM_TWO_STEPS, ttt.VLLM_RECIPE, "vllm_recipe_eager", ttt.TRL_VLLM + ttt.WARM,
                 ttt.VLLM_RECIPE + ttt.WARM):
        assert name in ttt.CPU_SMOKE_SKIP
        _, configs[name], _ = parse_train_args([*task, *ttt.CONTENDERS[name]])
        config = configs[name]
        assert config.use_vllm and config.vllm_mode == "colocate" and config.vllm_gpu_memory_utilization == 0.3
    config, eager = configs[ttt.VLLM_RECIPE], configs["vllm_recipe_eager"]
    assert config.speed_recipe == "vllm" and config.fused_lora and config.skip_on_policy_old_logps
    recipe_fields = ("fused_lora", "skip_on_policy_old_logps", "steps_per_generation", "generation_kwargs")
    assert all(getattr(eager, field) == getattr(config, field) for field in recipe_fields)  # but the compile
    assert config.compiled_layers and eager.compiled_layers is False
    records = [record("trl", 0, 10.0, 0.7), record(ttt.TRL_VLLM, 0, 8.0, 0.7), record(ttt.VLLM_RECIPE, 0, 4.0, 0.7)]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in ttt.summary_table(records, ttt.TRL_VLLM).splitlines()[2:]}
    assert rows[ttt.VLLM_RECIPE][2:4] == ["0.40 (0.40–0.40)", "0.50 (0.50–0.50)"]
