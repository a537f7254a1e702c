"""Probes of a loss on synthetic batches, run when the config is built: is it inert for rows with Â = 0
(`skip_zero_advantage`), is it row-local (`length_bucketing`)? Pure tensor code: a loss function and the config.

Tests: tests/test_skip_zero_advantage.py, tests/test_length_bucketing.py.
"""

from __future__ import annotations

import torch

from ..losses.base import PolicyBatch


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
                equal_to_rounding(term[~inert_kept], reference_term)
                and equal_to_rounding(gradient[~inert_kept], reference_gradient)
            ):
                return "the other sequences' terms or gradients depend on the rows with Â = 0"
    return None


def row_grouping_probe(loss_fn, args, seed: int = 0) -> str | None:
    """Check on a synthetic off-policy batch that `loss_fn` is row-local; return what failed, or None.

    Row-local: each row's masked term and its gradient are the same whether the row sits in the full batch or in
    one of two halves of a permuted batch, each half trimmed to its own longest row (so neither the other rows nor
    the padded width may matter), to float32 rounding (`equal_to_rounding`). The global RNG is left untouched.
    """
    with torch.random.fork_rng(devices=[]):
        generator = torch.Generator().manual_seed(seed)

        def noise(*shape, scale=1.0):
            return scale * torch.randn(*shape, generator=generator)

        rows, width = 8, 12
        lengths = torch.tensor([12, 3, 7, 12, 2, 9, 5, 10])
        mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()
        advantages = noise(rows, 1)
        old_logps = noise(rows, width, scale=0.6) - 2.0
        logps = old_logps + noise(rows, width, scale=0.4)
        ref_logps = old_logps + noise(rows, width, scale=0.3)
        entropies = noise(rows, width).abs()

        def run(keep: torch.Tensor):
            trimmed = int(lengths[keep].max())
            current = logps[keep, :trimmed].clone().requires_grad_(True)
            batch = PolicyBatch(
                logps=current, old_logps=old_logps[keep, :trimmed], advantages=advantages[keep],
                mask=mask[keep, :trimmed], ref_logps=ref_logps[keep, :trimmed], entropies=entropies[keep, :trimmed],
            )
            torch.manual_seed(seed)
            term = loss_fn(batch, args).loss
            term_mask = batch.mask if term.size(1) == trimmed else torch.ones_like(term)
            (gradient,) = torch.autograd.grad((term * term_mask).sum(), current, allow_unused=True)
            gradient = torch.zeros_like(current) if gradient is None else gradient
            if term.size(1) == trimmed:  # back to the full width, padding columns 0
                term = torch.nn.functional.pad(term * term_mask, (0, width - trimmed))
            gradient = torch.nn.functional.pad(gradient, (0, width - trimmed))
            return term.detach(), gradient

        try:
            reference_term, reference_gradient = run(torch.arange(rows))
            permuted = torch.tensor([4, 1, 6, 2, 0, 7, 3, 5])
            halves = [run(permuted[:4]), run(permuted[4:])]
        except Exception as error:  # a loss that needs inputs the probe cannot make up
            return f"the probe could not run it: {type(error).__name__}: {error}"
        term = torch.cat([half[0] for half in halves])
        gradient = torch.cat([half[1] for half in halves])
        if not (
            equal_to_rounding(term, reference_term[permuted])
            and equal_to_rounding(gradient, reference_gradient[permuted])
        ):
            return "a row's term or gradient depends on the other rows of its micro-batch or on its padded width"
    return None


def equal_to_rounding(values: torch.Tensor, reference: torch.Tensor) -> bool:
    """|x − x_ref| ≤ 1e-5 · (|x_ref| + max |x_ref|) elementwise, max over the finite entries: float32 rounding."""
    scale = float(reference.abs().nan_to_num(nan=0.0, posinf=0.0).max())
    return torch.allclose(values, reference, rtol=1e-5, atol=1e-5 * scale)
