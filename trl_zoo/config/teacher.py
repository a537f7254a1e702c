"""The teacher axis: on-policy distillation inside the RL loss (the signal itself: `components/teacher.py`), its fields
and their checks.

Tests: tests/test_teacher.py.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass

from .fields import help_field


@dataclass
class TeacherFields:
    """The teacher model, the weight of its signal and its prompt."""

    teacher_model: str | None = help_field(
        "On-policy distillation inside the RL loss: a teacher whose per-token log-ratio λ·(log π_T − log π_old) is "
        "added to the advantages (components/teacher.py). A model name or path (loaded like TRL's reference model, "
        "frozen), or 'self': the policy's base weights under PEFT's disable_adapter(). None: no teacher."
    )
    teacher_coef: float = help_field(
        "λ, the weight of the teacher's per-token log-ratio in the advantages (≥ 0).", 1.0
    )
    teacher_prompt_template: str | None = help_field(
        "The teacher's prompt (privileged context), a str.format template over the dataset columns, e.g. "
        "'{prompt}\\n(The answer is {answer}.)'; the teacher scores the same completion tokens after it. With a chat "
        "prompt {prompt} is the last user message's text, which the filled template replaces. None: the policy's "
        "prompt."
    )
    teacher_only: bool = help_field(
        "Train on the teacher's signal alone: Â_{i,t} = λ·(log π_T − log π_old), the reward advantages dropped.", False
    )

    def _check_teacher_fields(self) -> None:
        check_teacher_options(self)


def check_teacher_options(args) -> None:
    """Config-time checks of the teacher fields (one line each)."""
    coef = args.teacher_coef
    if not isinstance(coef, (int, float)) or not math.isfinite(coef) or coef < 0:
        raise ValueError(f"teacher_coef: λ={coef!r} must be a finite number ≥ 0.")
    if args.teacher_model is None and args.teacher_only:
        raise ValueError("teacher_only: True needs a teacher; set teacher_model (a name or path, or 'self').")
    template = args.teacher_prompt_template
    if template is not None:
        if args.teacher_model is None:
            raise ValueError(
                "teacher_prompt_template: needs a teacher; set teacher_model (a name or path, or 'self')."
            )
        template_columns(template)  # a malformed template fails here
    if args.teacher_only and coef == 0:
        raise ValueError("teacher_only: with teacher_coef=0 every advantage is 0; set teacher_coef > 0.")


def template_columns(template: str) -> list[str]:
    """The dataset columns a str.format template names ("prompt" among them), or a one-line ValueError."""
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as error:
        raise ValueError(f"teacher_prompt_template: not a str.format template ({error}): {template!r}")
    for field in fields:
        if not field.isidentifier():
            raise ValueError(
                f"teacher_prompt_template: {{{field}}} is not a column name; use {{column}} fields only, e.g. "
                f"'{{prompt}}\\n(The answer is {{answer}}.)'."
            )
    return fields
