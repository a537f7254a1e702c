"""Component: `prompt_once`, each distinct prompt of a log-prob pass forwarded once, its completions on its cache.

TRL's log-prob pass (`_get_per_token_logps_and_entropies`) forwards every row as prompt + completion, so a prompt
shared by G completions is forwarded G times. In each chunk of the pass, this component forwards each distinct prompt
p (rows with equal ids under equal masks) once, without its last token, keeps its keys and values, and forwards each
row's last prompt token and completion on that cache:

    cache_p   = backbone(p[:-1])                                           once per distinct prompt, with grad
    log π(y)  = fused_head(backbone([p[-1], y] | cache_p))                  per row, TRL's fused LM head

Positions, the causal mask over left padding and the scored positions are TRL's (the model's positions count from
the cache's length), so log-probs and entropies equal TRL's pass up to rounding; the gradient reaches the prompt's
forward through the cache (the rows' cache is an index of the distinct prompts'). Forward FLOPs per chunk go from
R·(P + C) to U·(P − 1) + R·(C + 1) token positions, U the distinct prompts of R rows.

Rows share prompts only where TRL's buffer put them together: TRL shuffles a generation batch's rows before cutting
it into micro-batches. In training, right after TRL has built a new buffer, the rows inside each block of
g = gcd(steps_per_generation, gradient_accumulation_steps) micro-batches (one optimizer step's, for every
iteration) are sorted by prompt and cut again, as `length_bucketing` re-cuts them by length (with both on, that
component sorts by prompt first, then length): TRL's assignment of rows to optimizer steps is kept. Regrouping rows
keeps the loss under exactly `length_bucketing`'s conditions (config/compute.py, `check_length_bucketing`); where they
do not hold, the buffer is left as TRL cut it and only the prompts that TRL's shuffle left together are shared.

Logged per loss pass (the one with gradients): `prompt_once/token_slots`, the positions forwarded, and
`prompt_once/token_slots_unshared`, TRL's R·(P + C).

Refused: gradient checkpointing (transformers drops the cache in a checkpointed layer: config/compute.py), the
critic of `advantage_estimator="gae"` (its forward hook reads the backbone's output), the MoE router auxiliary loss
(the prompts' routing would be counted once), multimodal inputs (at the first pass that has them).

Tests: tests/test_prompt_once.py.
"""

from __future__ import annotations

import functools
import inspect

import torch

from ..hooks.component import Component
from ..hooks.trl_access import log_metric
from .length_bucketing import recut_buffer, row_lengths

SLOTS = "prompt_once/token_slots"
SLOTS_UNSHARED = "prompt_once/token_slots_unshared"


class PromptOnce(Component):
    """`prompt_once` (see the module docstring)."""

    name = "prompt_once"

    def __init__(self, trainer):
        super().__init__(trainer)
        args = trainer.args
        self.active = bool(getattr(args, "prompt_once", False))
        if self.active and trainer.aux_loss_enabled:
            raise ValueError(
                "prompt_once: the MoE router auxiliary loss would count each shared prompt's routing once; set "
                "prompt_once=False or router_aux_loss_coef=0."
            )
        # the buffer is re-cut here unless length bucketing re-cuts it (prompt first) or regrouping changes the loss
        self.regroups = self.active and not args.length_bucketing and regrouping_keeps_loss(trainer)

    def new_buffer(self, micro_batches: list[dict]) -> list[dict]:
        """The new buffer with each optimizer step's rows sorted by prompt (module docstring)."""
        if not self.regroups:
            return micro_batches
        refusal = ("prompt_once cannot re-cut", "set prompt_once=False")
        return recut_buffer(self.trainer, micro_batches, prompt_order, refusal)

    @staticmethod
    def prompt_then_length(rows: dict) -> torch.Tensor:
        """Length bucketing's sort key while this component is on: the rows' distinct prompt first, then length."""
        lengths = row_lengths(rows)
        return prompt_order(rows) * (int(lengths.max()) + 1) + lengths

    def log_prob_pass(
        self, inner, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False,
        compute_aux_loss=False, **multimodal,
    ):
        """TRL's log-prob pass with each chunk's distinct prompts forwarded once (module docstring)."""
        present = [key for key, value in multimodal.items() if value is not None]
        if present:
            raise ValueError(
                f"prompt_once: multimodal inputs ({', '.join(present)}) are not supported; set prompt_once=False."
            )
        size = batch_size or input_ids.size(0)
        logps, entropies, slots = [], [], [0, 0]
        for start in range(0, input_ids.size(0), size):
            ids, mask = input_ids[start : start + size], attention_mask[start : start + size]
            chunk_logps, chunk_entropies, forwarded = shared_prompt_pass(
                self.trainer, inner, model, ids, mask, logits_to_keep, compute_entropy
            )
            logps.append(chunk_logps)
            entropies.append(chunk_entropies)
            slots[0] += forwarded
            slots[1] += ids.numel()
        if torch.is_grad_enabled():
            log_metric(self.trainer, SLOTS, float(slots[0]))
            log_metric(self.trainer, SLOTS_UNSHARED, float(slots[1]))
        return torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None


def regrouping_keeps_loss(trainer) -> bool:
    """Whether re-grouping rows into micro-batches keeps the loss (`length_bucketing`'s conditions)."""
    from ..config.compute import check_length_bucketing

    try:
        check_length_bucketing(trainer.plan.loss_entry, trainer.args)
    except ValueError:
        return False
    return True


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(index of each row's distinct prompt, (U,) the first row of each distinct prompt); rows share a prompt iff
    their ids are equal where their masks are, and their masks are equal."""
    keys = torch.where(prompt_mask.bool(), prompt_ids, -1)
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), inverse.numel(), device=inverse.device)
    first = first.scatter_reduce(0, inverse, torch.arange(inverse.numel(), device=inverse.device), reduce="amin")
    return inverse, first


def prompt_order(rows: dict) -> torch.Tensor:
    """Sort key of `bucket_micro_batches`: the rows' distinct-prompt index."""
    return prompt_groups(rows["prompt_ids"], rows["prompt_mask"])[0]


def shared_prompt_pass(trainer, inner, model, input_ids, attention_mask, logits_to_keep, compute_entropy):
    """(log-probs (R, C), entropies or None, positions forwarded) of one chunk of R rows whose last `logits_to_keep`
    columns are the completion; TRL's pass (`inner`) where no prompt is shared."""
    rows, width = input_ids.shape
    prompt_width = width - logits_to_keep
    inverse, first = prompt_groups(input_ids[:, :prompt_width], attention_mask[:, :prompt_width])
    distinct = first.numel()
    if distinct == rows or prompt_width < 2:
        logps, entropies, _ = inner(model, input_ids, attention_mask, logits_to_keep, None, compute_entropy, False)
        return logps, entropies, input_ids.numel()
    cache_name = cache_argument(trainer, model)
    prefix, prefix_mask = input_ids[first, : prompt_width - 1], attention_mask[first, : prompt_width - 1]
    with trainer.accelerator.autocast():
        prompt_output = model(input_ids=prefix, attention_mask=prefix_mask, use_cache=True, logits_to_keep=1)
    cache = prompt_output[cache_name]
    cache.batch_select_indices(inverse)
    tail = input_ids[:, prompt_width - 1 :]
    labels = tail.masked_fill(attention_mask[:, prompt_width - 1 :] == 0, -100)
    labels[:, 0] = -100
    with trainer.accelerator.autocast():
        output = model(
            input_ids=tail, attention_mask=attention_mask, labels=labels, fused_lm_head=True, **{cache_name: cache}
        )
    forwarded = distinct * (prompt_width - 1) + tail.numel()
    return output.log_probs, output.entropy if compute_entropy else None, forwarded


def cache_argument(trainer, model) -> str:
    """The name under which the model's forward takes and returns its key-value cache: `cache` (transformers >= 5.2x)
    or `past_key_values`."""
    language_model = trainer.accelerator.unwrap_model(model)
    if hasattr(language_model, "get_base_model"):
        language_model = language_model.get_base_model()
    return _cache_argument_of(type(language_model))


@functools.cache
def _cache_argument_of(model_class) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"
