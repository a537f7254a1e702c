"""benchmarks/lib/real_model_run.py's replay: a run that replays a recorded run's completions trains on the same batch
(same completions, same loss and gradient norm at step 1), and a replay whose prompts differ stops with one line."""

import json

import pytest

import trl_zoo.cli.train.training_setup
from benchmarks.lib import real_model_run
from tests.tiny import digit_reward, model_dir
from tests.trl_internals import replace_every_trainers_decoding


@pytest.fixture
def run(monkeypatch, tmp_path):
    # main() installs its instrumented trainer class and sets its environment variable: undone after the test
    monkeypatch.setattr(trl_zoo.cli.train.training_setup, "GRPOTrainer", trl_zoo.cli.train.training_setup.GRPOTrainer)
    monkeypatch.setenv(real_model_run.RECORD_ENV, "")
    monkeypatch.setattr(real_model_run, "GENERATIONS", dict(real_model_run.GENERATIONS))
    # a reward with spread from the completions' text (the tiny random model never writes the right number)
    monkeypatch.setattr(real_model_run, "final_number_reward",
                        lambda completions, answer, **kwargs: digit_reward(completions))

    def train(name, *flags, seed=0):
        output_dir = tmp_path / name
        code = real_model_run.main([
            *flags, "--task", "addition", "--model_name_or_path", model_dir(), "--output_dir", str(output_dir),
            "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "8",
            "--use_cpu", "true", "--max_steps", "1", "--num_heldout", "0", "--write_report", "false",
            "--seed", str(seed), "--logging_steps", "1", "--report_to", "none", "--save_strategy", "no",
        ])
        return code, output_dir

    return train


def step_one(output_dir):
    record = json.loads((output_dir / "costs.rank0.json").read_text())
    return next(row for row in record["log_history"] if row.get("step") == 1 and "loss" in row), record


def test_replay_trains_on_the_recorded_completions(run, capsys, monkeypatch):
    code, recorded = run("recorded", "--record_generations")
    assert code == 0
    lines = (recorded / "generations.rank0.jsonl").read_text().splitlines()
    assert len(lines) == 1
    generation = json.loads(lines[0])
    assert len(generation["completion_ids"]) == 8 and generation["num_generations"] == 4

    def no_generation(*args, **kwargs):
        raise AssertionError("the replayed run generated")

    # the replay must not generate (on the CPU the same seed would draw the same completions anyway)
    replace_every_trainers_decoding(monkeypatch, no_generation)
    code, replayed = run("replayed", "--replay_generations", str(recorded))
    assert code == 0
    assert not (replayed / "generations.rank0.jsonl").exists()
    first, first_record = step_one(recorded)
    second, second_record = step_one(replayed)
    assert second_record["generations"] == {"record": False, "replay": str(recorded), "batches": 1}
    assert first_record["generations"]["batches"] == 1
    # the same completions: the completions.jsonl lines (mean reward and length of the trained batch) agree
    assert (recorded / "completions.jsonl").read_text() == (replayed / "completions.jsonl").read_text()
    assert first["loss"] != 0.0 and first["grad_norm"] > 0.0  # rewards with spread: an update to compare
    for key in ("loss", "grad_norm", "reward", "completions/mean_length"):
        assert second[key] == pytest.approx(first[key], rel=1e-6, abs=1e-9), key

    # other prompts (another seed draws another first batch): one clear line and exit code 2
    capsys.readouterr()
    code, _ = run("other", "--replay_generations", str(recorded), seed=1)
    assert code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("real_model_run: error: replay of ")
    assert "the prompts of generation batch 1 differ from the recorded ones" in error
