"""How each per-row tensor of TRL's generation batch is laid out, and how its padding columns are trimmed.

TRL pads prompts on the left and completions on the right. Hooks that move rows between batches (dynamic sampling)
or re-cut micro-batches (length bucketing) need, for every entry of the batch, its layout:

- ``left``: one column per prompt token (``prompt_ids``, ``prompt_mask``), padding first;
- ``right``: one column per completion token (``completion_ids``, ``completion_mask``, ``tool_mask``, old,
  reference and sampling log-probs, per-token advantages or importance-sampling ratios, the critic's per-token
  values and targets, the router component's old experts), padding last;
- ``row``: one value (or a fixed-width vector) per completion, among them the expert answer's tokens and mask
  (``expert_ids``, ``expert_mask``, components/expert_sft.py), always ``max_completion_length`` wide.

An entry not named here is per-token iff it is as wide as the completions in every batch on every process (one
vote over the processes), otherwise per row.

Tests: tests/test_length_bucketing.py (`trim_padding`, micro-batches re-cut by length), tests/test_vllm_paths.py
(per-token IS ratios kept through resample's regrouping), tests/test_sampling_multiprocess.py (rows moved between
processes).
"""

from __future__ import annotations

import torch
from accelerate.utils import gather_object

# How each per-row tensor of TRL's batch is padded when rows of different widths are stacked.
PROMPT_KEYS = {"prompt_ids": "pad", "prompt_mask": 0}
TOKEN_KEYS = {
    "completion_ids": "pad",
    "completion_mask": 0,
    "tool_mask": 1,
    "old_per_token_logps": 0.0,
    "ref_per_token_logps": 0.0,
    "sampling_per_token_logps": 0.0,
}
ROW_KEYS = ("expert_ids", "expert_mask")  # of a fixed width of their own, which may equal the completions'


def batch_layouts(
    batches: list[dict], keys, rows: int, pad_token: int, per_token_sampling_ratio: bool, refusal: tuple[str, str]
) -> dict[str, tuple[str, object]]:
    """key -> (side, pad value) for `keys` of `batches` (batches with the same keys, `rows` rows each, on this
    process); side is 'left', 'right' or 'row'. A collective when an entry's layout is not known by name: every
    process must call it with the same keys. `refusal` = (what cannot be done, the fix) names the caller in the
    one-line error raised for an entry that is not one row per completion."""
    action, fix = refusal
    layouts, undecided = {}, []
    for key in keys:
        values = [batch[key] for batch in batches]
        if not all(isinstance(value, torch.Tensor) and value.dim() > 0 and value.size(0) == rows for value in values):
            raise ValueError(
                f"{action} the batch entry {key!r} (not one row per completion; multimodal inputs are not supported "
                f"yet); {fix}."
            )
        if key in PROMPT_KEYS:
            layouts[key] = ("left", pad_token if PROMPT_KEYS[key] == "pad" else PROMPT_KEYS[key])
        elif key in TOKEN_KEYS:
            layouts[key] = ("right", pad_token if TOKEN_KEYS[key] == "pad" else TOKEN_KEYS[key])
        elif key == "importance_sampling_ratio":
            layouts[key] = ("right", 1.0) if per_token_sampling_ratio else ("row", None)
        elif key in ROW_KEYS or values[0].dim() < 2:
            layouts[key] = ("row", None)
        elif key == "advantages":
            layouts[key] = ("right", 0.0)
        else:
            undecided.append(key)
    if undecided:  # per-token iff as wide as the completions in every batch on every process
        local = [
            all(batch[key].size(1) == batch["completion_ids"].size(1) for batch in batches) for key in undecided
        ]
        votes = gather_object([local])
        for position, key in enumerate(undecided):
            if all(vote[position] for vote in votes):
                layouts[key] = ("right", 0.0)
            else:
                widths = gather_object([[batch[key].size(1) for batch in batches]])
                if len({width for per_process in widths for width in per_process}) > 1:
                    raise ValueError(
                        f"{action} the batch entry {key!r}: its width varies and is not the completion width; {fix}."
                    )
                layouts[key] = ("row", None)
    return layouts


def kept_width(used_columns: torch.Tensor, multiple: int | None) -> int:
    """Columns to keep: up to the last used one (at least 1), rounded up to `multiple` (TRL's `pad_to_multiple_of`)
    but never beyond the current width. `used_columns` is ordered from the unpadded edge."""
    positions = used_columns.nonzero().flatten()
    width = used_columns.numel()
    needed = 1 if positions.numel() == 0 else int(positions.max()) + 1
    if multiple:
        needed = min(width, -(-needed // multiple) * multiple)
    return needed


def trim_padding(batch: dict, layouts: dict, pad_token: int, multiple: int | None) -> dict:
    """Drop, in place, the prompt columns that are left padding in every row and the completion columns beyond the
    longest completion (a column is used where the mask is set or the token is not padding), as TRL's own padding
    of these rows alone would have produced; returns `batch`."""
    if "prompt_mask" in batch:
        width = batch["prompt_mask"].size(1)
        keep = kept_width((batch["prompt_mask"] != 0).any(dim=0).flip(0), multiple)
        for key, (side, _) in layouts.items():
            if side == "left":
                batch[key] = batch[key][:, width - keep :]
    used = (batch["completion_mask"] != 0) | (batch["completion_ids"] != pad_token)
    keep = kept_width(used.any(dim=0), multiple)
    for key, (side, _) in layouts.items():
        if side == "right":
            batch[key] = batch[key][:, :keep]
    return batch
