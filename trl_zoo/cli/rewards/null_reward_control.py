"""The null-reward control: rewards shuffled across each scoring batch, so they say nothing about correctness.

    R'_i = R_π(i)      π a fresh random permutation of the batch's completions at every call

The batch keeps its reward distribution (the share of 1s, the spread between groups) but a completion's reward no
longer depends on what it says. A run trained on R' learns whatever the update itself teaches — format, length,
the drift of sampling from a sharpened policy — and nothing about the answers; the gain of a real run over its
control, paired by seed, is what the reward taught. The held-out evaluation always scores with the real reward.

Tests: tests/test_chat_arithmetic.py (the shuffled-reward control on the chat task).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable


def permuted_reward(reward: Callable, seed: int) -> Callable:
    """`reward` with its outputs permuted at random on every call (a generator seeded by `seed`)."""
    rng = random.Random(seed)

    @functools.wraps(reward)
    def shuffled(*args, **kwargs):
        values = list(reward(*args, **kwargs))
        rng.shuffle(values)
        return values

    return shuffled
