"""A preset's lengths on the built-in task, and completion lengths no model can hold.

A preset (configs/X.yaml) sizes its lengths for long reasoning on a real model: DAPO's max_completion_length 1280
and overlong buffer 256. The built-in task's own bootstrapped policy answers in at most m tokens (its
`max_completion_length`, eos included) and holds a few dozen positions, so on that policy the preset's lengths are
scaled by one factor s, keeping their proportions, to the smallest that never cuts or punishes a task completion:

    s = max( m / L,  m / (L_max − L_cache) )        L = max_completion_length, L_max = overlong_max_length or L
    L ← ⌈s·L⌉,  L_max ← ⌈s·L_max⌉,  L_cache ← max(1, ⌊s·L_cache⌋)

A length given as a flag is the user's and wins; the preset's other lengths then follow it (s = flag / L).

With any model, a max_completion_length that leaves no room for a prompt in the model's positions is refused
before anything is loaded (`position_limit_of` reads them; `components/prompt_length.completion_room_error` words it,
as the trainer does at construction).

Tests: tests/test_presets_builtin.py (lengths scaled to the model's context, the message).
"""

from __future__ import annotations

import math
from fractions import Fraction

from transformers import AutoConfig

LENGTH_FIELDS = ("max_completion_length", "overlong_max_length", "overlong_buffer_length")


def scale_preset_lengths(task_length: int, preset: dict, flags: dict) -> dict:
    """The preset's lengths (`preset`: the config file's) scaled to a task whose completions take at most
    `task_length` tokens, but for those given as flags (`flags`), which win. Empty when the preset's
    max_completion_length fits the task already (or the preset sets none)."""
    length = preset.get("max_completion_length")
    if length is None or length <= task_length:
        return {}
    ceiling = preset.get("overlong_max_length") or length
    buffer = preset.get("overlong_buffer_length")
    if "max_completion_length" in flags:
        scale = Fraction(flags["max_completion_length"], length)
    else:
        scale = Fraction(task_length, length)
        if buffer and ceiling > buffer:
            scale = max(scale, Fraction(task_length, ceiling - buffer))
    scaled = {"max_completion_length": math.ceil(scale * length)}
    if preset.get("overlong_max_length"):
        scaled["overlong_max_length"] = math.ceil(scale * preset["overlong_max_length"])
    if buffer:
        scaled["overlong_buffer_length"] = max(1, math.floor(scale * buffer))
    return {key: value for key, value in scaled.items() if key in preset and key not in flags}


def scaled_lengths_message(preset_name: str, task, preset: dict, scaled: dict) -> str:
    """One line: what was scaled, by how much, and why."""
    changes = ", ".join(f"{key} {preset[key]} → {scaled[key]}" for key in LENGTH_FIELDS if key in scaled)
    factor = Fraction(scaled.get("max_completion_length", 0), preset["max_completion_length"])
    ratio = f"lengths × {factor}" if "max_completion_length" in scaled else "lengths follow max_completion_length"
    kept = "cut or punished" if preset.get("overlong_buffer_length") else "cut"
    return (
        f"{preset_name} on the built-in task {task.name!r}: {changes} ({ratio}, so the task's longest completion, "
        f"{task.max_completion_length} tokens, is never {kept}; they are sized for long reasoning on a real model: "
        f"give --model_name_or_path to keep them)."
    )


def position_limit_of(model_path: str, revision=None, trust_remote_code: bool = False) -> int | None:
    """max_position_embeddings from the model's config file (no weights loaded); None when it has none or the
    config cannot be read here (loading the model then reports why)."""
    try:
        config = AutoConfig.from_pretrained(model_path, revision=revision, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        return None
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    return getattr(config, "max_position_embeddings", None)
