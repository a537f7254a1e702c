"""A `trl-zoo train` run's prompts as its policy reads them: in the format its tokenizer renders (chat messages or
text), and short enough to leave room for `max_completion_length` in the policy's positions.

    policy_positions(model_path, ...)                      ->  max_position_embeddings (None: unknown); refuses a
                                                               completion length that leaves no room for a prompt
    policy_prompts(task, train, heldout, source, ...)      ->  (train, held-out) formatted and checked

A dataset's prompts are counted in characters before any is tokenized (a stream's at each generation batch); a
built-in task's few short prompts are tokenized and the longest measured. Bad input raises `ConfigError` (one line).

Tests: tests/test_presets_builtin.py (no room for a prompt), tests/test_chat_prompts.py (prompt formats),
tests/test_base_prompt_cli.py (a base model's plain-text format).
"""

from __future__ import annotations

from datasets import IterableDataset

from ...components.prompt_length import characters_per_token, check_prompt_characters, completion_room_error
from ...tasks.chat_arithmetic import ChatArithmeticTask
from ...tasks.evaluation import render_prompt
from ..arguments.preset_lengths import position_limit_of
from ..errors import ConfigError
from .training_data import chat_prompts


def policy_positions(model_path: str, model_args, training_args) -> int | None:
    """The policy's max_position_embeddings (None when its config has none), once max_completion_length fits it."""
    positions = position_limit_of(model_path, model_args.model_revision, training_args.trust_remote_code)
    too_long = completion_room_error(training_args.max_completion_length, positions)
    if too_long:
        raise ConfigError(too_long)
    return positions


def policy_prompts(task, train, heldout, source: str, tokenizer, positions: int | None, task_args, training_args,
                   log=print):
    """The splits' prompts formatted for the tokenizer and checked against `positions`; `task` is the built-in
    task, None for a dataset."""
    if isinstance(task, ChatArithmeticTask):  # a base model (no chat template): a plain-text format
        train, heldout = task.prompts_for(train, heldout, tokenizer, log)
    train, heldout = (
        chat_prompts(d, task_args, tokenizer, f"the {name} split of {source}", log) if d is not None else d
        for d, name in ((train, "training"), (heldout, "held-out"))
    )
    for d, name in ((train, "training"), (heldout, "held-out")):  # a stream's rows: at each generation batch
        if d is not None and not isinstance(d, IterableDataset):  # counted before any is tokenized
            check_prompt_characters(d["prompt"], training_args.max_completion_length, positions,
                                    characters_per_token(tokenizer), f"the {name} split of {source}")
    if task is not None:  # a built-in task's prompts are few and short
        prompts = (*train["prompt"], *(heldout["prompt"] if heldout is not None else ()))
        texts = [render_prompt(tokenizer, prompt) for prompt in prompts]
        longest = max(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])
        too_long = completion_room_error(training_args.max_completion_length, positions, longest)
        if too_long:
            raise ConfigError(too_long)
    return train, heldout
