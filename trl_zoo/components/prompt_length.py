"""Component: a prompt that, with its completion, does not fit in the model's positions is an error.

TRL 1.16 has no ``max_prompt_length``: it tokenizes every prompt whole and generates ``max_completion_length``
tokens after it. A model with a position limit (``config.max_position_embeddings``) then either crashes in its
position embedding or, with rotary positions, generates and trains past the positions it was trained for, with
only a generation notice. This hook checks, once per generation batch on the host-side token lists (no device
sync), that

    max_i len(prompt_ids_i) + max_completion_length ≤ max_position_embeddings

and raises `PromptTooLongError` (a ValueError), one line naming the longest prompt's length, the model limit and
the fixes, otherwise. Models without ``max_position_embeddings`` are not checked. A max_completion_length that
leaves no position for a prompt (``max_completion_length ≥ max_position_embeddings``) is refused when the trainer is
built, naming max_completion_length and the length below which it fits (`completion_room_error`, which `trl-zoo
train` runs before it loads the model). Before the batch is tokenized,
its prompts' characters are counted (`check_prompt_characters`): no token stands for more characters than
`characters_per_token(tokenizer)`, so a prompt with more than that many characters per position left cannot fit,
and a prompt of megabytes is refused before the tokenizer tries to hold it (`trl-zoo train` counts a data file's
rows so before training).

Tests: tests/test_bad_input_more.py (beyond and exactly at the model's positions, in the API and the CLI; no room at
construction), tests/test_presets_builtin.py (no room, in the CLI).
"""

from __future__ import annotations

import functools

from ..dataset_values import check_batch_prompts
from ..hooks.component import Component


class PromptTooLongError(ValueError):
    """A prompt plus max_completion_length exceeds the model's max_position_embeddings (or no prompt fits)."""


def position_limit(model) -> int | None:
    """The model's (text model's) max_position_embeddings, None when it has none."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    return getattr(config, "max_position_embeddings", None)


def context_limit(trainer) -> tuple[int | None, str]:
    """The positions a prompt and its completion must fit in, and their name: the model's, or vLLM's context
    (`vllm_max_model_length`) where that is shorter (vLLM refuses a longer request mid-run)."""
    limit, name = position_limit(trainer.model), "the model's max_position_embeddings"
    engine = trainer.args.vllm_max_model_length if trainer.args.use_vllm else None
    if engine is not None and (limit is None or engine < limit):
        return engine, "vllm_max_model_length"
    return limit, name


def completion_room_error(max_completion_length: int, limit: int | None, longest_prompt: int = 0) -> str | None:
    """The one-line error when `longest_prompt` + max_completion_length does not fit `limit` positions, or when
    max_completion_length leaves no position for a prompt (every prompt has a token); else None."""
    if limit is None or (longest_prompt + max_completion_length <= limit and max_completion_length < limit):
        return None
    if max_completion_length >= limit:
        return (
            f"max_completion_length: {max_completion_length} tokens leave no room for a prompt in the model's "
            f"max_position_embeddings {limit}; lower max_completion_length below {limit}."
        )
    return (
        f"max_completion_length: the longest prompt ({longest_prompt} tokens) + {max_completion_length} exceeds the "
        f"model's max_position_embeddings {limit}; lower max_completion_length to at most {limit - longest_prompt}."
    )


def check_prompt_lengths(prompt_ids, max_completion_length: int, limit: int | None,
                         limit_name: str = "the model's max_position_embeddings") -> None:
    """Raise a one-line PromptTooLongError when the longest prompt plus max_completion_length exceeds `limit`
    (`limit_name`)."""
    if limit is None or not prompt_ids:
        return
    longest = max(len(ids) for ids in prompt_ids)
    if longest + max_completion_length > limit:
        room = limit - max_completion_length
        if room <= 0:  # no prompt could fit: the completion length is what is too long
            raise PromptTooLongError(completion_room_error(max_completion_length, limit))
        fix = f"filter the dataset to prompts of at most {room} tokens"
        if longest < limit:
            fix += f", or lower max_completion_length to at most {limit - longest}"
        raise PromptTooLongError(
            f"max_completion_length: a prompt of {longest} tokens + max_completion_length {max_completion_length} "
            f"= {longest + max_completion_length} exceeds {limit_name} {limit}; {fix}."
        )


def characters_per_token(tokenizer) -> int:
    """At most how many characters of text one token of `tokenizer` stands for: its longest vocabulary entry
    (byte-level entries spell each byte as one character, SentencePiece's a space as '▁'), doubled for normalizers
    that merge characters (NFC)."""
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a multimodal processor's text tokenizer
    return 2 * max(map(len, tokenizer.get_vocab()), default=1)


def prompt_characters(prompt) -> int:
    """The characters of a prompt's text: a string's, or the text of its chat messages (a template only adds)."""
    if isinstance(prompt, str):
        return len(prompt)
    parts = [message.get("content") for message in prompt]
    parts = [part for content in parts for part in (content if isinstance(content, list) else [content])]
    return sum(len(part if isinstance(part, str) else (part or {}).get("text") or "") for part in parts)


def check_prompt_characters(prompts, max_completion_length: int, limit: int | None, per_token: int,
                            where: str | None = None,
                            limit_name: str = "the model's max_position_embeddings") -> None:
    """Raise a one-line PromptTooLongError when a prompt has more characters than `per_token` times the positions
    max_completion_length leaves (it has more tokens than fit, whatever they are); `where` names the prompts."""
    if limit is None:
        return
    room = limit - max_completion_length
    if room <= 0 and prompts:
        raise PromptTooLongError(completion_room_error(max_completion_length, limit))
    for prompt in prompts:
        characters = prompt_characters(prompt)
        if characters > per_token * room:
            fix = f"filter the dataset to prompts of at most {room} tokens"
            raise PromptTooLongError(
                f"max_completion_length: a prompt of {characters:,} characters{f' (in {where})' if where else ''}, "
                f"so of at least {-(-characters // per_token):,} tokens (no token of this tokenizer stands for more "
                f"than {per_token} characters), + max_completion_length {max_completion_length} exceeds "
                f"{limit_name} {limit}; {fix}."
            )


class PromptLength(Component):
    """Checks each generation batch's prompt lengths against the model's positions (see the module docstring)."""

    name = "prompt_length"

    def __init__(self, trainer):
        super().__init__(trainer)
        too_long = completion_room_error(trainer.max_completion_length, position_limit(trainer.model))
        if too_long:  # whatever the prompts: said at construction rather than at the first batch
            raise PromptTooLongError(too_long)

    def tokenize_prompts(self, inner, prompts: list):
        trainer = self.trainer
        limit, limit_name = context_limit(trainer)
        check_batch_prompts(prompts)  # a streamed dataset's rows are first seen here
        check_prompt_characters(prompts, trainer.max_completion_length, limit, self.characters_per_token,
                                limit_name=limit_name)
        prompt_ids, images, multimodal_fields = inner(prompts)
        check_prompt_lengths(prompt_ids, trainer.max_completion_length, limit, limit_name)
        return prompt_ids, images, multimodal_fields

    @functools.cached_property
    def characters_per_token(self) -> int:
        return characters_per_token(self.trainer.processing_class)
