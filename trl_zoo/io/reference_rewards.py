"""A*-PO's first stage, before a run: K completions of every prompt sampled from the reference policy and scored,
their rewards written into the dataset column `reference_rewards`, from which `advantage_estimator="a2po"` estimates
V*(x) (`advantages/a2po.py`).

    dataset = sample_reference_rewards(model, tokenizer, dataset, reward_funcs)      # before the trainer is built
    trainer = GRPOTrainer(model, reward_funcs, args=GRPOConfig(loss_type="a2po", advantage_estimator="a2po",
                                                                beta=1e-3, ...), train_dataset=dataset)

The samples come from transformers' `model.generate` (`num_return_sequences=K`), untruncated (top_p 1, top_k 0: V* is
an expectation under π_ref) at the run's temperature, the prompts rendered and tokenized as TRL's A2POTrainer does
(its chat template for conversational prompts, no special tokens added), and the reward functions are called as
TRL's GRPOTrainer calls them (`prompts`, `completions` — a conversational prompt's as `[{"role": "assistant",
"content": ...}]` —, `completion_ids` and the dataset's other columns, each repeated K times); a None reward is NaN,
and the weighted sum over the functions leaves NaNs out (NaN where all are). The model is the reference: the policy
before training (with PEFT, the base model the adapter is added to). One process; in a launch, run it once and save
the dataset.

Where TRL's experimental A2POTrainer and the authors' scripts differ: K = 8 (both); prompts whose K rewards are all
0 are kept unless `drop_unsolved=True` (the authors' `filter_incorrect=False`; TRL's `filter_all_incorrect` defaults
to True); TRL samples with its config's top_p / top_k, here untruncated, as the authors' vLLM sampling
(top_p 1, top_k −1).

Tests: tests/test_a2po.py (the column on a tiny model: its shape, the samples' rewards, drop_unsolved, bad input).
"""

from __future__ import annotations

import math

import torch
from transformers import GenerationConfig
from trl import is_conversational

from ..dataset_values import REFERENCE_REWARDS


def sample_reference_rewards(
    model,
    tokenizer,
    dataset,
    reward_funcs,
    *,
    num_samples: int = 8,
    max_completion_length: int = 256,
    temperature: float = 1.0,
    batch_size: int = 8,
    reward_weights: list[float] | None = None,
    chat_template_kwargs: dict | None = None,
    drop_unsolved: bool = False,
):
    """`dataset` (a `datasets.Dataset` with a "prompt" column) with the column `reference_rewards`: for each prompt
    the weighted total rewards of `num_samples` completions sampled from `model` (module docstring)."""
    funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    if not funcs or not all(callable(func) and not isinstance(func, torch.nn.Module) for func in funcs):
        raise ValueError("reward_funcs: pass reward functions (callables); a reward model is not supported here.")
    weights = torch.ones(len(funcs)) if reward_weights is None else torch.tensor(reward_weights, dtype=torch.float)
    if weights.numel() != len(funcs):
        raise ValueError(f"reward_weights: {weights.numel()} weights for {len(funcs)} reward functions; one each.")
    if num_samples < 1:
        raise ValueError(f"num_samples: must be ≥ 1 reference samples per prompt, got {num_samples}; e.g. 8.")
    generation_config = GenerationConfig(
        max_new_tokens=max_completion_length, do_sample=True, temperature=temperature, top_p=1.0, top_k=0,
        num_return_sequences=num_samples, pad_token_id=tokenizer.pad_token_id,
    )
    rewards = []
    for start in range(0, len(dataset), batch_size):
        rows = dataset.select(range(start, min(start + batch_size, len(dataset)))).to_list()
        completions, completion_ids = _sample(model, tokenizer, rows, generation_config, chat_template_kwargs or {})
        totals = _total_rewards(funcs, weights, rows, num_samples, completions, completion_ids)
        rewards += totals.view(len(rows), num_samples).tolist()
    if REFERENCE_REWARDS in dataset.column_names:
        dataset = dataset.remove_columns(REFERENCE_REWARDS)
    dataset = dataset.add_column(REFERENCE_REWARDS, rewards)
    if drop_unsolved:
        dataset = dataset.filter(lambda row: any(reward != 0 for reward in row[REFERENCE_REWARDS]))
    return dataset


@torch.no_grad()
def _sample(model, tokenizer, rows, generation_config, chat_template_kwargs):
    """(completions, completion ids): `num_return_sequences` per row, prompt by prompt in the rows' order."""
    texts = [
        tokenizer.apply_chat_template(
            row["prompt"], add_generation_prompt=True, tokenize=False, **chat_template_kwargs
        ) if is_conversational(row) else row["prompt"]
        for row in rows
    ]
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"
    training, device = model.training, next(model.parameters()).device
    try:
        model.eval()
        inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        generated = model.generate(**inputs, generation_config=generation_config)
    finally:
        tokenizer.padding_side = padding_side
        model.train(training)
    eos = model.generation_config.eos_token_id
    eos = {*(eos if isinstance(eos, list) else [eos]), tokenizer.eos_token_id} - {None}
    completion_ids = []
    for ids in generated[:, inputs["input_ids"].size(1):].tolist():
        end = next((position + 1 for position, token in enumerate(ids) if token in eos), len(ids))
        completion_ids.append(ids[:end])
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    conversational = [is_conversational(row) for row in rows for _ in range(generation_config.num_return_sequences)]
    completions = [
        [{"role": "assistant", "content": text}] if chat else text for text, chat in zip(texts, conversational)
    ]
    return completions, completion_ids


def _total_rewards(funcs, weights, rows, repeats, completions, completion_ids) -> torch.Tensor:
    """Σ_k w_k R_k per completion, as TRL's GRPOTrainer sums them (NaN rewards left out; NaN where all are)."""
    columns = [key for key in rows[0] if key not in ("prompt", "completion", "completion_ids", REFERENCE_REWARDS)]
    repeated = {key: [row[key] for row in rows for _ in range(repeats)] for key in columns}
    prompts = [row["prompt"] for row in rows for _ in range(repeats)]
    per_func = torch.tensor([
        [math.nan if reward is None else float(reward)
         for reward in func(prompts=prompts, completions=completions, completion_ids=completion_ids, **repeated)]
        for func in funcs
    ]).T
    total = (per_func * weights).nansum(dim=1)
    return total.masked_fill(torch.isnan(per_func).all(dim=1), math.nan)
