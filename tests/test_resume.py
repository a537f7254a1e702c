"""Resumption: train, checkpoint, resume in a fresh trainer; the resumed steps log exactly what the uninterrupted run
logged (same seed, tiny model), including trl_zoo's state (adaptive KL coefficient, ppo_kl's β, reference resets, the
"ref" adapter or the moved reference model, the dynamic-sampling prompt stream) and TRL's buffered generation batch
when the checkpoint falls inside a generation cycle."""

import os

import pytest
import torch
from peft import LoraConfig

import trl_zoo
from tests.tiny import digit_reward, make_trainer
from tests.trl_internals import micro_step
from trl_zoo.components.dynamic_sampling import PROMPT_BATCHES_DRAWN
from trl_zoo.components.resume import BUFFER_FILE, REFERENCE_FILE, STATE_FILE
from trl_zoo.losses.ppo_kl import BETA

# wall-clock measurements and whole-run averages (train_loss averages the steps this trainer ran)
UNREPRODUCIBLE = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss"}


def lora():
    return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def half_constant_reward(prompts, completions, **kwargs):
    """0 for every completion of a prompt with an even first operand (a zero-spread group), digit share otherwise."""
    digits = digit_reward(completions)
    return [0.0 if int(prompt.split("+")[0]) % 2 == 0 else value for prompt, value in zip(prompts, digits)]


CASES = {
    "plain": dict(options=dict(), resume_at=(2,)),
    # adaptive β in the loss, ppo_kl's β, ProRL resets into the LoRA "ref" adapter, DAPO's extra prompt stream
    "zoo_state_lora_dynamic_sampling": dict(
        options=dict(
            beta=0.1, kl_target=0.01, ref_reset_steps=2, loss_type="ppo_kl", dynamic_sampling="resample",
            dynamic_sampling_on_exhausted="fill",
        ),
        peft=True,
        reward=half_constant_reward,
        resume_at=(2,),
    ),
    # num_iterations=2: step 2 reuses step 1's buffered batch; step 3 samples one, scored against the reference
    # model that the reset at step 2 moved
    "generation_cycle_reference_model": dict(
        options=dict(beta=0.1, ref_reset_steps=1, num_iterations=2, save_steps=1), resume_at=(1, 2)
    ),
}
RESUMPTIONS = [(name, step) for name, case in CASES.items() for step in case["resume_at"]]


def build(case: dict, output_dir: str):
    options = dict(output_dir=output_dir, max_steps=4, save_strategy="steps", save_steps=2)
    options.update(case["options"])
    return make_trainer(
        trl_zoo.GRPOTrainer,
        trl_zoo.GRPOConfig,
        peft_config=lora() if case.get("peft") else None,
        reward_funcs=case.get("reward"),
        **options,
    )


def logs_after(trainer, step: int) -> list[dict]:
    return [
        {key: value for key, value in log.items() if key not in UNREPRODUCIBLE}
        for log in trainer.state.log_history
        if log["step"] > step
    ]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """One uninterrupted 4-step run per case, writing the checkpoints the resumed runs start from."""
    runs = {}
    for name, case in CASES.items():
        output_dir = str(tmp_path_factory.mktemp(name))
        trainer = build(case, output_dir)
        trainer.train()
        runs[name] = (trainer, output_dir)
    return runs


@pytest.mark.parametrize("name, step", RESUMPTIONS, ids=[f"{name}-from_step_{step}" for name, step in RESUMPTIONS])
def test_resumed_run_logs_what_the_uninterrupted_run_logged(name, step, uninterrupted):
    case = CASES[name]
    full, output_dir = uninterrupted[name]
    resumed = build(case, output_dir)
    resumed.train(resume_from_checkpoint=os.path.join(output_dir, f"checkpoint-{step}"))

    expected = logs_after(full, step)
    assert len(expected) == 4 - step + 1  # one log per step, plus the end-of-training summary
    assert logs_after(resumed, step) == expected
    assert resumed.zoo_state == full.zoo_state
    assert micro_step(resumed) == micro_step(full)


def test_zoo_state_and_ref_adapter_are_in_the_checkpoint(uninterrupted):
    full, output_dir = uninterrupted["zoo_state_lora_dynamic_sampling"]
    saved = torch.load(os.path.join(output_dir, "checkpoint-2", STATE_FILE), weights_only=True)["zoo_state"]
    # two on-policy steps measure KL(π_old‖π_θ) = 0 < target/1.5: ppo_kl's β halves twice
    assert saved[BETA] == 0.25
    assert saved["ref_resets"] == 1
    assert saved[PROMPT_BATCHES_DRAWN] > 0  # resample drew extra prompts (half the groups have no spread)
    assert full.zoo_state[PROMPT_BATCHES_DRAWN] > saved[PROMPT_BATCHES_DRAWN]
    assert full.zoo_state["kl_coef"] != 0.1
    assert os.path.isfile(os.path.join(output_dir, "checkpoint-2", "ref", "adapter_model.safetensors"))
    assert not os.path.exists(os.path.join(output_dir, "checkpoint-2", BUFFER_FILE.format(process=0)))


def test_buffer_and_reference_weights_are_saved_only_when_needed(uninterrupted):
    full, output_dir = uninterrupted["generation_cycle_reference_model"]
    inside, boundary = os.path.join(output_dir, "checkpoint-1"), os.path.join(output_dir, "checkpoint-2")
    assert os.path.isfile(os.path.join(inside, BUFFER_FILE.format(process=0)))  # step 2 reuses step 1's batch
    assert not os.path.exists(os.path.join(boundary, BUFFER_FILE.format(process=0)))  # step 3 samples anew
    # after the reset at step 4 the reference is the final policy
    reference = torch.load(os.path.join(output_dir, "checkpoint-4", REFERENCE_FILE), weights_only=True)
    for key, value in full.model.state_dict().items():
        torch.testing.assert_close(reference[key], value, rtol=0, atol=0)
    plain_output = uninterrupted["plain"][1]
    assert not os.path.exists(os.path.join(plain_output, "checkpoint-2", REFERENCE_FILE))  # beta = 0: no reference


def test_without_the_zoo_state_the_resumed_run_warns_and_diverges(uninterrupted, tmp_path):
    """The control: the same checkpoint stripped of trl_zoo's file resumes from the initial β and stream."""
    case = CASES["zoo_state_lora_dynamic_sampling"]
    full, output_dir = uninterrupted["zoo_state_lora_dynamic_sampling"]
    stripped = tmp_path / "checkpoint-2"
    os.symlink(os.path.join(output_dir, "checkpoint-2"), tmp_path / "original")
    stripped.mkdir()
    for entry in os.listdir(tmp_path / "original"):
        if entry != STATE_FILE:
            os.symlink(tmp_path / "original" / entry, stripped / entry)
    resumed = build(case, str(tmp_path / "run"))
    with pytest.warns(UserWarning, match=f"resume_from_checkpoint: .* has no {STATE_FILE}"):
        resumed.train(resume_from_checkpoint=str(stripped))
    first = logs_after(resumed, 2)[0]
    assert first[BETA] == 1.0 and logs_after(full, 2)[0][BETA] == 0.25
    assert resumed.zoo_state[PROMPT_BATCHES_DRAWN] < full.zoo_state[PROMPT_BATCHES_DRAWN]


def test_resume_from_the_last_checkpoint_skips_a_half_written_one(tmp_path):
    """A save killed midway leaves checkpoint-N without trainer_state.json (transformers writes it last): resuming
    from "the last checkpoint" takes the newest complete one and says which folder it skipped."""
    output_dir = str(tmp_path)
    build(CASES["plain"], output_dir).train()  # checkpoint-2, checkpoint-4
    os.remove(os.path.join(output_dir, "checkpoint-4", "trainer_state.json"))
    trainer = build(CASES["plain"], output_dir)
    with pytest.warns(UserWarning, match=r"skipped checkpoint-4 \(no trainer_state.json.*checkpoint-2"):
        trainer.train(resume_from_checkpoint=True)
    assert trainer.state.global_step == 4
    # steps 1-2 come from checkpoint-2's trainer_state.json, 3-4 were trained after it
    assert [log["step"] for log in trainer.state.log_history if "loss" in log] == [1, 2, 3, 4]
