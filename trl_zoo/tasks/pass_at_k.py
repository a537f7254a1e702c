"""Held-out pass@k from n sampled completions per prompt (the unbiased estimator of Chen et al. 2021,
arXiv:2107.03374):

    pass@k = (1/N) Σ_n [ 1 − C(n − c_n, k) / C(n, k) ]        c_n = right completions of prompt n among n samples

the probability that at least one of k completions drawn without replacement from the n is right, averaged over the
prompts; pass@1 = (1/N) Σ_n c_n / n. A completion is right when its reward is exactly 1 (as in the greedy
accuracy). The reward is called and its output checked as in training (`evaluation.call_reward`): one number or None
per completion, no NaN or ±inf, each a one-line error naming the function. MaxRL (arXiv:2602.02710) claims gains on
pass@k for k > 1, which greedy accuracy cannot show.

Sampling runs under `torch.random.fork_rng` from its own seed, so measuring never moves the training run's random
state, and the same weights with the same seed give the same samples on the same machine.
"""

from __future__ import annotations

from collections.abc import Callable
from math import comb

import torch

from .evaluation import as_completions, call_reward, decoded_completions_and_ids


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 − C(n − c, k) / C(n, k): the chance that k of n samples, c of them right, include a right one."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 0 ≤ c ≤ n and 1 ≤ k ≤ n, got n={n}, c={c}, k={k}.")
    return 1.0 - comb(n - c, k) / comb(n, k)


def default_ks(samples: int) -> list[int]:
    """1, 2, 4, ... up to and including `samples`."""
    ks = [1]
    while ks[-1] * 2 < samples:
        ks.append(ks[-1] * 2)
    return ks + ([samples] if samples > 1 else [])


@torch.no_grad()
def sampled_right_counts(
    model, tokenizer, prompts: list, max_new_tokens: int, reward: Callable, reward_kwargs: dict | None = None,
    samples: int = 8, temperature: float = 1.0, seed: int = 0, batch_size: int = 64,
) -> list[int]:
    """For each prompt, how many of `samples` completions sampled at `temperature` earn reward exactly 1 (a reward
    output that is not one number or None per completion, or NaN or ±inf, raises `RewardOutputError`)."""
    if samples < 1:
        raise ValueError(f"samples: must be ≥ 1, got {samples}.")
    if temperature <= 0:
        raise ValueError(f"temperature: must be > 0 for sampling, got {temperature}; greedy accuracy is pass@1 at 0.")
    decoding = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0,
                "num_return_sequences": samples}
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        decoded, ids = decoded_completions_and_ids(model, tokenizer, prompts, max_new_tokens, decoding, batch_size)
    repeated = [prompt for prompt in prompts for _ in range(samples)]  # generate's order: prompt-major
    kwargs = {
        key: [value for value in column for _ in range(samples)] for key, column in (reward_kwargs or {}).items()
    }
    rewards = call_reward(reward, repeated, as_completions(repeated, decoded), ids, kwargs)  # checked as in training
    right = [r == 1.0 for r in rewards]
    return [sum(right[i * samples : (i + 1) * samples]) for i in range(len(prompts))]


def pass_at_ks(counts: list[int], samples: int, ks: list[int]) -> dict[int, float]:
    """{k: held-out pass@k} from each prompt's right count among `samples`."""
    if not counts:
        raise ValueError("pass@k: no prompts.")
    return {k: sum(pass_at_k(samples, c, k) for c in counts) / len(counts) for k in ks}
