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



STEPS_SEEN: list = []


def by_step(completions, trainer_state, **kwargs):
    """A curriculum-style reward: reads the step (None here would raise AttributeError)."""
    STEPS_SEEN.append(trainer_state.global_step)
    return [1.0 if c.strip().startswith("4") else 0.0 for c in completions]


def test_the_cli_held_out_evaluation_hands_the_reward_the_trainers_state(tmp_path):
    """`trl-zoo train`'s held-out evaluation passes the trainer's state to the reward, as TRL's training does, at the
    step of each evaluation (0 before RL, then every step here), never None."""
    import json

    from trl_zoo.cli import main

    data = tmp_path / "sums.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"{a}+1=", "answer": str(a + 1)}) for a in range(10, 40)))
    STEPS_SEEN.clear()
    argv = ["train", "--model_name_or_path", tiny.model_dir(), "--dataset_name", str(data), "--num_heldout", "5",
            "--reward_funcs", "tests.test_reward_signatures.by_step", "--max_steps", "2", "--eval_every_steps", "1",
            "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "4",
            "--write_report", "false", "--output_dir", str(tmp_path / "run")]
    assert main(argv) == 0
    assert {0, 1, 2} <= set(STEPS_SEEN)
