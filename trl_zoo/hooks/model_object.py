"""A policy passed as a model object that has no loadable name (built in memory).

TRL loads two things by the policy's ``config._name_or_path``: the tokenizer when ``processing_class`` is None, and,
when ``beta`` ≠ 0 without PEFT, the reference model π_ref. For a model built in memory that name is empty (or a
folder that no longer exists) and TRL crashes deep inside the hub client. `reference_for_model_object`, the
context of TRL's constructor:

- raises one line naming ``processing_class`` when the tokenizer would have to be loaded from such a name;
- builds the reference as a frozen deep copy of the policy, taken before TRL's constructor touches it, with a
  one-line warning. π_ref = π_θ at step 0, so the KL starts at 0, exactly as with a reference loaded by name.
  Memory: one more full copy of the weights on the policy's device, the same as TRL's own reference model loaded by
  name (TRL keeps a separate reference whenever beta ≠ 0 without PEFT); gradients are never allocated for it.

TRL builds its reference inline in its constructor with ``create_model_from_path(name, ...)``; for the duration of
that constructor, this context answers that one call, for the policy's own unloadable name only, with the copy. With
PEFT (``peft_config`` or a PEFT model), with ``beta=0`` or with a loadable name nothing changes: TRL's reference is
the base with adapters disabled, none, or the model loaded by name.

Tests: tests/test_bad_input_more.py (frozen-copy reference, missing tokenizer), tests/test_trl_access.py (the swap is
undone).
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import warnings

from accelerate.utils import is_peft_model
from trl.trainer.utils import get_config_model_id

from .trl_access import reference_loaded_from

_HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


def is_loadable_name(name: str) -> bool:
    """True for an existing local folder or a name shaped like a hub id ("org/name"); False for "" and for a path
    (absolute, relative with ./ or ../, or nested) that does not exist."""
    if not name:
        return False
    if os.path.isdir(name):
        return True
    return _HUB_ID.fullmatch(name) is not None and not name.startswith(".")


def reference_for_model_object(model, args, given: dict) -> contextlib.AbstractContextManager:
    """The context TRL's constructor runs in (module docstring): for a policy object with no loadable name, a frozen
    copy answers TRL's load of the reference by that name; `given` holds TRL's constructor's other arguments by name.
    Nothing otherwise."""
    name = None if isinstance(model, str) else get_config_model_id(model.config)
    if name is None or is_loadable_name(name):
        return contextlib.nullcontext()
    if given.get("processing_class") is None:
        raise ValueError(
            f"processing_class: the model was passed as an object whose name_or_path ({name!r}) cannot be "
            f"loaded, so neither can its tokenizer; pass processing_class=tokenizer."
        )
    uses_peft = given.get("peft_config") is not None or is_peft_model(model)
    if args.beta == 0.0 or uses_peft:
        return contextlib.nullcontext()
    reference = copy.deepcopy(model).requires_grad_(False).eval()
    warnings.warn(
        f"beta={args.beta}: the model was passed as an object whose name_or_path ({name!r}) cannot be loaded, so "
        f"the reference model is a frozen copy of it in memory (as much memory as loading it by name); pass the "
        f"model's name or folder to load the reference instead.",
        stacklevel=3,
    )
    return reference_loaded_from(name, reference)  # a swap of TRL's module attribute, hooks/trl_access.py
