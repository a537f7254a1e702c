"""Trainer hook: `skip_zero_advantage`, leave sequences whose advantages are all 0 out of the loss forward.

A sequence whose advantages are all exactly 0 adds nothing to the loss or its gradient when its term is 0 by
construction (every term proportional to Â), β = 0 and there is no entropy bonus, high-entropy mask or MoE
auxiliary loss. The policy forward then runs on the other rows only, and the skipped rows get log π_θ =
log π_old (detached; ratio 1, term 0), so every normaliser (sequence count, token count, num_items_in_batch) is
unchanged and the loss and gradient are the same. Their entropies are set to the mean entropy of the computed
rows, so the logged entropy is that of the trained sequences. At least one row always runs, so distributed
wrappers see a forward on every process. A loss entry may declare `zero_advantage_is_inert=True/False`; an
undeclared loss is probed when the `GRPOConfig` is built (`check_zero_advantage_skip`, with every other condition
but the MoE auxiliary loss, which needs the model) with a synthetic off-policy batch (its Â = 0 rows must have a zero
term and gradient, and changing their log-probs or removing them must not change the other rows' terms and
gradients beyond float32 rounding).
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import torch

from ..losses.base import PolicyBatch
from .model_inputs import is_multimodal

_FORWARD_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")  # what the text forward reads


class ZeroAdvantageSkipMixin:
    """`skip_zero_advantage` (see the module docstring)."""

    skip_zero_advantage = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.skip_zero_advantage = bool(self.args.skip_zero_advantage) and self._check_zero_advantage_skip()

    def _check_zero_advantage_skip(self) -> bool:
        """The one condition that needs the model (every other one is checked when the config is built,
        `check_zero_advantage_skip`): a MoE router auxiliary loss spans every row."""
        if self.aux_loss_enabled:
            raise ValueError(
                "skip_zero_advantage: sequences with Â = 0 still contribute through the MoE router auxiliary loss "
                "(router_aux_loss_coef); set skip_zero_advantage=False or router_aux_loss_coef=0."
            )
        return True

    def _policy_forward(self, model, inputs, compute_entropy: bool = True):
        if not self.skip_zero_advantage or not self.model.training or "advantages" not in inputs:
            return super()._policy_forward(model, inputs, compute_entropy)
        if is_multimodal(inputs):
            warnings.warn("skip_zero_advantage: multimodal inputs are not sliced by row; running the full forward.")
            return super()._policy_forward(model, inputs, compute_entropy)
        advantages = inputs["advantages"]
        batch_size = advantages.size(0)
        rows = (advantages != 0).reshape(batch_size, -1).any(dim=1).nonzero().flatten()  # the one host sync
        if rows.numel() == batch_size:
            return super()._policy_forward(model, inputs, compute_entropy)
        if rows.numel() == 0:
            rows = rows.new_zeros(1)  # a forward on every process keeps DDP / ZeRO in step; the row adds 0 anyway
        active_inputs = {key: inputs[key][rows] for key in _FORWARD_KEYS}
        forward = super()._policy_forward(model, active_inputs, compute_entropy)
        logps, entropies = forward.logps, forward.entropies
        old = inputs.get("old_per_token_logps")
        # on-policy batches have no old log-probs: the trainer then uses sg(log π_θ), so any value gives ratio 1
        fill = old.detach() if old is not None else torch.zeros_like(logps[:1]).expand(batch_size, -1)
        full_logps = fill.to(logps.dtype).index_copy(0, rows, logps)
        full_entropies = None
        if compute_entropy:
            mask = active_inputs["completion_mask"].to(entropies.dtype)
            mean_entropy = ((entropies * mask).sum() / mask.sum().clamp(min=1.0)).detach()
            full_entropies = mean_entropy.expand(batch_size, entropies.size(1)).index_copy(0, rows, entropies)
        computed = rows if forward.computed_rows is None else rows[forward.computed_rows]
        return replace(forward, logps=full_logps, entropies=full_entropies, aux_loss=None, computed_rows=computed)


def check_zero_advantage_skip(entry, args) -> None:
    """Raise a one-line ValueError when rows with Â = 0 would still contribute under this config with the loss
    `entry` (β, the entropy bonus or mask, a loss that declares or is probed to couple rows); config only."""
    reasons = []
    if args.beta != 0.0:
        reasons.append(f"beta={args.beta} (the KL term depends on every row)")
    if args.entropy_coef != 0.0 or args.use_adaptive_entropy:  # TRL's `_entropy_bonus_enabled`
        reasons.append("an entropy bonus (entropy_coef or an entropy target)")
    if args.top_entropy_quantile < 1.0:
        reasons.append(f"top_entropy_quantile={args.top_entropy_quantile} (the mask's quantile spans every row)")
    if reasons:
        raise ValueError(
            f"skip_zero_advantage: sequences with Â = 0 still contribute through {', '.join(reasons)}; "
            f"set skip_zero_advantage=False or remove them."
        )
    declared = entry.spec.zero_advantage_is_inert
    if declared is False:
        raise ValueError(
            f"skip_zero_advantage: the loss {entry.name!r} declares that sequences with Â = 0 still change the "
            f"loss; set skip_zero_advantage=False."
        )
    if declared is None:
        problem = zero_advantage_probe(entry.fn, args)
        if problem:
            raise ValueError(
                f"skip_zero_advantage: the loss {entry.name!r} is not inert for Â = 0 ({problem}); set "
                f"skip_zero_advantage=False, or declare zero_advantage_is_inert in the loss entry."
            )


def zero_advantage_probe(loss_fn, args, seed: int = 0) -> str | None:
    """Check on synthetic off-policy batches that rows with Â = 0 are inert for `loss_fn`; return what failed.

    Inert: whatever their log-probs and entropies (the originals, log π_old as skipping sets them, far-off values)
    and even with those rows removed from the batch, their term and its gradient are exactly 0 (Â·x = 0 for finite
    x), and every other row's term and gradient x equal those x_ref of the original batch to float32 rounding:

        |x − x_ref| ≤ 1e-5 · (|x_ref| + max |x_ref|)        elementwise, max over the other rows

    Not bit for bit: a vectorised CPU kernel may round an element differently when the tensor's length changes
    (rows removed), and how depends on the CPU's vector width. Coupling moves those values by far more: the
    Â = 0 rows' log-probs move by −4 and +1.5 nats and the removed rows hold about half the tokens, so a batch
    mean, a rank or a token count over the batch shifts by percents. The global RNG is left untouched; losses that
    draw random numbers draw the same ones in every run. A probe cannot prove inertness: losses that couple rows
    should declare `zero_advantage_is_inert=False` in their entry.
    """
    with torch.random.fork_rng(devices=[]):
        generator = torch.Generator().manual_seed(seed)

        def noise(*shape, scale=1.0):
            return scale * torch.randn(*shape, generator=generator)

        rows, width = 8, 12
        advantages = torch.tensor([[0.0], [2.5], [0.0], [-1.5], [0.0], [3.0], [-2.0], [0.0]])
        inert = advantages.squeeze(1) == 0
        old_logps = noise(rows, width, scale=0.6) - 2.0
        logps = old_logps + noise(rows, width, scale=0.4)
        ref_logps = old_logps + noise(rows, width, scale=0.3)
        entropies = noise(rows, width).abs()
        mask = torch.ones(rows, width)
        mask[1, 9:] = 0
        mask[2, 5:] = 0
        mask[6, 11:] = 0

        def run(inert_logps, keep):
            current = torch.where(inert.unsqueeze(1), inert_logps, logps)[keep].requires_grad_(True)
            current_entropies = torch.where(inert.unsqueeze(1), entropies.mean(), entropies)[keep]
            batch = PolicyBatch(
                logps=current, old_logps=old_logps[keep], advantages=advantages[keep], mask=mask[keep],
                ref_logps=ref_logps[keep], entropies=current_entropies,
            )
            torch.manual_seed(seed)
            term = loss_fn(batch, args).loss
            term_mask = mask[keep] if term.size(1) == width else torch.ones_like(term)
            (gradient,) = torch.autograd.grad((term * term_mask).sum(), current, allow_unused=True)
            gradient = torch.zeros_like(current) if gradient is None else gradient
            return (term * term_mask).detach(), gradient

        everything = torch.ones(rows, dtype=torch.bool)
        variants = [(logps, everything), (old_logps, everything), (old_logps - 4.0, everything),
                    (old_logps + 1.5, everything), (logps, ~inert)]
        try:
            results = [run(inert_logps, keep) for inert_logps, keep in variants]
        except Exception as error:  # a loss that needs inputs the probe cannot make up
            return f"the probe could not run it: {type(error).__name__}: {error}"
        reference_term, reference_gradient = results[0][0][~inert], results[0][1][~inert]
        for (term, gradient), (_, keep) in zip(results, variants):
            inert_kept = inert[keep]
            if not torch.all(term[inert_kept] == 0):
                return "its term is not 0 where Â = 0"
            if not torch.all(gradient[inert_kept] == 0):
                return "log π of a sequence with Â = 0 gets a gradient"
            if not (
                _equal_to_rounding(term[~inert_kept], reference_term)
                and _equal_to_rounding(gradient[~inert_kept], reference_gradient)
            ):
                return "the other sequences' terms or gradients depend on the rows with Â = 0"
    return None


def _equal_to_rounding(values: torch.Tensor, reference: torch.Tensor) -> bool:
    """|x − x_ref| ≤ 1e-5 · (|x_ref| + max |x_ref|) elementwise, max over the finite entries: float32 rounding."""
    scale = float(reference.abs().nan_to_num(nan=0.0, posinf=0.0).max())
    return torch.allclose(values, reference, rtol=1e-5, atol=1e-5 * scale)
