"""`trl-zoo train` takes every prompt format TRL takes — plain strings, chat-message lists, a mix row by row — and
applies the chat template only where TRL would: a row that is already a list of messages is never wrapped in a
second message; plain strings become a user message when the tokenizer has a chat template (`--conversational`)."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset, Features, Json, Value

from trl_zoo.cli import main
from trl_zoo.cli.arguments.train_arguments import TaskArguments
from trl_zoo.cli.errors import ConfigError
from trl_zoo.cli.train.training_data import chat_prompts
from trl_zoo.tasks.evaluation import render_prompt
from trl_zoo.tasks.tiny import build_char_tokenizer, build_tiny_causal_lm

# like real templates, it cannot render a message whose content is not text (a message wrapped in a second one)
TEMPLATE = ("{% for m in messages %}{% if m['content'] is not string %}{{ raise_exception('content is not text') }}"
            "{% endif %}{{ m['role'][0] }}:{{ m['content'] }};{% endfor %}{% if add_generation_prompt %}a:{% endif %}")
USER = [{"role": "user", "content": "2+2="}]
WITH_SYSTEM = [{"role": "system", "content": "add"}, {"role": "user", "content": "3+3="}]


def chat_tokenizer():
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def prepared(prompts, tokenizer, **task):
    features = Features({"prompt": Json(), "answer": Value("string")})  # as datasets reads a mixed JSONL column
    dataset = Dataset.from_list([{"prompt": prompt, "answer": "0"} for prompt in prompts], features=features)
    return chat_prompts(dataset, TaskArguments(**task), tokenizer, where="data.jsonl", log=lambda *a: None)["prompt"]


def test_plain_strings_become_one_user_message_with_a_chat_template():
    assert prepared(["1+1="], chat_tokenizer()) == [[{"role": "user", "content": "1+1="}]]
    assert prepared(["1+1="], chat_tokenizer(), system_prompt="add") == [
        [{"role": "system", "content": "add"}, {"role": "user", "content": "1+1="}]]
    assert prepared(["1+1="], build_char_tokenizer()) == ["1+1="]  # no template: text, as TRL reads it
    assert prepared(["1+1="], chat_tokenizer(), conversational=False) == ["1+1="]


def test_message_lists_are_kept_as_they_are():
    assert prepared([USER, WITH_SYSTEM], chat_tokenizer()) == [USER, WITH_SYSTEM]
    assert prepared([USER], chat_tokenizer(), system_prompt="x") == [USER]
    assert prepared([USER], chat_tokenizer(), conversational=False) == [USER]  # TRL renders it whatever the flag


def test_a_mix_row_by_row_becomes_all_messages_each_wrapped_once():
    rows = prepared(["1+1=", USER, WITH_SYSTEM], chat_tokenizer())
    assert rows == [[{"role": "user", "content": "1+1="}], USER, WITH_SYSTEM]
    assert [render_prompt(chat_tokenizer(), row) for row in rows] == ["u:1+1=;a:", "u:2+2=;a:", "s:add;u:3+3=;a:"]


def test_formats_the_tokenizer_or_the_flag_cannot_serve_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^prompt: row 1 of data.jsonl is a list of chat messages, and the "
                                          r"tokenizer has no chat template"):
        prepared(["1+1=", USER], build_char_tokenizer())
    with pytest.raises(ConfigError, match=r"^conversational: false leaves row 0 of data.jsonl as text while row 1 "
                                          r"is chat messages"):
        prepared(["1+1=", USER], chat_tokenizer(), conversational=False)
    with pytest.raises(ConfigError, match=r"^conversational: true needs a chat template"):
        prepared(["1+1="], build_char_tokenizer(), conversational=True)


def test_train_on_conversational_and_mixed_jsonl_with_a_chat_model(tmp_path):
    """A real `trl-zoo train` run on a tiny chat-templated model: chat-message prompts and a mix of both formats."""
    tokenizer = chat_tokenizer()
    model_dir = tmp_path / "chat_model"
    build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=1, num_heads=2).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    rows = [{"prompt": [{"role": "user", "content": f"{a}+{a}="}] if a % 2 else f"{a}+{a}=", "answer": str(2 * a)}
            for a in range(10, 26)]
    data = tmp_path / "chat.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows))
    out = tmp_path / "run"
    argv = ["train", "--model_name_or_path", str(model_dir), "--dataset_name", str(data), "--num_heldout", "4",
            "--max_completion_length", "4", "--max_steps", "1", "--per_device_train_batch_size", "4",
            "--num_generations", "2", "--eval_every_steps", "1", "--write_report", "false", "--output_dir", str(out),
            "--report_to", "none", "--save_strategy", "no"]
    assert main(argv) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 1
