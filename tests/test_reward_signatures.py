"""trl_zoo calls a reward function as TRL does, by keyword: `reward(prompts=..., completions=..., completion_ids=...,
trainer_state=..., log_extra=..., log_metric=..., **columns)`, in the held-out evaluation and in pass@k as in
training, so every signature TRL documents works: `(completions, **kwargs)`, `(prompts, completions, **kwargs)`,
`(completions, answer, **kwargs)`, and one that reads `trainer_state`."""

from __future__ import annotations

import pytest

from trl_zoo.tasks.evaluation import greedy_evaluation
from trl_zoo.tasks.pass_at_k import sampled_right_counts

from . import tiny

PROMPTS = ["1+1=", "2+2=", "3+3="]
ANSWERS = ["2", "4", "6"]
seen = {}


def completions_only(completions, **kwargs):
    seen["completions_only"] = sorted(kwargs)
    return [1.0] * len(completions)


def prompts_first(prompts, completions, **kwargs):  # TRL's documented order; failed with "multiple values"
    seen["prompts_first"] = list(prompts)
    return [1.0 if p in PROMPTS else 0.0 for p in prompts]


def reads_the_answer(completions, answer, **kwargs):
    seen["reads_the_answer"] = list(answer)
    return [1.0] * len(completions)


def reads_the_step(completions, trainer_state, **kwargs):
    seen["reads_the_step"] = trainer_state
    return [1.0] * len(completions)


@pytest.mark.parametrize("reward", [completions_only, prompts_first, reads_the_answer, reads_the_step])
def test_the_held_out_evaluation_calls_every_trl_signature_by_keyword(reward):
    seen.clear()
    result = greedy_evaluation(tiny.model(), tiny.tokenizer(), PROMPTS, max_new_tokens=2, reward=reward,
                               reward_kwargs={"answer": ANSWERS})
    assert result.accuracy == 1.0 and reward.__name__ in seen
    if reward is completions_only:  # what TRL passes besides the columns
        assert seen["completions_only"] == sorted(
            ["prompts", "completion_ids", "trainer_state", "log_extra", "log_metric", "answer"])
    if reward is prompts_first:
        assert seen["prompts_first"] == PROMPTS
    if reward is reads_the_answer:
        assert seen["reads_the_answer"] == ANSWERS


def test_pass_at_k_calls_by_keyword_too():
    seen.clear()
    counts = sampled_right_counts(tiny.model(), tiny.tokenizer(), PROMPTS[:2], max_new_tokens=2,
                                  reward=prompts_first, reward_kwargs={"answer": ANSWERS[:2]}, samples=2)
    assert counts == [2, 2] and seen["prompts_first"] == [PROMPTS[0]] * 2 + [PROMPTS[1]] * 2
