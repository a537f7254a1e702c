"""Built-in verifiable task: d-digit addition, with a held-out split no training step ever sees.

    prompt "47+38="    answer "85"    reward R = [completion == answer]    (exact match, see rewards.py)

Operands are drawn from [10^(d−1), 10^d − 1] (really d digits). The held-out pairs are chosen first, by seed, and
removed from the pool before the training prompts are drawn, so held-out greedy accuracy measures generalisation
to unseen sums. `addition` is two-digit addition (the offline quickstart); `addition3` is the harder three-digit
variant for longer GPU runs.

Tests: tests/test_quickstart.py (a disjoint, deterministic split with right answers), tests/test_learning.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

from datasets import Dataset

from .rewards import exact_match_reward


class SumPairDatasets:
    """Datasets of a task built from (a, b) pairs: its `_split` gives (train pairs, held-out pairs) and its `prompt`
    writes one; the answer is a + b."""

    @property
    def train_pairs(self) -> list[tuple[int, int]]:
        return self._split[0]

    @property
    def heldout_pairs(self) -> list[tuple[int, int]]:
        return self._split[1]

    def _dataset(self, pairs) -> Dataset:
        return Dataset.from_dict(
            {"prompt": [self.prompt(a, b) for a, b in pairs], "answer": [str(a + b) for a, b in pairs]}
        )

    def train_dataset(self) -> Dataset:
        """Columns `prompt` and `answer`; the answer column feeds the reward."""
        return self._dataset(self.train_pairs)

    def heldout_dataset(self) -> Dataset:
        return self._dataset(self.heldout_pairs)


@dataclass(frozen=True)
class AdditionTask(SumPairDatasets):
    """d-digit addition with a fixed, seeded train / held-out split."""

    name: str
    digits: int
    num_train: int
    num_heldout: int
    seed: int = 1234
    description: str = ""

    reward = staticmethod(exact_match_reward)
    reward_name = "exact_match"

    @property
    def max_answer_length(self) -> int:
        """Characters in the longest answer (d + 1 digits for a carry out of the top digit)."""
        return self.digits + 1

    @property
    def max_completion_length(self) -> int:
        """Answer plus the end-of-sequence token."""
        return self.max_answer_length + 1

    @staticmethod
    def prompt(a: int, b: int) -> str:
        return f"{a}+{b}="

    @cached_property
    def _split(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        low, high = 10 ** (self.digits - 1), 10**self.digits - 1
        pool_size = (high - low + 1) ** 2
        if self.num_train + self.num_heldout > pool_size:
            raise ValueError(
                f"num_train + num_heldout: {self.num_train + self.num_heldout} exceeds the {pool_size} distinct "
                f"{self.digits}-digit sums; lower them."
            )
        rng = random.Random(self.seed)
        chosen = rng.sample(range(pool_size), self.num_train + self.num_heldout)
        span = high - low + 1
        pairs = [(low + index // span, low + index % span) for index in chosen]
        return pairs[self.num_heldout :], pairs[: self.num_heldout]



ADDITION = AdditionTask(
    "addition", digits=2, num_train=4000, num_heldout=1000, description="two-digit addition, exact-match reward"
)
ADDITION3 = AdditionTask(
    "addition3", digits=3, num_train=50000, num_heldout=1000, description="three-digit addition, exact-match reward"
)
