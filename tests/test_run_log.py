"""The run's metrics file (`RunLog`) under several processes: only the main process writes it, so a process that
starts late cannot empty it after the main one wrote the step-0 held-out record; a resumed run's other processes
read the kept records without rewriting the file. `prepare_training` tells the run log which process it is in."""

import json

import pytest

from tests import tiny
from trl_zoo.cli.arguments.train_arguments import parse_train_args
from trl_zoo.cli.report.run_log import RunLog, read_records
from trl_zoo.cli.train import training_setup

STEP_0 = {"kind": "eval", "step": 0, "heldout_accuracy": 0.5}


def test_another_process_starting_late_leaves_the_main_ones_records(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    main = RunLog(path)  # a fresh run: the main process starts the file empty
    assert path.read_text() == ""
    main.write(STEP_0)
    late = RunLog(path, main_process=False)
    late.write({"kind": "train", "step": 1, "loss": 0.0})  # not written: the main process writes the records
    assert late.kept == [] and read_records(path) == [STEP_0]
    main.write({"kind": "train", "step": 1, "loss": 0.0})
    assert [record["step"] for record in read_records(path)] == [0, 1]


def test_a_resumed_run_keeps_the_records_up_to_its_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    records = [{"kind": "eval", "step": step, "heldout_accuracy": step / 10} for step in range(5)]
    text = "".join(json.dumps(record) + "\n" for record in records)
    path.write_text(text)
    other = RunLog(path, resume_step=2, main_process=False)
    assert other.kept == records[:3] and path.read_text() == text  # read, not rewritten
    main = RunLog(path, resume_step=2)
    assert main.kept == records[:3] and read_records(path) == records[:3]
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]  # the rewrite's temporary file is gone


def test_prepare_training_makes_only_the_first_process_the_writer(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    for split, count in (("train", 8), ("test", 4)):
        rows = [{"prompt": f"{a}+{a}=", "answer": str(2 * a)} for a in range(10, 10 + count)]
        (data / f"{split}.jsonl").write_text("\n".join(json.dumps(row) for row in rows))

    class Stop(Exception):
        pass

    seen = []

    def run_log(path, resume_step=None, main_process=True):
        seen.append(main_process)
        raise Stop  # the run log is all this test needs: no trainer

    monkeypatch.setattr(training_setup, "RunLog", run_log)
    for index in (0, 1):
        task_args, training_args, model_args = parse_train_args([
            "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data), "--output_dir",
            str(tmp_path / "run"), "--overwrite_output_dir", "true", "--max_steps", "1", "--use_cpu", "true",
            "--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "4",
            "--report_to", "none", "--bf16", "false",
        ])
        monkeypatch.setattr(type(training_args), "process_index", property(lambda self, index=index: index))
        with pytest.raises(Stop):
            training_setup.prepare_training(task_args, training_args, model_args, log=lambda *args: None)
    assert seen == [True, False]
