"""The model card TRL writes on `save_model` names the loss, advantage estimator and sampler the run used and
cites their papers, instead of TRL's fixed "GRPO (DeepSeekMath)"; a packaged model's card names its hub id."""

from pathlib import Path

import pytest

import trl_zoo
from tests.tiny import make_trainer
from tests.trl_internals import training_method
from trl_zoo.cli.train.model_card import model_card


def test_model_card_names_and_cites_the_run_s_loss_estimator_and_sampler(tmp_path):
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, output_dir=str(tmp_path), loss_type="cispo", epsilon_high=5.0,
        advantage_estimator="rloo", dynamic_sampling="resample",
    )
    trainer.create_model_card(model_name="tiny")
    card = (Path(tmp_path) / "README.md").read_text()
    assert "trained with trl_zoo's GRPOTrainer with loss `cispo` (MiniMax-M1, arXiv:2506.13585)" in card
    assert "advantage estimator `rloo` (RLOO (Ahmadian et al.), arXiv:2402.14740)" in card
    assert "dynamic sampler `resample` (DAPO, arXiv:2503.14476)" in card
    for arxiv_id in ("2506.13585", "2402.14740", "2503.14476"):
        assert f"eprint        = {{{arxiv_id}}}" in card
    assert "DeepSeekMath" not in card


def test_model_card_of_the_default_run_names_trl_s_advantages():
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, loss_type="bnpo")
    name, paper = training_method(trainer)
    assert name == (
        "trl_zoo's GRPOTrainer with loss `bnpo` (TRL's loss_type, no paper) and TRL's group-normalised advantages "
        "(DeepSeekMath, arXiv:2402.03300)"
    )
    assert "2402.03300" in paper["citation"]


# ------------------------------------------------------------------------------------------------------ the CLI's card
def card_run(tmp_path, *extra) -> tuple[str, dict]:
    """`trl-zoo train` on a local file with the tiny local model; the saved README.md and summary.json."""
    import json

    from trl_zoo.cli import main

    data = tmp_path / "sums.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"{a}+1=", "answer": str(a + 1)}) for a in range(10, 40)))
    out = tmp_path / "run"
    argv = ["train", "--model_name_or_path", tiny_model_dir(), "--dataset_name", str(data), "--num_heldout", "5",
            "--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4",
            "--max_completion_length", "4", "--loss_type", "cispo", "--advantage_estimator", "rloo",
            "--write_report", "false", "--output_dir", str(out), *extra]
    assert main(argv) == 0
    return (out / "README.md").read_text(), json.loads((out / "summary.json").read_text())


def tiny_model_dir() -> str:
    from tests import tiny

    return tiny.model_dir()


def assert_real_card(card: str, summary: dict):
    assert "[More Information Needed]" not in card and "None" not in card
    assert f"A LoRA adapter for {summary['base_policy']}" in card
    assert "trained with trl_zoo's GRPOTrainer with loss `cispo` (MiniMax-M1, arXiv:2506.13585)" in card
    assert "advantage estimator `rloo` (RLOO (Ahmadian et al.), arXiv:2402.14740)" in card
    assert f"| data | {summary['task']} |" in card
    assert (
        f"Greedy held-out accuracy {summary['accuracy_before']:.1%} before RL, {summary['accuracy_after']:.1%} "
        f"after {summary['steps']} step{'s' if summary['steps'] != 1 else ''} (best {summary['best_accuracy']:.1%} "
        f"at step {summary['best_step']}), on "
        f"{summary['heldout_size']} held-out prompts scored by `exact_match`"
    ) in card
    for arxiv_id in ("2506.13585", "2402.14740"):
        assert f"eprint        = {{{arxiv_id}}}" in card


def test_the_saved_adapter_has_the_real_card_without_checkpoints(tmp_path, capsys):
    card, summary = card_run(tmp_path, "--max_steps", "1")
    assert_real_card(card, summary)
    assert "after 1 step (" in card and "LoRA fine-tuning, 1 step ..." in capsys.readouterr().out  # not "1 steps"
    assert f'PeftModel.from_pretrained(base, "{tmp_path / "run"}")' in card
    assert "base_model:" not in card  # a local folder is not a hub id, so the metadata leaves it out


def test_the_saved_adapter_has_the_real_card_with_checkpoints(tmp_path):
    card, summary = card_run(tmp_path, "--save_strategy", "steps", "--save_steps", "1")
    assert (tmp_path / "run" / "checkpoint-1").is_dir()
    assert_real_card(card, summary)


def packaged_summary(tmp_path, folder: str) -> dict:
    """A finished run's summary.json whose policy is a dequantized checkpoint in the cache (`folder` under gguf/)."""
    model = str(tmp_path / "cache" / "gguf" / folder)
    return {"name": "run", "loss_type": "grpo", "task": "chat_arithmetic", "model": model, "base_policy": model,
            "reward_funcs": ["final_number"], "seed": 0, "steps": 40, "accuracy_before": 0.156, "accuracy_after": 0.75,
            "best_accuracy": 0.756, "best_step": 30, "heldout_size": 500, "adapter_dir": "run"}


@pytest.mark.parametrize("short_name, folder, hub_id", [
    ("smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1-91424000", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    ("gemma3-270m", "gemma-3-270m-q4_k_m-253114016", "google/gemma-3-270m"),
])
def test_a_packaged_models_card_names_its_hub_id_and_no_cache_path(tmp_path, short_name, folder, hub_id):
    summary = packaged_summary(tmp_path, folder)
    card = str(model_card(summary, "trl_zoo's GRPOTrainer", None, {}, adapter=True, heldout_reward="final_number",
                          builtin_task=True))
    assert f"base_model: {hub_id}\n" in card
    assert f"A LoRA adapter for {hub_id} (trl_zoo's packaged `{short_name}`: its GGUF file, dequantized)" in card
    assert f'base = AutoModelForCausalLM.from_pretrained(policy_path("{short_name}"))' in card
    assert f'AutoTokenizer.from_pretrained(policy_path("{short_name}"))' in card
    assert str(tmp_path) not in card and "gguf/" not in card


def test_a_folder_that_only_looks_like_a_packaged_one_keeps_its_path(tmp_path):
    summary = packaged_summary(tmp_path, "SmolLM2-135M-Instruct.Q4_1-latest")  # not <file stem>-<size>
    card = str(model_card(summary, "m", None, {}, adapter=True, heldout_reward="final_number", builtin_task=True))
    assert "base_model:" not in card and f'from_pretrained("{summary["model"]}")' in card
