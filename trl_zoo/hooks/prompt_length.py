"""Trainer hook: a prompt that, with its completion, does not fit in the model's positions is an error.

TRL 1.16 has no ``max_prompt_length``: it tokenizes every prompt whole and generates ``max_completion_length``
tokens after it. A model with a position limit (``config.max_position_embeddings``) then either crashes in its
position embedding or, with rotary positions, generates and trains past the positions it was trained for, with
only a generation notice. This hook checks, once per generation batch on the host-side token lists (no device
sync), that

    max_i len(prompt_ids_i) + max_completion_length ≤ max_position_embeddings

and raises `PromptTooLongError` (a ValueError), one line naming the longest prompt's length, the model limit and
the fixes, otherwise. Models without ``max_position_embeddings`` are not checked.

Tests: tests/test_bad_input_more.py (beyond and exactly at the model's positions, in the API and the CLI).
"""

from __future__ import annotations

from ..dataset_values import check_batch_prompts


class PromptTooLongError(ValueError):
    """A prompt plus max_completion_length exceeds the model's max_position_embeddings."""


def position_limit(model) -> int | None:
    """The model's (text model's) max_position_embeddings, None when it has none."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    return getattr(config, "max_position_embeddings", None)


def check_prompt_lengths(prompt_ids, max_completion_length: int, limit: int | None) -> None:
    """Raise a one-line PromptTooLongError when the longest prompt plus max_completion_length exceeds `limit`."""
    if limit is None or not prompt_ids:
        return
    longest = max(len(ids) for ids in prompt_ids)
    if longest + max_completion_length > limit:
        room = limit - max_completion_length
        fix = f"filter the dataset to prompts of at most {room} tokens" if room > 0 else "shorten the prompts"
        if longest < limit:
            fix += f", or lower max_completion_length to at most {limit - longest}"
        raise PromptTooLongError(
            f"max_completion_length: a prompt of {longest} tokens + max_completion_length {max_completion_length} "
            f"= {longest + max_completion_length} exceeds the model's max_position_embeddings {limit}; {fix}."
        )


class PromptLengthMixin:
    """Checks each generation batch's prompt lengths against the model's positions (see the module docstring)."""

    def _zoo_tokenize_prompts(self, prompts: list):
        check_batch_prompts(prompts)  # a streamed dataset's rows are first seen here
        prompt_ids, images, multimodal_fields = super()._zoo_tokenize_prompts(prompts)
        check_prompt_lengths(prompt_ids, self.max_completion_length, position_limit(self.model))
        return prompt_ids, images, multimodal_fields
