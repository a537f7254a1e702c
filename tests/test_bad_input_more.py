"""Bad input that TRL meets deep inside torch or the hub client: prompts longer than the model's positions, beta > 0
with a policy built in memory, truncated checkpoint files, Ctrl-C in `trainer.train()`."""

import os
import shutil
import warnings

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import TrainerCallback

import trl_zoo
from tests import tiny
from tests.tiny import config_kwargs, digit_reward, make_trainer
from trl_zoo.cli import main
from trl_zoo.components.checkpoint_integrity import CorruptCheckpointError
from trl_zoo.components.prompt_length import PromptTooLongError, check_prompt_lengths
from trl_zoo.tasks.tiny import build_tiny_causal_lm


def in_memory_trainer(beta=0.0, prompts=None, max_positions=128, peft_config=None, **overrides):
    """A trainer on a tiny model built in memory (config name_or_path empty)."""
    torch.manual_seed(0)
    model = build_tiny_causal_lm(
        tiny.tokenizer(), hidden_size=32, num_layers=2, num_heads=2, max_positions=max_positions
    )
    dataset = Dataset.from_dict({"prompt": prompts}) if prompts else tiny.prompts_dataset()
    args = trl_zoo.GRPOConfig(**config_kwargs(beta=beta, **overrides))
    return trl_zoo.GRPOTrainer(
        model=model, reward_funcs=digit_reward, args=args, train_dataset=dataset, processing_class=tiny.tokenizer(),
        peft_config=peft_config,
    )


# prompts longer than the model's positions


def test_prompt_plus_completion_beyond_max_positions_is_one_line_at_the_first_batch():
    trainer = in_memory_trainer(prompts=["1+2=" * 10] * 16, max_positions=32, max_steps=1)
    with pytest.raises(PromptTooLongError) as caught:
        trainer.train()
    message = str(caught.value)
    assert "\n" not in message
    assert message == (
        "max_completion_length: a prompt of 40 tokens + max_completion_length 8 = 48 exceeds the model's "
        "max_position_embeddings 32; filter the dataset to prompts of at most 24 tokens."
    )
    assert trainer.state.global_step == 0


def test_prompt_plus_completion_exactly_at_max_positions_trains():
    trainer = in_memory_trainer(prompts=["1+2=" * 6] * 16, max_positions=32, max_steps=1)  # 24 + 8 = 32
    trainer.train()
    assert trainer.state.global_step == 1


def test_prompt_length_fixes_name_the_room_left():
    check_prompt_lengths([[0] * 10, [0] * 20], 12, 32)  # 20 + 12 = 32 fits
    with pytest.raises(PromptTooLongError, match=r"a prompt of 21 tokens .* at most 20 tokens, or lower "
                                                 r"max_completion_length to at most 11\.$"):
        check_prompt_lengths([[0] * 21], 12, 32)
    with pytest.raises(PromptTooLongError) as caught:  # no prompt could fit: the fix is the completion length's
        check_prompt_lengths([[0] * 3], 32, 32)
    assert str(caught.value) == (
        "max_completion_length: 32 tokens leave no room for a prompt in the model's max_position_embeddings 32; "
        "lower max_completion_length below 32."
    )
    with pytest.raises(PromptTooLongError, match=r"^max_completion_length: a prompt of 40 tokens .* at most 20 "
                                                 r"tokens\.$"):  # the prompt alone is too long: no other fix
        check_prompt_lengths([[0] * 40], 12, 32)
    check_prompt_lengths([[0] * 10_000], 8, None)  # no position limit: not checked


@pytest.mark.parametrize("max_completion_length", [16, 40])
def test_a_completion_length_that_leaves_no_room_for_a_prompt_is_refused_at_construction(max_completion_length):
    """Whatever the prompts (here 4 characters), nothing fits: said when the trainer is built, not deep in train()."""
    with pytest.raises(PromptTooLongError) as caught:
        in_memory_trainer(max_positions=16, max_completion_length=max_completion_length)
    assert str(caught.value) == (
        f"max_completion_length: {max_completion_length} tokens leave no room for a prompt in the model's "
        f"max_position_embeddings 16; lower max_completion_length below 16."
    )
    assert in_memory_trainer(max_positions=16, max_completion_length=15).max_completion_length == 15


def test_prompt_too_long_in_the_cli_is_one_line_and_exit_status_2(tmp_path, capsys):
    data = tmp_path / "long.jsonl"
    data.write_text("\n".join('{"prompt": "%s", "answer": "1"}' % ("12+34=" * 30) for _ in range(20)))
    argv = ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data), "--num_heldout", "4",
            "--max_completion_length", "6", "--write_report", "false", "--max_steps", "1",
            "--per_device_train_batch_size", "8", "--num_generations", "4", "--eval_every_steps", "1",
            "--output_dir", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "trl-zoo train: error: max_completion_length: a prompt of 180 tokens + max_completion_length 6 = 186 exceeds "
        "the model's max_position_embeddings 128; filter the dataset to prompts of at most 122 tokens."
    )


def test_a_prompt_of_megabytes_is_refused_by_its_characters_before_it_is_tokenized(monkeypatch):
    trainer = in_memory_trainer(prompts=["1+2=" * 250_000] * 16, max_positions=32, max_steps=1)
    tokenized = []
    monkeypatch.setattr(type(trainer.processing_class), "__call__", lambda *a, **k: tokenized.append(1))
    with pytest.raises(PromptTooLongError) as raised:
        trainer.train()
    assert str(raised.value) == (  # the tiny tokenizer's longest entry has 5 characters: 10 per token, doubled
        "max_completion_length: a prompt of 1,000,000 characters, so of at least 100,000 tokens (no token of this "
        "tokenizer stands for more than 10 characters), + max_completion_length 8 exceeds the model's "
        "max_position_embeddings 32; filter the dataset to prompts of at most 24 tokens."
    )
    assert tokenized == []


def test_a_prompt_of_megabytes_in_a_data_file_is_one_line_before_the_run_starts(tmp_path, capsys):
    data = tmp_path / "long.jsonl"
    rows = ['{"prompt": "%s", "answer": "1"}' % ("12+34=" * (200_000 if row == 7 else 1)) for row in range(20)]
    data.write_text("\n".join(rows))
    argv = ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data), "--num_heldout", "0",
            "--max_completion_length", "6", "--max_steps", "1", "--output_dir", str(tmp_path / "run")]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"trl-zoo train: error: max_completion_length: a prompt of 1,200,000 characters (in the training split of "
        f"{data}), so of at least 120,000 tokens (no token of this tokenizer stands for more than 10 characters), + "
        f"max_completion_length 6 exceeds the model's max_position_embeddings 128; filter the dataset to prompts of "
        f"at most 122 tokens."
    )


# beta > 0 with a policy built in memory


def test_beta_with_in_memory_model_uses_a_frozen_copy_as_reference():
    with pytest.warns(UserWarning, match=r"^beta=0\.1: the model was passed as an object whose name_or_path \(''\)"):
        trainer = in_memory_trainer(beta=0.1, max_steps=2)
    reference, policy = trainer.ref_model, trainer.model
    assert reference is not policy
    before = {name: p.detach().clone() for name, p in reference.named_parameters()}
    for (name, p), (_, q) in zip(policy.named_parameters(), reference.named_parameters()):
        assert torch.equal(p, q), name
        assert p.data_ptr() != q.data_ptr(), name
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "kl" in entry]
    assert abs(logs[0]["kl"]) < 1e-6  # π_ref = π_θ at the first step
    assert all(torch.equal(p, before[name]) for name, p in reference.named_parameters())
    moved = max((p - before[name]).abs().max().item() for name, p in policy.named_parameters())
    assert moved > 1e-4
    assert logs[-1]["kl"] > 0


def test_beta_with_in_memory_model_and_peft_uses_the_adapter_free_base():
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="beta=")
        trainer = in_memory_trainer(
            beta=0.1, max_steps=1, peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
        )
    assert trainer.ref_model is None
    trainer.train()
    assert abs(trainer.state.log_history[0]["kl"]) < 1e-6


def test_in_memory_model_without_processing_class_is_one_line():
    model = build_tiny_causal_lm(tiny.tokenizer(), hidden_size=32, num_layers=2, num_heads=2)
    args = trl_zoo.GRPOConfig(**config_kwargs())
    with pytest.raises(ValueError, match=r"^processing_class: .*name_or_path \(''\) cannot be loaded.*pass "
                                         r"processing_class=tokenizer\.$"):
        trl_zoo.GRPOTrainer(model=model, reward_funcs=digit_reward, args=args, train_dataset=tiny.prompts_dataset())


# truncated checkpoint files

CHECKPOINT_FILES = ["trl_zoo_state.pt", "model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth",
                    "trainer_state.json"]


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """Checkpoints 2 and 4 of a full fine-tuning run and of a LoRA run."""
    runs = {}
    for kind, peft in (("full", None), ("lora", LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]))):
        out = str(tmp_path_factory.mktemp(kind))
        make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, output_dir=out, max_steps=4, save_strategy="steps",
                     save_steps=2, peft_config=peft).train()
        runs[kind] = out
    return runs


def truncated_copy(source: str, target, name: str) -> str:
    shutil.copytree(source, target)
    path = os.path.join(target, "checkpoint-4", name)
    with open(path, "r+b") as file:
        file.truncate(os.path.getsize(path) // 2)
    return str(target)


@pytest.mark.parametrize("kind,name", [("full", name) for name in CHECKPOINT_FILES]
                         + [("lora", "adapter_model.safetensors")])
def test_truncated_checkpoint_file_names_itself_and_the_earlier_checkpoint(saved_run, tmp_path, kind, name):
    out = truncated_copy(saved_run[kind], tmp_path / "run", name)
    peft = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]) if kind == "lora" else None
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, output_dir=out, max_steps=6, peft_config=peft)
    with pytest.raises(CorruptCheckpointError) as caught:
        trainer.train(resume_from_checkpoint=True)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"resume_from_checkpoint: {os.path.join(out, 'checkpoint-4', name)} is corrupt (")
    assert message.endswith(
        f"an earlier complete checkpoint is intact: resume from {os.path.join(out, 'checkpoint-2')}, or delete "
        f"{os.path.join(out, 'checkpoint-4')} and resume from the last."
    )
    trainer.train(resume_from_checkpoint=os.path.join(out, "checkpoint-2"))  # the named one resumes
    assert trainer.state.global_step == 6


def test_truncated_checkpoint_in_the_cli_is_one_line_and_exit_status_2(saved_run, tmp_path, capsys):
    out = truncated_copy(saved_run["full"], tmp_path / "run", "optimizer.pt")
    shutil.rmtree(os.path.join(out, "checkpoint-2"))
    checkpoint = os.path.join(out, "checkpoint-4")
    assert main(["train", "--resume_from_checkpoint", checkpoint, "--output_dir", out]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"trl-zoo train: error: resume_from_checkpoint: {checkpoint}/optimizer.pt is corrupt (")
    assert line.endswith("no earlier complete checkpoint beside it; start afresh without resume_from_checkpoint.")


# Ctrl-C in trainer.train()


class InterruptAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt


@pytest.mark.parametrize("save_steps", [2, 0], ids=["checkpoint", "no-checkpoint"])
def test_ctrl_c_in_train_says_the_step_and_last_checkpoint_and_propagates(tmp_path, capsys, save_steps):
    out = str(tmp_path / "run")
    save = dict(save_strategy="steps", save_steps=save_steps) if save_steps else dict(save_strategy="no")
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, output_dir=out, max_steps=6, **save)
    trainer.add_callback(InterruptAt(3))
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    lines = capsys.readouterr().err.strip().splitlines()
    if save_steps:
        expected = (f"trl_zoo: interrupted at step 3; last checkpoint: {os.path.join(out, 'checkpoint-2')}; resume "
                    f"with train(resume_from_checkpoint=True).")
    else:
        expected = "trl_zoo: interrupted at step 3; no checkpoint saved, so a new run starts from the beginning."
    assert lines[-1] == expected


# found by benchmarks/bad_input_battery.py


@pytest.mark.parametrize("field,value,message", [
    ("learning_rate", -1e-3, r"^learning_rate: must be a finite number ≥ 0, got -0\.001; e\.g\. 1e-6\.$"),
    ("learning_rate", float("nan"), r"^learning_rate: must be a finite number ≥ 0, got nan"),
    ("top_p", 1.5, r"^top_p: nucleus sampling keeps a probability mass in \(0, 1\], got 1\.5"),
    ("top_p", 0.0, r"^top_p: .* got 0\.0"),
    ("temperature", 0.0, r"^temperature: must be > 0, got 0\.0; GRPO samples its completions"),
])
def test_impossible_optimiser_and_sampling_settings_are_one_line(field, value, message):
    with pytest.raises(ValueError, match=message):
        trl_zoo.GRPOConfig(**config_kwargs(**{field: value}))


def test_learning_rate_zero_and_top_p_one_are_allowed():
    args = trl_zoo.GRPOConfig(**config_kwargs(learning_rate=0.0, top_p=1.0))
    assert (args.learning_rate, args.top_p) == (0.0, 1.0)


def none_reward(completions, **kwargs):
    return [None] * len(completions)


def half_none_reward(completions, **kwargs):
    return [None if i % 2 else 1.0 for i in range(len(completions))]


def test_every_reward_none_for_a_whole_batch_warns_once_per_batch():
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=[none_reward], max_steps=2)
    with pytest.warns(UserWarning) as caught:
        trainer.train()
    ours = [str(w.message) for w in caught if str(w.message).startswith("reward_funcs: every reward function")]
    assert ours == [
        "reward_funcs: every reward function (none_reward) returned None for all 8 completions of this generation "
        "batch, so none is scored and nothing is learned from it; check that the rewards receive the dataset columns "
        "they need (None means 'cannot score')."
    ] * 2


def test_some_rewards_none_does_not_warn():
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=[half_none_reward], max_steps=1)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="reward_funcs: every reward function")
        trainer.train()
    assert trainer.state.global_step == 1


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_policy_with_a_non_finite_weight_stops_at_construction_naming_it(value):
    model = build_tiny_causal_lm(tiny.tokenizer(), hidden_size=32, num_layers=2, num_heads=2)
    with torch.no_grad():
        model.model.layers[1].self_attn.q_proj.weight[3, 5] = value
    args = trl_zoo.GRPOConfig(**config_kwargs())
    count = len(list(model.parameters()))
    with pytest.raises(ValueError, match=rf"^model: 1 of {count} parameter tensors hold NaN or ±inf \(first: "
                                         rf"model\.layers\.1\.self_attn\.q_proj\.weight\); .*intact checkpoint\.$"):
        trl_zoo.GRPOTrainer(model=model, reward_funcs=digit_reward, args=args, train_dataset=tiny.prompts_dataset(),
                            processing_class=tiny.tokenizer())


def adapter_warnings(**overrides) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, **overrides)
    return [str(w.message) for w in caught if str(w.message).startswith("learning_rate:")]


def test_a_lora_adapter_at_a_full_fine_tuning_learning_rate_warns_naming_a_lora_one():
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"])
    assert adapter_warnings(peft_config=lora, learning_rate=1e-6) == [
        "learning_rate: 1e-06 trains the PEFT adapter (LoRA) at a full fine-tuning rate (TRL's default is 1e-6), at "
        "which an adapter barely moves; LoRA usually takes 1e-5 to 2e-4 (the chat tasks' preset: 2e-4), so set "
        "learning_rate, e.g. 2e-4."
    ]
    assert adapter_warnings(peft_config=lora, learning_rate=2e-4) == []
    assert adapter_warnings(learning_rate=1e-6) == []  # full fine-tuning: its own range
