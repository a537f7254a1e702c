"""resample on two processes (gloo on CPU): the trained batches hold only groups with reward spread, whole groups
(one of them straddling the processes), and exactly the configured number of rows on every process."""

import pytest

from tests.scripts.resample_two_processes import grpo_advantages, half_constant_reward
from tests.two_processes import launch_two_processes

GROUP_SIZE = 4
LOCAL_ROWS = 6  # per_device_train_batch_size 2 × steps_per_generation 3


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    return launch_two_processes("resample_two_processes.py", tmp_path_factory.mktemp("resample") / "batches.json")


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
        assert batch_0["advantages"] + batch_1["advantages"] == pytest.approx(
            grpo_advantages(rewards, GROUP_SIZE), abs=1e-4
        )
        tokens = batch_0["mask_tokens"] + batch_1["mask_tokens"]
        assert batch_0["num_items_in_batch"] == batch_1["num_items_in_batch"] == tokens
    assert two_process_run["logged_rounds"] and all(rounds >= 1 for rounds in two_process_run["logged_rounds"])


@pytest.fixture(scope="module")
def greso_two_process_run(tmp_path_factory):
    return launch_two_processes("greso_two_processes.py", tmp_path_factory.mktemp("greso") / "batches.json")


def test_two_processes_take_the_same_greso_decisions(greso_two_process_run):
    from tests.test_greso import mixed_reward

    assert greso_two_process_run["num_processes"] == 2
    first, second = greso_two_process_run["per_process"]
    assert len(first) == len(second) == 8  # a generation batch every 3 of the 24 steps
    for batch_0, batch_1 in zip(first, second):
        assert batch_0["prompts_skipped"] == batch_1["prompts_skipped"]  # the same skip decisions
        assert batch_0["greso_state"] == batch_1["greso_state"]  # history, p_easy, p_hard, decision counter
        assert len(batch_0["prompts"]) == len(batch_1["prompts"]) == LOCAL_ROWS
        prompts = batch_0["prompts"] + batch_1["prompts"]
        rewards = mixed_reward(prompts, batch_0["completions"] + batch_1["completions"])
        for start in range(0, len(prompts), GROUP_SIZE):
            group = slice(start, start + GROUP_SIZE)
            assert len(set(prompts[group])) == 1  # whole groups, also the one across the processes
            assert max(rewards[group]) > min(rewards[group])
    assert sum(batch["prompts_skipped"] for batch in first) > 0
    assert first[-1]["greso_state"]["greso/history"]
