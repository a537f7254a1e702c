"""One launched run is one run: `trl-zoo train` on two processes (`accelerate launch`, gloo on CPU), the second
starting to parse its arguments seconds after the first, writes one folder and one set of files, prints each line
once and draws no warning from DDP about unused parameters. And the `ddp_find_unused_parameters` it chooses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from transformers import Qwen3MoeConfig

from trl_zoo.cli.environment.ddp_unused_parameters import find_unused_parameters
from trl_zoo.cli.errors import ConfigError
from trl_zoo.cli.train.run_folder import shared_run_folder

from . import tiny
from .test_cli import local_sums
from .two_processes import REPO, WORKER_TIMEOUT_S, _free_port

STAGGER_S = 5  # how much later the second process starts parsing


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("launched")
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines",
        "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
        str(REPO / "tests" / "scripts" / "train_cli_staggered.py"), str(STAGGER_S),
        *local_sums(folder), "--write_report", "true", "--max_steps", "2", "--per_device_train_batch_size", "4",
        "--num_generations", "4", "--eval_every_steps", "1", "--logging_steps", "1",
    ]  # no --output_dir: the default name, which each process would otherwise pick for itself
    environment = {**os.environ, "ACCELERATE_USE_CPU": "true", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True,
                            timeout=WORKER_TIMEOUT_S + 60)
    assert result.returncode == 0, result.stderr[-4000:]
    return SimpleNamespace(folder=folder, out=result.stdout, err=result.stderr)


def test_one_folder_one_set_of_files(launched):
    (run,) = (launched.folder / "runs").iterdir()
    assert run.name == "sums-dapo"
    assert {"adapter_model.safetensors", "README.md", "summary.json", "metrics.jsonl", "report"} <= {
        path.name for path in run.iterdir()}
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert sorted((r["kind"], r["step"]) for r in records) == [  # each record once
        ("end", 2), ("eval", 0), ("eval", 1), ("eval", 2), ("train", 1), ("train", 2)]
    assert json.loads((run / "summary.json").read_text())["steps"] == 2
    assert sorted(path.name for path in (run / "checkpoint-2").glob("rng_state_*")) == ["rng_state_0.pth",
                                                                                      "rng_state_1.pth"]


def test_each_line_is_printed_once(launched):
    lines = launched.out.splitlines()
    assert len(lines) == len(set(lines)), launched.out
    assert sum(line.startswith("  step ") for line in lines) == 2
    assert "Adapter saved to runs/sums-dapo" in lines and "Report: runs/sums-dapo/report/results.md" in lines


def test_ddp_searches_for_no_unused_parameters_with_lora(launched):
    assert "find_unused_parameters=True" not in launched.err


def test_launched_processes_that_would_each_train_alone_are_refused(tmp_path, monkeypatch):
    """torchrun on a CPU without use_cpu: transformers runs each process as a run of its own (two folders)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match=r"^use_cpu: the launcher started 2 processes, which without a GPU train "
                                          r"together only with use_cpu true \(else each trains a run of its own\); "
                                          r"add --use_cpu true\.$"):
        shared_run_folder(str(tmp_path / "run"), rename=False, resuming=False,
                          training_args=SimpleNamespace(world_size=1, process_index=0))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("use_peft", "estimator", "given", "expected"), [
    (True, None, None, False),  # LoRA, no critic, a dense model: every adapter weight trains at every step
    (True, "gae", None, None),  # a critic: transformers decides
    (False, None, None, None),  # full fine-tuning: transformers decides
    (True, None, True, True),  # the user's value stands
])
def test_ddp_find_unused_parameters_is_off_only_where_nothing_goes_unused(use_peft, estimator, given, expected):
    training_args = SimpleNamespace(ddp_find_unused_parameters=given, advantage_estimator=estimator,
                                    trust_remote_code=False)
    model_args = SimpleNamespace(use_peft=use_peft, model_revision=None)
    assert find_unused_parameters(training_args, model_args, tiny.model_dir()) is expected


def test_a_mixture_of_experts_keeps_the_search(tmp_path):
    """A batch may route no token to an expert's adapter; only the config is read."""
    Qwen3MoeConfig(num_experts=4, num_experts_per_tok=2).save_pretrained(tmp_path)
    training_args = SimpleNamespace(ddp_find_unused_parameters=None, advantage_estimator=None, trust_remote_code=False)
    model_args = SimpleNamespace(use_peft=True, model_revision=None)
    assert find_unused_parameters(training_args, model_args, str(tmp_path)) is None
