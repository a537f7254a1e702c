"""What needs a vLLM engine of its own, each in its own process (tests/gpu/own_engine.py): sleep mode trains and
frees the card between generations; a memory share too small for the engine, and a prompt longer than the context
leaves room for, are one line each."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.gpu.conftest import STAND_IN

pytestmark = pytest.mark.skipif(STAND_IN, reason="needs real vLLM: an engine of its own in its own process")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(case: str, policy_path: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "tests.gpu.own_engine", case, policy_path],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    record = os.environ.get("TRL_ZOO_GPU_RESULTS")  # a JSON-lines file the battery's summary is written from
    if record:
        with open(record, "a") as file:
            file.write(json.dumps({"case": case, **result}) + "\n")
    return result


def test_sleep_mode_trains_and_frees_the_card_between_generations(policy_path):
    awake, asleep = run("awake", policy_path), run("sleep", policy_path)
    assert awake["finite"] and asleep["finite"] and len(asleep["losses"]) == 2
    assert max(asleep["logp_difference"]) < 0.1  # woken weights are the policy's
    # the card during training: vLLM's pool (0.3 of the card awake) released by sleep mode
    assert max(asleep["card_used_gib"]) < max(awake["card_used_gib"]) - 5, (asleep, awake)


def test_a_memory_share_too_small_is_one_line(policy_path):
    result = run("small_share", policy_path)
    assert result["error"] == "ValueError" and result["lines"] == 1, result
    assert result["message"].startswith("vllm_gpu_memory_utilization=0.002"), result


def test_a_prompt_longer_than_the_context_is_one_line(policy_path):
    result = run("long_prompt", policy_path)
    assert result["error"] is not None and result["lines"] == 1, result
    assert "vllm_max_model_length" in result["message"], result
