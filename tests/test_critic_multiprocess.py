"""The critic under DDP on two processes (gloo on CPU): each process computes different critic gradients from its
own rows, the hook averages them before the optimizer step, and policy and critic stay identical on both processes
through value pre-training and PPO steps — with the LoRA value adapter and with the value head. On one distributed
process (still wrapped in DDP) the critic trains as in a plain process."""

import pytest
import torch

from tests.two_processes import launch_one_distributed_process, launch_two_processes, run_without_launcher


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


@pytest.mark.parametrize("critic_model", ["adapter", "head"])
def test_one_distributed_process_trains_the_critic_as_a_plain_run(critic_model, tmp_path):
    """A one-process distributed launch still wraps the model in DDP: the critic must be kept out of it there too,
    and the run then trains exactly as a plain process does (same seed, same batches)."""
    distributed = launch_one_distributed_process("critic_two_processes.py", tmp_path / "ddp.json", critic_model)
    plain = run_without_launcher("critic_two_processes.py", tmp_path / "plain.json", critic_model)
    assert distributed["num_processes"] == 1 and distributed["wrapped_in_ddp"]
    assert not plain["wrapped_in_ddp"]
    (ddp_record,), (plain_record,) = distributed["per_process"], plain["per_process"]
    for name in ("critic_before", "critic_after", "policy_before", "policy_after", "value_losses"):
        torch.testing.assert_close(
            torch.tensor(ddp_record[name]), torch.tensor(plain_record[name]), rtol=1e-5, atol=1e-7, msg=name
        )
    critic_moved = torch.tensor(ddp_record["critic_after"]) - torch.tensor(ddp_record["critic_before"])
    assert critic_moved.abs().max() > 1e-3
