"""One run across two machines, simulated on one host: two `accelerate launch` launchers, machine ranks 0 and 1, one
gloo CPU process each, meeting over TCP on 127.0.0.1; each "machine" in its own working directory, as with
node-local disks. Only machine 0's main process (global rank 0) claims the run folder, prints and writes the run's
files; machine 1 receives the folder's name and writes only what transformers writes on every process (its RNG state
in each checkpoint). Then the other layout: machine 0's checkpoint-1, with machine 1's RNG file copied in, resumed by
one launcher of two processes, repeats step 2 of the two-machine run. Not simulated: a real network, separate hosts,
GPUs (docs/multi_gpu.md#several-machines)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from .test_cli import local_sums
from .two_processes import REPO, WORKER_TIMEOUT_S, _free_port

RUN = "runs/sums-dapo"  # the default name: machine 1 sees no runs/ and would claim it for itself
SETTINGS = ["--max_steps", "2", "--per_device_train_batch_size", "4", "--num_generations", "4",
            "--eval_every_steps", "1", "--logging_steps", "1", "--save_strategy", "steps", "--save_steps", "1",
            "--reward_funcs", "tests.tiny.digit_reward", "--learning_rate", "1e-3"]  # rewards with spread: it learns
ENVIRONMENT = {**os.environ, "ACCELERATE_USE_CPU": "true", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def launcher(machines: int, rank: int, port: int, train_args: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", str(machines),
        "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
        "--num_processes", "2", "--mixed_precision", "no", "--dynamo_backend", "no",
        "-m", "trl_zoo.cli", "train", *train_args,
    ]


def files_under(folder) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


def records(run) -> dict:
    return {(r["kind"], r["step"]): r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}


@pytest.fixture(scope="module")
def two_machines(tmp_path_factory):
    root = tmp_path_factory.mktemp("machines")
    train_args = [*local_sums(root), *SETTINGS]  # inputs at one path both machines read
    port = _free_port()
    machines = []
    for rank in (0, 1):
        cwd = root / f"m{rank}"
        cwd.mkdir()
        machines.append(subprocess.Popen(launcher(2, rank, port, train_args), cwd=cwd, env=ENVIRONMENT,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [machine.communicate(timeout=WORKER_TIMEOUT_S + 60) for machine in machines]
    for machine, (out, err) in zip(machines, outputs):
        assert machine.returncode == 0, err[-4000:]
    return SimpleNamespace(root=root, train_args=train_args, out=[out for out, _ in outputs])


def test_only_machine_0_writes_the_run(two_machines):
    m0, m1 = two_machines.root / "m0", two_machines.root / "m1"
    (run,) = (m0 / "runs").iterdir()
    assert str(run.relative_to(m0)) == RUN
    assert {"_trl_zoo_run", "adapter_model.safetensors", "README.md", "summary.json", "metrics.jsonl"} <= {
        path.name for path in run.iterdir()}
    assert sorted(records(run)) == [("end", 2), ("eval", 0), ("eval", 1), ("eval", 2), ("train", 1), ("train", 2)]
    # machine 1 claims nothing and writes none of the run's files: only each checkpoint's RNG state of its process,
    # which transformers' Trainer writes on every process (rng_state_{global rank}.pth)
    assert files_under(m1) == [f"{RUN}/checkpoint-{step}/rng_state_1.pth" for step in (1, 2)]
    assert "rng_state_1.pth" not in {path.name for path in (run / "checkpoint-1").iterdir()}


def test_each_line_is_printed_once_by_machine_0(two_machines):
    out0, out1 = two_machines.out
    lines = (out0 + out1).splitlines()
    assert len(lines) == len(set(lines)), out0 + out1
    assert out1 == ""
    assert sum(line.startswith("  step ") for line in lines) == 2
    assert f"Adapter saved to {RUN}" in lines


def test_a_checkpoint_resumes_on_one_machine_of_two_processes(two_machines):
    """With node-local disks a checkpoint is complete only once each machine's RNG files are copied beside machine
    0's; resumed on the other layout, step 2 repeats the two-machine run's."""
    m0, m1, one = (two_machines.root / name for name in ("m0", "m1", "one"))
    checkpoint = one / "runs" / "resumed" / "checkpoint-1"
    shutil.copytree(m0 / RUN / "checkpoint-1", checkpoint)
    shutil.copy(m1 / RUN / "checkpoint-1" / "rng_state_1.pth", checkpoint)
    command = launcher(1, 0, _free_port(), [*two_machines.train_args, "--output_dir", "runs/resumed",
                                            "--resume_from_checkpoint", "true"])
    result = subprocess.run(command, cwd=one, env=ENVIRONMENT, capture_output=True, text=True,
                            timeout=WORKER_TIMEOUT_S + 60)
    assert result.returncode == 0, result.stderr[-4000:]
    resumed, uninterrupted = records(one / "runs" / "resumed"), records(m0 / RUN)
    # no step 1: it trained on from the checkpoint (step 0, the base policy, is measured again: no run log copied)
    assert sorted(resumed) == [("end", 2), ("eval", 0), ("eval", 2), ("train", 2)]
    assert uninterrupted[("train", 2)]["grad_norm"] > 0
    for key in (("eval", 0), ("train", 2), ("eval", 2)):
        values = {name: value for name, value in uninterrupted[key].items() if isinstance(value, float)}
        values.pop("step_time", None)  # a duration
        assert {name: resumed[key][name] for name in values} == pytest.approx(values, rel=1e-6), key
