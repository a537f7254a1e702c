"""`trl-zoo train` on a chat-arithmetic level with a model whose tokenizer has no chat template (a base model) asks
the questions in the few-shot plain-text format, says so in one line, and the reward sees those prompts."""

from __future__ import annotations

from tests import tiny
from trl_zoo.cli import main

SEEN: list[str] = []


def recording_reward(prompts, completions, **kwargs):
    SEEN.extend(prompts)
    return [float(len(str(completion))) for completion in completions]


def test_a_tokenizer_without_a_chat_template_gets_the_few_shot_format(tmp_path, capsys):
    assert getattr(tiny.tokenizer(), "chat_template", None) is None
    SEEN.clear()
    argv = [
        "train", "--task", "chat_arithmetic", "--model_name_or_path", tiny.model_dir(0),
        "--reward_funcs", "tests.test_base_prompt_cli.recording_reward", "--num_heldout", "2", "--max_steps", "1",
        "--max_completion_length", "3", "--per_device_train_batch_size", "4", "--num_generations", "2",
        "--gradient_accumulation_steps", "1", "--use_cpu", "true", "--bf16", "false",
        "--output_dir", str(tmp_path / "run"), "--write_report", "false",
    ]
    assert main(argv) == 0
    assert "few_shot format" in capsys.readouterr().out
    assert SEEN and all(prompt.startswith("Question: What is ") and prompt.endswith("\nAnswer:") for prompt in SEEN)
    assert all(prompt.count("Question: ") == 4 for prompt in SEEN)  # three solved examples, then the question
