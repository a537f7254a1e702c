"""Reward shaping: DAPO's soft overlong punishment (arXiv:2503.14476, eq. 13).

With L_max the overlong max length and L_cache the buffer before it, a completion of |y| tokens gets

    R_length(y) = 0                                   if |y| ≤ L_max − L_cache
                = ((L_max − L_cache) − |y|) / L_cache  if L_max − L_cache < |y| ≤ L_max
                = −1                                  if |y| > L_max

times `overlong_penalty_factor`, added to the task reward. The ramp reaches −1 exactly at L_max, so the
punishment is continuous. |y| counts every completion token the policy generated, the end-of-sequence token
included (TRL's `completion_ids`). With L_max = max_completion_length (the default) no completion is longer
than L_max, and a truncated completion gets the full −1.

The trainer adds it as one more reward function named `soft_overlong_punishment`, so TRL logs it on its own
(`rewards/soft_overlong_punishment/mean`) and sums it with the task rewards (weight 1).
"""

from __future__ import annotations


def soft_overlong_punishment(length: int, max_length: int, buffer_length: int, factor: float = 1.0) -> float:
    """R_length for a completion of `length` tokens (formula in the module docstring), scaled by `factor`."""
    if not 0 < buffer_length <= max_length:
        raise ValueError(
            f"overlong_buffer_length: L_cache={buffer_length} must be in (0, {max_length}] (the overlong max length)."
        )
    safe_length = max_length - buffer_length
    if length <= safe_length:
        penalty = 0.0
    elif length <= max_length:
        penalty = (safe_length - length) / buffer_length
    else:
        penalty = -1.0
    return factor * penalty


class SoftOverlongPunishment:
    """Reward function (TRL's signature) giving each completion its soft overlong punishment."""

    def __init__(self, max_length: int, buffer_length: int, factor: float = 1.0):
        soft_overlong_punishment(0, max_length, buffer_length)  # validates the lengths once, up front
        self.max_length = max_length
        self.buffer_length = buffer_length
        self.factor = factor
        self.__name__ = "soft_overlong_punishment"  # TRL names the reward column after it

    def __call__(self, completions, completion_ids, **kwargs) -> list[float]:
        return [
            soft_overlong_punishment(len(ids), self.max_length, self.buffer_length, self.factor)
            for ids in completion_ids
        ]

    def __repr__(self):
        return (
            f"SoftOverlongPunishment(max_length={self.max_length}, buffer_length={self.buffer_length}, "
            f"factor={self.factor})"
        )
