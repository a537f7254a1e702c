"""Held-out pass@k from n sampled completions per prompt (the unbiased estimator of Chen et al. 2021, arXiv:2107.03374):

    pass@k = (1/N) Σ_n [ 1 − C(n − c_n, k) / C(n, k) ]        c_n = right completions of prompt n among n samples

the probability that at least one of k completions drawn without replacement from the n is right, averaged over the
prompts; pass@1 = (1/N) Σ_n c_n / n. A completion is right when its reward is exactly 1 (as in the greedy
accuracy). MaxRL (arXiv:2602.02710) claims gains on pass@k for k > 1, which greedy accuracy cannot show.

Sampling runs under `torch.random.fork_rng` from its own seed, so measuring never moves the training run's random
state, and the same weights with the same seed give the same samples on the same machine.
"""

from __future__ import annotations

from collections.abc import Callable
from math import comb

import torch

from .evaluation import render_prompt


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
    """For each prompt, how many of `samples` completions sampled at `temperature` earn reward exactly 1."""
    if samples < 1:
        raise ValueError(f"samples: must be ≥ 1, got {samples}.")
    if temperature <= 0:
        raise ValueError(f"temperature: must be > 0 for sampling, got {temperature}; greedy accuracy is pass@1 at 0.")
    reward_kwargs = reward_kwargs or {}
    was_training, padding_side = model.training, tokenizer.padding_side
    model.eval()
    tokenizer.padding_side = "left"
    device = next(model.parameters()).device
    counts = []
    devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            for start in range(0, len(prompts), batch_size):
                block = prompts[start : start + batch_size]
                texts = [render_prompt(tokenizer, prompt) for prompt in block]
                batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
                output = model.generate(
                    **batch, max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature, top_p=1.0,
                    top_k=0, num_return_sequences=samples, pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                )
                decoded = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
                repeated = [prompt for prompt in block for _ in range(samples)]  # generate's order: prompt-major
                completions = (
                    [[{"role": "assistant", "content": text}] for text in decoded]
                    if isinstance(block[0], list) else decoded
                )
                kwargs = {
                    key: [value for value in column[start : start + batch_size] for _ in range(samples)]
                    for key, column in reward_kwargs.items()
                }
                rewards = reward(completions, prompts=repeated, completion_ids=None, **kwargs)
                right = [r is not None and float(r) == 1.0 for r in rewards]
                counts.extend(sum(right[i * samples : (i + 1) * samples]) for i in range(len(block)))
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return counts


def pass_at_ks(counts: list[int], samples: int, ks: list[int]) -> dict[int, float]:
    """{k: held-out pass@k} from each prompt's right count among `samples`."""
    if not counts:
        raise ValueError("pass@k: no prompts.")
    return {k: sum(pass_at_k(samples, c, k) for c in counts) / len(counts) for k in ks}
