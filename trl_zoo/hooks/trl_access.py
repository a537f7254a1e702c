"""Every write of trl_zoo into TRL's objects that TRL 1.16 offers no public or overridable method for, in one place.

The layers call these and nothing else: no other module assigns to an attribute of TRL's trainer, of its vLLM
generation object or of its modules (tests/test_trl_access.py keeps it so). Two kinds:

Swaps, for the duration of one call of TRL's, restored however the call ends (an exception included), by
`swapped(owner, name, value)`, or `restored(owner, name)` around code of TRL's that sets the attribute itself:

- `trainer.reward_funcs`: recording wrappers while TRL's `_calculate_rewards` runs (`hooks/rewards.py`), to see each
  function's raw outputs before TRL turns them into float32. TRL calls the functions inline, with no per-function
  method to override.
- the LM-head owner's `forward`: TRL's fused head with `log_sum_sq_probs` during the ‖s‖² pass
  (`hooks/advantages.py`); calling that forward directly would skip the module's hooks (FSDP2's unsharding,
  accelerate's device hooks). Building it (`add_fused_lm_head`, which sets `forward`) runs inside `restored`.
- `trl.trainer.grpo_trainer.create_model_from_path`: answers the reference's load with an in-memory copy while TRL's
  constructor runs (`hooks/model_object.py`); TRL builds the reference inline in `__init__`.
- `vllm_generation._iter_named_params`: the policy's tensors without the value head, while TRL's `_generate` runs
  (its weight sync is inside, `hooks/critic.py`); TRL's `sync_weights` takes no filter.

Data written into TRL's state, documented here because TRL reads it later:

- `trainer._logs["advantages"]` (the completions table's advantage column), rewritten with the estimator's
  advantages (`replace_logged_advantages`, `hooks/advantages.py`); TRL fills it inside
  `_generate_and_score_completions`.
- `trainer._buffered_inputs` (TRL's micro-batches of one generation batch): re-cut by `hooks/length_bucketing.py`
  right after TRL's `_prepare_inputs` built it, and, with `trainer._step`, restored from a checkpoint by
  `hooks/resume.py` (`set_generation_buffer`); TRL builds and indexes the buffer inline in `_prepare_inputs`.
"""

from __future__ import annotations

import contextlib
from typing import Any

_ABSENT = object()


@contextlib.contextmanager
def restored(owner: Any, name: str):
    """`owner.name` as it was before the block, after it, however it ends: an attribute set on the instance is put
    back, one the instance did not have (a method of its class) is removed again."""
    before = vars(owner).get(name, _ABSENT)
    try:
        yield
    finally:
        if before is _ABSENT:
            if name in vars(owner):
                delattr(owner, name)
        else:
            setattr(owner, name, before)


@contextlib.contextmanager
def swapped(owner: Any, name: str, value: Any):
    """`owner.name` is `value` inside the block, and what it was after it, however the block ends."""
    with restored(owner, name):
        setattr(owner, name, value)
        yield value


def replace_logged_advantages(trainer, per_completion: list[float]) -> None:
    """The last `len(per_completion)` entries of TRL's completions-table advantages become `per_completion` (TRL
    appended its own for the same rows)."""
    logged = trainer._logs["advantages"]
    for _ in range(min(len(per_completion), len(logged))):
        logged.pop()
    logged.extend(per_completion)


def set_generation_buffer(trainer, buffer: list[dict], step: int | None = None) -> None:
    """TRL's buffer of micro-batches of the current generation batch (and its micro-step counter `_step`)."""
    trainer._buffered_inputs = buffer
    if step is not None:
        trainer._step = step
