"""Decoding a batch of rendered prompts with transformers' `generate`: left-padded batches, the completions' text
(special tokens dropped, as TRL does for rewards) and their token ids as TRL passes them to rewards (`completion_ids`:
up to and including the first end-of-sequence token, no padding). The greedy held-out evaluation (evaluation.py) and
its tool round (tool_evaluation.py) decode through it.

Tests: tests/test_quickstart.py (greedy batches), tests/test_tool_evaluation.py.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

GREEDY = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}


@torch.no_grad()
def decoded_texts_and_ids(
    model, tokenizer, texts: list[str], special: bool, max_new_tokens: int, decoding: dict, batch_size: int = 256,
    synced: bool = False, progress: Callable[[int, int], None] | None = None,
) -> tuple[list[str], list[list[int]]]:
    """(texts, ids) of each prompt's completion under `decoding` (`generate`'s keywords), the prompts already
    rendered as `texts` and tokenized with the special tokens when `special`, `batch_size` a call (`synced`: every
    process decodes in lockstep); the model's train/eval mode and the tokenizer's padding side are restored."""
    was_training = model.training
    model.eval()
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    device = next(model.parameters()).device
    completions, ids = [], []
    try:
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(
                texts[start : start + batch_size], return_tensors="pt", padding=True, add_special_tokens=special
            )
            batch = {key: value.to(device) for key, value in batch.items()}
            output = model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                **decoding,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                **({"synced_gpus": True} if synced else {}),  # else transformers' own choice (its FSDP, ZeRO-3)
            )
            new_tokens = output[:, batch["input_ids"].shape[1] :]
            completions.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
            ids.extend(completion_ids(new_tokens.tolist(), tokenizer.eos_token_id, tokenizer.pad_token_id))
            if progress is not None:
                progress(len(completions), len(texts))
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return completions, ids


def completion_ids(rows: list[list[int]], eos: int | None, pad: int | None) -> list[list[int]]:
    """Each generated row cut after its first `eos` (kept, as TRL keeps it), else with its trailing `pad`s dropped."""
    cut = []
    for row in rows:
        if eos is not None and eos in row:
            row = row[: row.index(eos) + 1]
        else:
            while row and pad is not None and row[-1] == pad:
                row = row[:-1]
        cut.append(row)
    return cut
