"""What the trainer reads from a TRL generation batch: the policy forward's inputs (prompt and completion ids side by
side, their attention mask, the number of completion positions to score, and the multimodal inputs TRL passes
through untouched) and the loss mask.
Tests: tests/test_model_inputs.py (a tool mask gives TRL's loss and gradients, and keeps tool-output tokens out of
every loss of the table), tests/test_parity.py; images only through the pass-through unit test."""

from __future__ import annotations

import torch

MULTIMODAL_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


def forward_inputs(batch: dict) -> tuple[torch.Tensor, torch.Tensor, int, dict]:
    """(input_ids, attention_mask, logits_to_keep, multimodal kwargs) for `_get_per_token_logps_and_entropies`."""
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    return input_ids, attention_mask, batch["completion_ids"].size(1), {key: batch.get(key) for key in MULTIMODAL_KEYS}


def is_multimodal(batch: dict) -> bool:
    return any(batch.get(key) is not None for key in MULTIMODAL_KEYS)


def loss_mask(batch: dict) -> torch.Tensor:
    """m_{i,t}, (B, T): the completion mask times TRL's tool mask (tool-call output tokens are not the policy's)."""
    mask = batch["completion_mask"]
    return mask * batch["tool_mask"] if "tool_mask" in batch else mask
