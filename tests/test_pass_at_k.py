"""Held-out pass@k: the unbiased estimator against enumeration, sampled counts per prompt in the right order, and
sampling that leaves the training run's random state where it was."""

import itertools
from math import comb

import pytest
import torch

from trl_zoo.tasks.pass_at_k import default_ks, pass_at_k, pass_at_ks, sampled_right_counts

from . import tiny


@pytest.mark.parametrize("n,c", [(4, 0), (4, 1), (5, 2), (6, 3), (6, 6), (7, 1)])
def test_pass_at_k_equals_the_share_of_k_subsets_holding_a_right_sample(n, c):
    samples = [1] * c + [0] * (n - c)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(range(n), k))
        enumerated = sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)
        assert pass_at_k(n, c, k) == pytest.approx(enumerated)
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)


def test_pass_at_k_closed_forms_and_bad_input():
    assert pass_at_k(8, 1, 4) == pytest.approx(1 - comb(7, 4) / comb(8, 4)) == pytest.approx(0.5)
    assert pass_at_ks([0, 8, 1], 8, [1, 8]) == {1: pytest.approx((0 + 1 + 1 / 8) / 3), 8: pytest.approx(2 / 3)}
    assert default_ks(8) == [1, 2, 4, 8] and default_ks(6) == [1, 2, 4, 6] and default_ks(1) == [1]
    with pytest.raises(ValueError, match="1 ≤ k ≤ n"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="0 ≤ c ≤ n"):
        pass_at_k(4, 5, 1)


def test_counts_are_per_prompt_and_sampling_leaves_the_global_random_state_alone():
    model, tokenizer = tiny.model(), tiny.tokenizer()
    prompts = ["1+1=", "2+2=", "3+3="]

    def right_for_the_second_prompt(completions, prompts, answer, **kwargs):
        return [1.0 if a == "b" else 0.0 for a in answer]

    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    counts = sampled_right_counts(model, tokenizer, prompts, 3, right_for_the_second_prompt,
                                  {"answer": ["a", "b", "c"]}, samples=5, batch_size=2)
    assert counts == [0, 5, 0]  # the rows of each prompt reach the reward with that prompt's columns
    assert torch.equal(torch.rand(3), expected_next)


def test_the_same_seed_gives_the_same_samples_and_another_seed_other_ones():
    model, tokenizer = tiny.model(), tiny.tokenizer()
    seen = []

    def record(completions, **kwargs):
        seen.append(list(completions))
        return [0.0] * len(completions)

    for seed in (0, 0, 1):
        sampled_right_counts(model, tokenizer, ["1+2=", "4+5="], 4, record, samples=6, seed=seed)
    assert seen[0] == seen[1]
    assert seen[0] != seen[2]


def test_a_zero_temperature_is_refused_with_the_field_named():
    with pytest.raises(ValueError, match="temperature: must be > 0"):
        sampled_right_counts(tiny.model(), tiny.tokenizer(), ["1+1="], 2, lambda c, **k: [0.0] * len(c), temperature=0)
