"""FSDP2 (full shard) on two CPU processes trains LoRA policies as DDP does: the GRPO and DAPO presets, same seed, same
batches, under `configs/accelerate/fsdp2.yaml` and `configs/accelerate/ddp.yaml`. The logged losses and gradient
norms of the first steps and the trained adapter weights agree to float tolerance. With full fine-tuning, the tied
input embedding / output layer weight, which TRL's fused LM head reads without calling the output layer, gets the
gradient DDP gives it.

accelerate keeps CPU processes on DDP whatever its config says, so the worker sets the FSDP plugin itself on them
(`force_fsdp_on_cpu_processes`); the preparation, sharding and training are then accelerate's and torch's."""

import json

import pytest
import torch

from tests import tiny
from tests.two_processes import launch_two_processes

SETUPS = {"ddp": "configs/accelerate/ddp.yaml", "fsdp2": "configs/accelerate/fsdp2.yaml"}


@pytest.fixture(scope="module", params=["grpo", "dapo"])
def runs(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"lora_{request.param}")
    return {
        setup: launch_two_processes(
            "lora_training_two_processes.py", folder / f"{setup}.json", request.param, config_file=config_file
        )
        for setup, config_file in SETUPS.items()
    }


def test_fsdp_shards_the_model_and_ddp_does_not(runs):
    assert runs["fsdp2"]["distributed_type"] == "FSDP" and runs["fsdp2"]["sharded_parameters"] > 0
    assert runs["ddp"]["distributed_type"] == "MULTI_CPU" and runs["ddp"]["sharded_parameters"] == 0


def test_fsdp_logs_the_losses_and_gradient_norms_of_ddp(runs):
    ddp, fsdp = runs["ddp"], runs["fsdp2"]
    assert len(ddp["losses"]) == len(fsdp["losses"]) == 3
    torch.testing.assert_close(torch.tensor(fsdp["losses"]), torch.tensor(ddp["losses"]), rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(torch.tensor(fsdp["grad_norms"]), torch.tensor(ddp["grad_norms"]), rtol=1e-4, atol=1e-7)
    assert min(ddp["grad_norms"]) > 1e-3


def test_lora_leaves_the_tied_output_layer_frozen(runs):
    """FSDP2 warns that the tied output layer "did not run forward before backward" (issue 27): under LoRA that
    weight gets no gradient at all, so the warning cannot concern what is trained."""
    assert runs["fsdp2"]["tied"] and runs["ddp"]["tied"]
    assert runs["fsdp2"]["tied_grads"] == runs["ddp"]["tied_grads"] == []


def test_fsdp_trains_the_adapter_as_ddp_does(runs):
    ddp, fsdp = runs["ddp"], runs["fsdp2"]
    torch.testing.assert_close(torch.tensor(fsdp["adapter_before"]), torch.tensor(ddp["adapter_before"]))
    moved = torch.tensor(ddp["adapter_after"]) - torch.tensor(ddp["adapter_before"])
    assert moved.abs().max() > 1e-3
    torch.testing.assert_close(
        torch.tensor(fsdp["adapter_after"]), torch.tensor(ddp["adapter_after"]), rtol=1e-4, atol=1e-6
    )


@pytest.fixture(scope="module")
def reference_reset_runs(tmp_path_factory):
    """GRPO (β = 0.04) with the PEFT reference adapter reset to the policy after step 2 of 4."""
    folder = tmp_path_factory.mktemp("lora_ref_reset")
    overrides = json.dumps({"ref_reset_steps": 2, "max_steps": 4})
    return {
        setup: launch_two_processes(
            "lora_training_two_processes.py", folder / f"{setup}.json", "grpo", overrides, config_file=config_file
        )
        for setup, config_file in SETUPS.items()
    }


def test_reference_reset_under_fsdp_copies_the_sharded_adapter_as_ddp_does(reference_reset_runs):
    """The reset copies the sharded policy adapter into a whole "ref" adapter: the KL to the new reference at step 4
    (policy after step 3 against the policy after step 2) is the one DDP measures, and is not zero."""
    ddp, fsdp = reference_reset_runs["ddp"], reference_reset_runs["fsdp2"]
    assert fsdp["distributed_type"] == "FSDP"
    assert fsdp["ref_resets"] == ddp["ref_resets"] == [None, 1.0, None, 2.0]
    assert ddp["kl"][3] > 1e-7
    torch.testing.assert_close(torch.tensor(fsdp["kl"]), torch.tensor(ddp["kl"]), rtol=1e-4, atol=1e-9)
    torch.testing.assert_close(torch.tensor(fsdp["grad_norms"]), torch.tensor(ddp["grad_norms"]), rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(
        torch.tensor(fsdp["adapter_after"]), torch.tensor(ddp["adapter_after"]), rtol=1e-4, atol=1e-6
    )


@pytest.fixture(scope="module")
def full_runs(tmp_path_factory):
    """GRPO, every weight trained (no LoRA)."""
    folder = tmp_path_factory.mktemp("full_grpo")
    return {
        setup: launch_two_processes(
            "lora_training_two_processes.py", folder / f"{setup}.json", "grpo", json.dumps({"use_peft": False}),
            config_file=config_file,
        )
        for setup, config_file in SETUPS.items()
    }


def test_fsdp_gives_the_tied_output_layer_the_gradient_ddp_gives(full_runs):
    """TRL's fused LM head reads the tied weight without calling the output layer, and FSDP2 warns about it (issue
    27). The weight's gradient at every step is DDP's (whose autograd sums the embedding's and the output layer's
    parts of the one tied parameter), and it is non-zero in every vocabulary row, as the output layer's softmax over
    the whole vocabulary makes it."""
    ddp, fsdp = full_runs["ddp"], full_runs["fsdp2"]
    assert fsdp["distributed_type"] == "FSDP" and fsdp["sharded_parameters"] > 0
    assert fsdp["tied"] and ddp["tied"]
    assert len(ddp["tied_grads"]) == len(fsdp["tied_grads"]) == 3
    ddp_grads, fsdp_grads = torch.tensor(ddp["tied_grads"]), torch.tensor(fsdp["tied_grads"])
    rows = ddp_grads.reshape(3, len(tiny.tokenizer()), -1).abs().sum(-1)
    assert (rows > 0).all()
    torch.testing.assert_close(fsdp_grads, ddp_grads, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(torch.tensor(fsdp["grad_norms"]), torch.tensor(ddp["grad_norms"]), rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(
        torch.tensor(fsdp["adapter_after"]), torch.tensor(ddp["adapter_after"]), rtol=1e-4, atol=1e-6
    )

