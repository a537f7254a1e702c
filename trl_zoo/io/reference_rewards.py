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
and the weighted sum over the functions leaves NaNs out (NaN where all are). Their outputs are checked as the
trainer checks them (`components/rewards.checked_rewards`): one number or None per completion, else one line naming the
function and what it returned; NaN or ±inf is an error (`nan_rewards="raise"`) or left unscored as None
(`nan_rewards="drop"`, with a warning); a reward, and a weighted sum, beyond ±1e6 (`MAX_ABS_REFERENCE_REWARD`, the
column's bound) is an error, so no value the trainer would refuse is written. A dataset without a `prompt` column,
or with a None, blank or non-text prompt, is refused naming the column or the row.

The model is the reference: the policy before training (with PEFT, the base model the adapter is added to). One
process; in a launch, run it once and save the dataset.

Where TRL's experimental A2POTrainer and the authors' scripts differ: K = 8 (both); prompts whose K rewards are all
0 are kept unless `drop_unsolved=True` (the authors' `filter_incorrect=False`; TRL's `filter_all_incorrect` defaults
to True); TRL samples with its config's top_p / top_k, here untruncated, as the authors' vLLM sampling
(top_p 1, top_k −1).

Tests: tests/test_a2po.py (the column on a tiny model: its shape, the samples' rewards, drop_unsolved, bad input and
bad reward outputs).
"""

from __future__ import annotations

import math

import torch
from transformers import GenerationConfig
from trl import is_conversational

from ..components.rewards import RewardOutputError, checked_rewards
from ..dataset_values import MAX_ABS_REFERENCE_REWARD, REFERENCE_REWARDS, check_prompts


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
    nan_rewards: str = "raise",
):
    """`dataset` (a `datasets.Dataset` with a "prompt" column) with the column `reference_rewards`: for each prompt
    the weighted total rewards of `num_samples` completions sampled from `model` (module docstring)."""
    funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    if not funcs or not all(callable(func) and not isinstance(func, torch.nn.Module) for func in funcs):
        raise ValueError("reward_funcs: pass reward functions (callables); a reward model is not supported here.")
    if nan_rewards not in ("raise", "drop"):
        raise ValueError(f"nan_rewards: got {nan_rewards!r}; use 'raise' or 'drop' (NaN or ±inf left unscored).")
    columns = getattr(dataset, "column_names", None) or []
    if "prompt" not in columns:
        raise ValueError(
            f"dataset: no 'prompt' column (its columns: {', '.join(map(str, columns)) or 'none'}); rename the prompt "
            f"column to 'prompt', e.g. dataset.rename_column('question', 'prompt')."
        )
    check_prompts(dataset, where="dataset")
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
        totals = _total_rewards(funcs, weights, rows, num_samples, completions, completion_ids, nan_rewards)
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


def _total_rewards(funcs, weights, rows, repeats, completions, completion_ids, nan_rewards) -> torch.Tensor:
    """Σ_k w_k R_k per completion, as TRL's GRPOTrainer sums them (NaN rewards left out; NaN where all are), each
    function's output under training's checks (`components/rewards.checked_rewards`: one number or None per completion,
    finite, within ±1e15; NaN or ±inf as `nan_rewards` says), and each reward and total within the column's
    ±`MAX_ABS_REFERENCE_REWARD`, so that no value the trainer refuses is written."""
    columns = [key for key in rows[0] if key not in ("prompt", "completion", "completion_ids", REFERENCE_REWARDS)]
    repeated = {key: [row[key] for row in rows for _ in range(repeats)] for key in columns}
    prompts = [row["prompt"] for row in rows for _ in range(repeats)]
    per_func = []
    for func in funcs:
        name = getattr(func, "__name__", type(func).__name__)
        values = func(prompts=prompts, completions=completions, completion_ids=completion_ids, **repeated)
        checked = checked_rewards(name, values, len(prompts), nan_rewards, dropped="left out of V*(x)")
        _check_column_bound(f"reward {name!r}: returned", checked, "rescale the reward")
        per_func.append([math.nan if reward is None else reward for reward in checked])
    per_func = torch.tensor(per_func, dtype=torch.float64).T
    total = (per_func * weights.to(per_func)).nansum(dim=1)
    total = total.masked_fill(torch.isnan(per_func).all(dim=1), math.nan)
    _check_column_bound("reward_weights: the weighted sum is", total.tolist(), "lower the weights")
    return total


def _check_column_bound(who: str, values, fix: str) -> None:
    """A one-line RewardOutputError for the first of `values` beyond ±MAX_ABS_REFERENCE_REWARD."""
    for completion, value in enumerate(values):
        if value is not None and abs(value) > MAX_ABS_REFERENCE_REWARD:  # NaN compares False
            raise RewardOutputError(
                f"{who} {value:.3g} for completion {completion}; the {REFERENCE_REWARDS} column holds rewards within "
                f"±{MAX_ABS_REFERENCE_REWARD:.0e} (a2po regresses onto R − V*(x) unscaled); {fix}."
            )
