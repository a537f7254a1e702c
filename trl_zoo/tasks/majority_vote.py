"""TTRL's label-free reward (Zuo et al., arXiv:2504.16084): the majority answer of a prompt's completions is its
pseudo-label, and a completion is rewarded for agreeing with it. No reference answer is read.

    y*(x) = the answer most of the completions of prompt x give        (answers extracted by `extract`)
    R_i   = 1 if answer(y_i) = y*(x) else 0

- Answers: `extract(text) -> str | None`, by default `final_number` (the last number of the completion, as the chat
  arithmetic task's reward reads it; on the addition task's bare-number answers it is the answer `exact_match`
  checks). A completion without an answer (None) has no vote and gets 0; a prompt none of whose completions has an
  answer has no pseudo-label and all its completions get 0.
- Ties: the tied answer seen first among the prompt's completions (in the batch's order) is the pseudo-label, as in
  the authors' code (Python's `Counter.most_common`, which keeps the first counted of equal counts).
- Groups: completions are grouped by their prompt's text (TRL passes `prompts`; a prompt's num_generations
  completions are consecutive rows of the generation batch, but under several processes a prompt's rows can be
  split between them). Under torch.distributed the answers of every process are gathered, so each prompt is voted
  on over all its completions; every process must call the reward together, as TRL's reward call does.

The paper votes over 64 samples of a prompt and trains on 32 of them; here the vote is over the completions trained
on (num_generations of each prompt). Two more departures from the authors' code: their extractor returns "" for a
completion without an answer, and "" votes like any answer, so a group none of whose completions has an answer
rewards them all (their empty answers agree); here such completions have no vote and get 0. And they count answer
strings, so "12.0" and "12" are two answers; `final_number` makes both "12", one answer.

It is label-free, so it never scores a held-out evaluation (`trl-zoo train` scores that with an answer check,
`cli/reward_names.heldout_scorer`; with `num_heldout 0` there is none, and a file of prompts alone trains).
`--reward_funcs majority_vote` names it.

Tests: tests/test_majority_vote.py.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch.distributed as dist

from .rewards import completion_text, final_number


def majority_answers(keys: Sequence[Hashable], answers: Sequence[str | None]) -> dict:
    """The majority answer of each key's rows (None where no row has an answer); a tie goes to the one seen first."""
    counts: dict = {}  # key -> {answer: count}, each in the order first seen
    for key, answer in zip(keys, answers, strict=True):
        votes = counts.setdefault(key, {})
        if answer is not None:
            votes[answer] = votes.get(answer, 0) + 1
    return {key: max(votes, key=votes.get, default=None) for key, votes in counts.items()}


def prompt_key(prompt) -> Hashable:
    """A prompt as a dictionary key: its text, or the repr of its chat messages."""
    return prompt if isinstance(prompt, str) else repr(prompt)


def every_process(rows: list) -> list:
    """`rows` of every process in rank order under torch.distributed (one collective), else `rows`."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return rows
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, rows)
    return [row for part in gathered for row in part]


class MajorityVoteReward:
    """Reward function (TRL's signature): 1 where a completion's answer is its prompt's majority answer, else 0."""

    label_free = True  # scores agreement, not correctness: never a held-out scorer

    def __init__(self, extract: Callable[[str], str | None] = final_number):
        self.extract = extract
        self.__name__ = "majority_vote"  # TRL names the reward column after it

    def __call__(self, completions, prompts, **kwargs) -> list[float]:
        keys = [prompt_key(prompt) for prompt in prompts]
        answers = [self.extract(completion_text(completion)) for completion in completions]
        everyone = every_process(list(zip(keys, answers)))
        labels = majority_answers([key for key, _ in everyone], [answer for _, answer in everyone])
        return [float(answer is not None and answer == labels[key]) for key, answer in zip(keys, answers)]

    def __repr__(self):
        return f"MajorityVoteReward(extract={getattr(self.extract, '__name__', self.extract)!r})"


majority_vote_reward = MajorityVoteReward()
