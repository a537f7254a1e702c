"""resample on two processes (gloo on CPU): the trained batches hold only groups with reward spread, whole groups
(one of them straddling the processes), and exactly the configured number of rows on every process."""

import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.scripts.resample_two_processes import grpo_advantages, half_constant_reward

REPO = Path(__file__).resolve().parents[1]
GROUP_SIZE = 4
LOCAL_ROWS = 6  # per_device_train_batch_size 2 × steps_per_generation 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    output = tmp_path_factory.mktemp("resample") / "batches.json"
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(_free_port()),
        str(REPO / "tests" / "scripts" / "resample_two_processes.py"), str(output),
    ]
    environment = {**os.environ, "ACCELERATE_USE_CPU": "true", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=300)
    report = f"exit code {result.returncode}\nstdout:\n{result.stdout[-2000:]}\nstderr:\n{result.stderr[-4000:]}"
    # The worker writes its file after the last collective, so a complete file means both ranks finished training;
    # a non-zero exit after that can only come from process teardown, which is not what this test is about.
    assert output.exists(), report
    if result.returncode != 0:
        warnings.warn(f"the two-process run finished its work but exited abnormally during teardown: {report[-600:]}")
    return json.loads(output.read_text())


def test_two_processes_train_only_informative_whole_groups(two_process_run):
    assert two_process_run["num_processes"] == 2
    first, second = two_process_run["per_process"]
    assert len(first) == len(second) == 2  # two generation batches in 4 steps (steps_per_generation 3)
    for batch_0, batch_1 in zip(first, second):
        assert len(batch_0["prompts"]) == len(batch_1["prompts"]) == LOCAL_ROWS
        prompts = batch_0["prompts"] + batch_1["prompts"]
        completions = batch_0["completions"] + batch_1["completions"]
        rewards = half_constant_reward(prompts, completions)
        for start in range(0, len(prompts), GROUP_SIZE):
            group = slice(start, start + GROUP_SIZE)
            assert len(set(prompts[group])) == 1  # whole groups, also the one across the processes
            assert int(prompts[start].split("+")[0]) % 2 == 1  # no zero-spread prompt was kept
            assert max(rewards[group]) > min(rewards[group])
        # the advantages moved with their rows: they are TRL's for the recomputed rewards
        assert batch_0["advantages"] + batch_1["advantages"] == pytest.approx(grpo_advantages(rewards, GROUP_SIZE), abs=1e-4)
        tokens = batch_0["mask_tokens"] + batch_1["mask_tokens"]
        assert batch_0["num_items_in_batch"] == batch_1["num_items_in_batch"] == tokens
    assert two_process_run["logged_rounds"] and all(rounds >= 1 for rounds in two_process_run["logged_rounds"])
