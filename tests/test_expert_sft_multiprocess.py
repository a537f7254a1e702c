"""CHORD's expert SFT under DDP on two CPU processes: a process whose micro-batch holds no expert answer skips the SFT
forward while the other runs it, and the step still completes with the same weights on both processes."""

import math

import pytest

from tests.two_processes import launch_two_processes

pytest.importorskip("accelerate")


def test_two_processes_train_with_expert_answers_on_one_side_only(tmp_path):
    result = launch_two_processes("expert_sft_two_processes.py", tmp_path / "result.json")
    assert result["num_processes"] == 2
    first, second = result["per_process"]
    assert first["trained"] == pytest.approx(second["trained"], abs=1e-6)  # DDP kept the replicas equal
    losses = first["sft_losses"]
    assert len(losses) == 2 and all(math.isfinite(loss) and loss > 0 for loss in losses)
