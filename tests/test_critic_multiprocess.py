"""The critic under DDP on two processes (gloo on CPU): each process computes different critic gradients from its
own rows, the hook averages them before the optimizer step, and policy and critic stay identical on both processes
through value pre-training and PPO steps — with the LoRA value adapter and with the value head."""

import pytest
import torch

from tests.two_processes import launch_two_processes


@pytest.fixture(scope="module", params=["adapter", "head"])
def two_process_run(request, tmp_path_factory):
    output = tmp_path_factory.mktemp(f"critic_{request.param}") / "parameters.json"
    run = launch_two_processes("critic_two_processes.py", output, request.param)
    assert run["num_processes"] == 2
    return [{name: torch.tensor(values) for name, values in record.items()} for record in run["per_process"]]


def test_critic_gradients_are_averaged_across_processes(two_process_run):
    first, second = two_process_run
    assert (first["local_gradients"] - second["local_gradients"]).abs().max() > 1e-4  # different rows, different grads
    expected = (first["local_gradients"] + second["local_gradients"]) / 2
    for record in (first, second):
        torch.testing.assert_close(record["averaged_gradients"], expected, rtol=1e-6, atol=1e-9)


def test_policy_and_critic_stay_identical_on_both_processes_and_both_train(two_process_run):
    first, second = two_process_run
    for name in ("critic_before", "critic_after", "policy_before", "policy_after"):
        torch.testing.assert_close(first[name], second[name], rtol=0, atol=0, msg=name)
    assert (first["critic_after"] - first["critic_before"]).abs().max() > 1e-3
    assert (first["policy_after"] - first["policy_before"]).abs().max() > 1e-3
    assert torch.isfinite(first["value_losses"]).all() and len(first["value_losses"]) == 3
