"""LUFFY under DDP on two CPU processes (tests/scripts/luffy_two_processes.py): with 2 rows a process and groups of 4,
a group spans both processes, and its expert trace sits in the group's first slot, on the first process only; the
component adds no collective, so the step completes with the same weights on both processes."""

import math

import pytest

from tests.two_processes import launch_two_processes

pytest.importorskip("accelerate")


def test_two_processes_share_each_group_and_its_trace(tmp_path):
    result = launch_two_processes("luffy_two_processes.py", tmp_path / "result.json")
    assert result["num_processes"] == 2
    first, second = result["per_process"]
    assert first["trained"] == pytest.approx(second["trained"], abs=1e-6)  # DDP kept the replicas equal
    assert len(first["seen"]) == len(second["seen"]) == 2  # one round a step, on each process
    for rows in first["seen"]:  # global slots 0 and 1: the trace, then the policy's own completion
        assert [completion == answer for completion, answer in rows] == [True, False]
    for rows in second["seen"]:  # global slots 2 and 3: the policy's own completions
        assert not any(completion == answer for completion, answer in rows)
    # the two processes' rows of a round are one group: the same prompt's answer
    assert [rows[0][1] for rows in first["seen"]] == [rows[0][1] for rows in second["seen"]]
    assert len(first["losses"]) == 2 and all(math.isfinite(loss) for loss in first["losses"])
