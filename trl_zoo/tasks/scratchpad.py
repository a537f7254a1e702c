"""Built-in verifiable task with a worked scratchpad of variable length: column addition, digit by digit.

    prompt      "47+38="
    completion  "7+8+0=15;4+3+1=08:85"        (units column first; one step per column, then ":" and the answer)
    reward      R = [ text after the last ":" == a + b ]      (exact match on the final answer, see rewards.py)

Column i (from the right) reads the operands' digits x_i, y_i and the incoming carry c_i (c_0 = 0), and writes the
two-digit column sum s_i = x_i + y_i + c_i; the next carry is c_{i+1} = ⌊s_i / 10⌋. The answer is the units digits
of the column sums read from the top column down, with a leading 1 when the top column carries. Both operands have
d digits, d drawn uniformly from [min_digits, max_digits], so a completion takes 9d + len(answer) + 1 tokens with
the end-of-sequence token (d = 1: 11-12 tokens; d = 7: 71-72).

A *slipped* solution forgets some carries (writes c_i = 0 where c_i = 1; a forgotten top carry drops the leading
1) and then continues consistently from what it wrote, so its answer is wrong but its scratchpad is a plausible
derivation — the error habit the bootstrap teaches (scratchpad_bootstrap.py) and RL should remove.

The held-out pairs are drawn first, by seed, with at least two digits (the 81 one-digit sums are too few to split);
training pairs never equal a held-out pair.

Tests: tests/test_testbed_task.py (worked solutions, slips, the split, the final-answer reward).
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass
from functools import cached_property

from .arithmetic import SumPairDatasets
from .rewards import final_answer_reward


def column_steps(
    a: int, b: int, digits: int, forget: Collection[int] = ()
) -> tuple[list[tuple[int, int, int, int]], str]:
    """The columns (x_i, y_i, c_i, s_i), units first, and the answer they spell; carries into the columns in `forget`
    (column `digits` is the leading 1 of the answer) are written as 0."""
    steps, carry = [], 0
    for column in range(digits):
        x, y = a // 10**column % 10, b // 10**column % 10
        if column in forget:
            carry = 0
        total = x + y + carry
        steps.append((x, y, carry, total))
        carry = total // 10
    if digits in forget:
        carry = 0
    answer = ("1" if carry else "") + "".join(str(total % 10) for *_, total in reversed(steps))
    return steps, answer.lstrip("0") or "0"


def worked_solution(a: int, b: int, digits: int, forget: Collection[int] = ()) -> str:
    """The completion text: 'x+y+c=ss' per column joined by ';', then ':' and the answer."""
    steps, answer = column_steps(a, b, digits, forget)
    return ";".join(f"{x}+{y}+{c}={s:02d}" for x, y, c, s in steps) + ":" + answer


def carried_columns(a: int, b: int, digits: int) -> list[int]:
    """The columns (1 .. digits; `digits` is the leading 1) that receive a carry in the right solution."""
    steps, _ = column_steps(a, b, digits)
    return [column + 1 for column, (*_, total) in enumerate(steps) if total >= 10]


@dataclass(frozen=True)
class ScratchpadAdditionTask(SumPairDatasets):
    """Column addition with a worked scratchpad, operands of min_digits..max_digits digits, a seeded held-out split."""

    name: str
    min_digits: int
    max_digits: int
    num_train: int
    num_heldout: int
    seed: int = 1234
    description: str = ""

    reward = staticmethod(final_answer_reward)
    reward_name = "final_answer"

    def __post_init__(self):
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError(f"min_digits, max_digits: need 1 ≤ min_digits ≤ max_digits, got {self.min_digits}, "
                             f"{self.max_digits}.")

    @property
    def max_completion_length(self) -> int:
        """Longest worked solution (every column, a carried top digit) plus the end-of-sequence token."""
        d = self.max_digits
        return 8 * d + (d - 1) + 1 + (d + 1) + 1

    @staticmethod
    def prompt(a: int, b: int) -> str:
        return f"{a}+{b}="

    @staticmethod
    def digits_of(a: int) -> int:
        return len(str(a))

    def _draw(self, rng: random.Random) -> tuple[int, int]:
        d = rng.randint(self.min_digits, self.max_digits)
        low, high = 10 ** (d - 1), 10**d - 1
        return rng.randint(low, high), rng.randint(low, high)

    @cached_property
    def _split(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        rng = random.Random(self.seed)
        heldout: list[tuple[int, int]] = []
        seen: set[tuple[int, int]] = set()
        for _ in range(100 * self.num_heldout):
            if len(heldout) == self.num_heldout:
                break
            pair = self._draw(rng)
            if pair not in seen and (pair[0] >= 10 or self.max_digits == 1):
                seen.add(pair)
                heldout.append(pair)
        train = []
        while len(train) < self.num_train:
            pair = self._draw(rng)
            if pair not in seen:
                train.append(pair)
        return train, heldout


SCRATCHPAD = ScratchpadAdditionTask(
    "scratchpad", min_digits=1, max_digits=7, num_train=50000, num_heldout=512,
    description="column addition of 1-7 digits with a worked scratchpad (11-72 tokens), reward on the final answer",
)
SCRATCHPAD_SMALL = ScratchpadAdditionTask(
    "scratchpad_small", min_digits=1, max_digits=3, num_train=8000, num_heldout=256,
    description="column addition of 1-3 digits with a worked scratchpad (11-32 tokens), reward on the final answer",
)
