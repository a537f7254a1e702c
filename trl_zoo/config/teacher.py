"""Config-time checks of the teacher fields (the teacher signal itself: `hooks/teacher.py`).

Tests: tests/test_teacher.py.
"""

from __future__ import annotations

import math
import string


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
