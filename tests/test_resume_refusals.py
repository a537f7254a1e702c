"""Checkpoints a run cannot resume from as asked, each refused in one line naming the file or setting and the fix:
the optimizer's or scheduler's file deleted (transformers would start both afresh, silently), a setting that lays
out the checkpoint changed (LoRA, the critic, the generation cycle), weights or optimizer moments overwritten with
NaN (same size, so only the values tell)."""

import math
import os
import shutil

import pytest
import torch
from peft import LoraConfig
from safetensors.torch import load_file, save_file

import trl_zoo
from tests import tiny
from tests.tiny import make_trainer
from trl_zoo.cli import main
from trl_zoo.components.checkpoint_integrity import CheckpointError, CorruptCheckpointError
from trl_zoo.components.checkpoint_settings import check_same_settings


def lora(r=4):
    return LoraConfig(r=r, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


RUNS = {
    "full": dict(),
    "lora": dict(peft_config=lora()),
    "gae": dict(peft_config=lora(), advantage_estimator="gae"),
    # a reference that moves (saved as trl_zoo_reference.pt) and a generation cycle of two steps (checkpoint-1 holds
    # TRL's buffered batch, trl_zoo_buffer_0.pt)
    "moved": dict(beta=0.1, sync_ref_model=True, num_iterations=2),
}


def trainer(kind: str, output_dir, **changes):
    options = {**RUNS[kind], "output_dir": str(output_dir), "max_steps": 3, **changes}
    return make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, **options)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """checkpoint-1 and checkpoint-2 of a full fine-tuning run, a LoRA run, a LoRA run with gae's critic and a full
    fine-tuning run with a moving reference and a two-step generation cycle."""
    runs = {}
    for kind in RUNS:
        out = tmp_path_factory.mktemp(kind)
        trainer(kind, out, max_steps=2, save_strategy="steps", save_steps=1).train()
        runs[kind] = out
    return runs


def copy(saved, kind, tmp_path):
    shutil.copytree(saved[kind], tmp_path / "run")
    return tmp_path / "run"


def refusal(run, resume=True) -> str:
    with pytest.raises(CheckpointError) as caught:
        run.train(resume_from_checkpoint=resume)
    message = str(caught.value)
    assert "\n" not in message
    return message


# ------------------------------------------------------------------------------ optimizer or scheduler deleted


@pytest.mark.parametrize("kind, name", [("full", "optimizer.pt"), ("full", "scheduler.pt"), ("lora", "optimizer.pt")])
def test_a_deleted_optimizer_or_scheduler_file_is_refused_naming_it(saved, tmp_path, kind, name):
    out = copy(saved, kind, tmp_path)
    os.remove(out / "checkpoint-2" / name)
    message = refusal(trainer(kind, out))
    assert message.startswith(
        f"resume_from_checkpoint: {out / 'checkpoint-2' / name} is missing, so the optimizer would start afresh and "
        f"the learning-rate schedule from its start; an earlier complete checkpoint is intact: resume from "
        f"{out / 'checkpoint-1'}, or delete {out / 'checkpoint-2'} and resume from the last"
    )
    weights_only = f", or start a new run from its weights only (--model_name_or_path {out / 'checkpoint-2'}"
    assert (weights_only in message) == (kind == "full")  # a LoRA checkpoint holds no model to start from


# ------------------------------------------------------------------------------ a setting that lays out the checkpoint


CHANGES = {
    "speed_recipe": ("lora", dict(speed_recipe="lora"), "steps_per_generation 1, this run has 2 (with "
                     "speed_recipe='lora')", "resume with steps_per_generation 1."),
    "to_gae": ("lora", dict(advantage_estimator="gae"), "advantage_estimator None, this run has 'gae'",
               "resume with advantage_estimator None."),
    "from_gae": ("gae", dict(advantage_estimator="rloo"), "advantage_estimator 'gae', this run has 'rloo'",
                 "resume with advantage_estimator 'gae'."),
    "lora_rank": ("lora", dict(peft_config=lora(r=8)), "peft_config LoRA r=4 on q_proj, v_proj, this run has LoRA "
                  "r=8 on q_proj, v_proj", "resume with peft_config LoRA r=4 on q_proj, v_proj, set in the CLI by"),
    "full_to_lora": ("full", dict(peft_config=lora()), "peft_config None (full fine-tuning), this run has LoRA r=4 "
                     "on q_proj, v_proj", "resume with peft_config None (full fine-tuning), set in the CLI by"),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_changed_layout_setting_is_refused_naming_it(saved, change):
    kind, changes, names, fix = CHANGES[change]
    checkpoint = saved[kind] / "checkpoint-2"
    message = refusal(trainer(kind, saved[kind], **changes), resume=str(checkpoint))
    assert message.startswith(f"resume_from_checkpoint: {checkpoint} was saved with {names}: ")
    assert fix in message


def test_a_changed_rank_over_many_modules_names_a_few_of_them():
    """PEFT's all-linear saves every layer's modules by name (SmolLM2: 210); the line names three and the count."""
    modules = sorted(f"model.layers.{layer}.{name}" for layer in range(30) for name in ("q_proj", "k_proj", "v_proj"))
    saved = {"peft_config": {"r": 4, "target_modules": modules}}
    with pytest.raises(CheckpointError) as caught:
        check_same_settings("run/checkpoint-2", saved, {"peft_config": {"r": 8, "target_modules": modules}})
    shown = f"90 modules ({modules[0]}, {modules[1]}, {modules[2]}, …)"
    assert str(caught.value) == (
        f"resume_from_checkpoint: run/checkpoint-2 was saved with peft_config LoRA r=4 on {shown}, this run has LoRA "
        f"r=8 on {shown}: it lays out the saved weights; resume with peft_config LoRA r=4 on {shown}, set in the CLI "
        f"by --use_peft, --lora_r, --lora_target_modules."
    )


def test_an_estimator_without_a_critic_for_another_resumes(saved, tmp_path):
    run = trainer("lora", copy(saved, "lora", tmp_path), advantage_estimator="rloo")
    run.train(resume_from_checkpoint=True)
    assert run.state.global_step == 3


# ------------------------------------------------------------------------------ weights or optimizer state not finite


def overwrite_with_nan(path):
    """One value of the file's first tensor (of the optimizer's first moment) set to NaN; the size stays."""
    size = os.path.getsize(path)
    if path.suffix == ".safetensors":
        tensors = load_file(path)
        next(iter(tensors.values())).view(-1)[0] = math.nan
        save_file(tensors, path, metadata={"format": "pt"})
    else:
        state = torch.load(path, weights_only=True)
        state["state"][0]["exp_avg"].view(-1)[0] = math.nan
        torch.save(state, path)
    assert os.path.getsize(path) == size


@pytest.mark.parametrize(
    "kind, name", [("full", "model.safetensors"), ("lora", "adapter_model.safetensors"), ("lora", "optimizer.pt")]
)
def test_nan_weights_or_optimizer_state_are_refused_naming_the_file(saved, tmp_path, kind, name):
    out = copy(saved, kind, tmp_path)
    overwrite_with_nan(out / "checkpoint-2" / name)
    with pytest.raises(CorruptCheckpointError) as caught:
        trainer(kind, out).train(resume_from_checkpoint=True)
    message = str(caught.value)
    assert message.startswith(f"resume_from_checkpoint: {out / 'checkpoint-2' / name} holds NaN or ±inf")
    assert message.endswith(
        f"an earlier complete checkpoint is intact: resume from {out / 'checkpoint-1'}, or delete "
        f"{out / 'checkpoint-2'} and resume from the last."
    )


def first_float_set_to_nan(saved) -> bool:
    """One value of the first floating-point tensor of a saved nest of dicts and lists set to NaN; whether found."""
    if torch.is_tensor(saved) and saved.is_floating_point() and saved.numel():
        saved.view(-1)[0] = math.nan
        return True
    values = saved.values() if isinstance(saved, dict) else saved if isinstance(saved, list) else ()
    return any(first_float_set_to_nan(value) for value in values)


@pytest.mark.parametrize("name, step", [("trl_zoo_state.pt", 2), ("trl_zoo_reference.pt", 2),
                                        ("trl_zoo_buffer_0.pt", 1)])
def test_nan_in_trl_zoos_own_files_is_refused_naming_the_file(saved, tmp_path, name, step):
    """Loaded unchecked, each failed the first step in words naming none of them."""
    out = copy(saved, "moved", tmp_path)
    path = out / f"checkpoint-{step}" / name
    state = torch.load(path, weights_only=True)
    if name == "trl_zoo_state.pt":
        state["zoo_state"]["kl_coef"] = math.nan  # a float of the algorithm state
    else:
        assert first_float_set_to_nan(state)
    torch.save(state, path)
    message = refusal(trainer("moved", out), resume=str(path.parent))
    assert message.startswith(f"resume_from_checkpoint: {path} holds NaN or ±inf (first: ")
    if name == "trl_zoo_state.pt":
        assert message.startswith(f"resume_from_checkpoint: {path} holds NaN or ±inf (first: zoo_state.kl_coef); ")


@pytest.mark.parametrize("kind, name", [("full", "model.safetensors"), ("lora", "adapter_model.safetensors"),
                                        ("lora", "trainer_state.json")])
def test_a_deleted_weights_or_trainer_state_file_is_refused_naming_it(saved, tmp_path, kind, name):
    """transformers said "Can't find a valid checkpoint" without a weights file, and raised a bare FileNotFoundError
    without trainer_state.json."""
    out = copy(saved, kind, tmp_path)
    checkpoint = out / "checkpoint-2"
    os.remove(checkpoint / name)
    message = refusal(trainer(kind, out), resume=str(checkpoint))
    assert message.startswith(f"resume_from_checkpoint: {checkpoint / name} is missing")
    assert message.endswith(
        f"an earlier complete checkpoint is intact: resume from {out / 'checkpoint-1'}, or delete {checkpoint} and "
        f"resume from the last."
    )


def test_a_nan_critic_is_refused_naming_its_file(saved, tmp_path):
    out = copy(saved, "gae", tmp_path)
    path = out / "checkpoint-2" / "critic.pt"
    state = torch.load(path, weights_only=True)
    next(iter(state["value_head"].values())).view(-1)[0] = math.nan
    torch.save(state, path)
    with pytest.raises(CorruptCheckpointError) as caught:
        trainer("gae", out).train(resume_from_checkpoint=True)
    assert str(caught.value).startswith(f"resume_from_checkpoint: {path} holds NaN or ±inf weights (first: ")


# ------------------------------------------------------------------------------ the CLI: one line, exit status 2


def test_refusals_raised_while_resuming_are_one_line_in_the_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(f'{{"prompt": "{a}+{a}=", "answer": "{2 * a}"}}\n' for a in range(10, 30)))
    out = tmp_path / "run"
    argv = ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data), "--use_peft", "true",
            "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "4",
            "--num_heldout", "4", "--eval_batch_size", "4", "--write_report", "false", "--output_dir", str(out)]
    assert main([*argv, "--max_steps", "1", "--save_strategy", "steps", "--save_steps", "1"]) == 0
    capsys.readouterr()
    resume = [*argv, "--max_steps", "2", "--resume_from_checkpoint", "true"]
    checkpoint = out / "checkpoint-1"
    assert main([*resume, "--advantage_estimator", "gae"]) == 2
    assert last_error_line(capsys).startswith(
        f"trl-zoo train: error: resume_from_checkpoint: {checkpoint} was saved with advantage_estimator None, this "
        f"run has 'gae': "
    )
    os.remove(checkpoint / "optimizer.pt")
    assert main(resume) == 2
    assert last_error_line(capsys).startswith(
        f"trl-zoo train: error: resume_from_checkpoint: {checkpoint / 'optimizer.pt'} is missing, so the optimizer "
    )


def last_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("files, process_index, world_size, missing", [
    (["rng_state_0.pth"], 1, 2, "rng_state_1.pth"),  # machine 1's file left on machine 1
    (["rng_state_0.pth", "rng_state_1.pth"], 1, 2, None),
    (["rng_state.pth"], 0, 1, None),
    (["rng_state_0.pth", "rng_state_1.pth"], 0, 1, "rng_state.pth"),  # two processes' checkpoint, resumed by one
    (["optimizer.pt"], 0, 1, None),  # no random state saved at all: nothing to miss
])
def test_a_random_state_file_another_process_wrote_is_named_when_missing(tmp_path, files, process_index,
                                                                         world_size, missing):
    """transformers resumes without this process's rng_state file with other random numbers, saying so at info
    level only; the resume layer warns in one line naming the file."""
    from trl_zoo.components.checkpoint_integrity import missing_rng_state

    for name in files:
        (tmp_path / name).write_bytes(b"")
    found = missing_rng_state(str(tmp_path), process_index, world_size)
    assert found == (None if missing is None else str(tmp_path / missing))
