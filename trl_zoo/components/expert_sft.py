"""Component: CHORD's SFT term on expert demonstrations inside the RL step (arXiv:2508.11408; the formulas and μ's
schedule: `trl_zoo/sft_term.py`).

With `expert_column` set, every training micro-batch's loss becomes

    L = (1 − μ(s)) · L_RL + μ(s) · L_SFT / accumulation

L_RL what the trainer computes without it (the policy loss, with its KL term, entropy bonus and MoE auxiliary loss;
with a critic, the critic's loss too), s the optimizer steps done (`state.global_step`), L_SFT the token mean of the
expert tokens' NLL (φ-weighted with `expert_phi`) after each row's prompt, over the micro-batch's rows, divided by
the gradient-accumulation steps like the trainer's other auxiliary terms. A departure from Trinity-RFT, the authors'
code: there each micro-batch's SFT term is weighted by its share of the optimizer step's expert rows, here by
1/accumulation whatever it holds, so when the demonstrations are spread unevenly over the micro-batches a row of a
micro-batch with few of them counts more here (the two agree when every micro-batch holds as many).

How the demonstration reaches the micro-batch. TRL hands a generation round its input rows, one per completion, with
every dataset column (`ScoredRound.inputs`). At `after_advantages` each training round's expert answers are
tokenized (the policy's tokenizer, no special tokens, then its EOS, as a completion ends; cut at
`max_completion_length`) into two per-row tensors of the batch, ``expert_ids`` (padded with the pad token) and
``expert_mask``, `max_completion_length` wide (a fixed-width row entry, `batch_layout.py`), so they travel with
their rows through TRL's shuffling and splitting, dynamic sampling's regrouping and length bucketing. The prompt is
the row's own ``prompt_ids``, TRL's tokenization (chat template included): the expert answer is scored as a
completion of exactly the prompt the policy answered.

At `micro_batch_loss` (outermost, around the critic and the policy loss), one forward of the policy (TRL's log-prob
pass, at the sampling temperature, with grad) over the micro-batch's distinct (prompt, answer) rows, each row's tokens
weighted by how many rows carry it (a prompt's G completions share one demonstration), the columns cut at the
longest answer. Rows whose value is None or blank ('' or whitespace) have no demonstration and take no part (a
number, 42 from a JSON file, is the answer '42': `dataset_values.expert_answer`); a micro-batch without any adds no
SFT term, but still runs the forward, on one row weighted 0: under DDP every process must (its forward is a
collective). At μ = 0 the forward is skipped and the loss is L_RL. Evaluation passes straight through.

With `loss_type="luffy"` the column holds LUFFY's expert traces instead (`components/luffy.py`) and this component is
off.

Logged: ``expert/mu`` (μ of the step) and ``expert/sft_loss`` (L_SFT of the micro-batch, before μ).

Tests: tests/test_expert_sft.py, tests/test_expert_sft_multiprocess.py (two DDP processes, answers on one side only).
"""

from __future__ import annotations

import torch

from ..dataset_values import EXPERT_FIX, DatasetValueError, expert_answer, expert_answer_problem
from ..hooks.batch_layout import kept_width
from ..hooks.component import Component
from ..hooks.generation import ScoredRound
from ..hooks.model_inputs import is_multimodal
from ..hooks.trl_access import log_metric, pad_token_id, per_token_logps
from ..sft_term import mu_schedule, sft_loss

EXPERT_IDS, EXPERT_MASK = "expert_ids", "expert_mask"


class ExpertSFT(Component):
    """Adds μ·L_SFT on the expert answers of `expert_column` and scales the RL loss by 1 − μ (module docstring)."""

    name = "expert_sft"

    def __init__(self, trainer):
        super().__init__(trainer)
        self.column = trainer.args.expert_column
        self.active = self.column is not None and trainer.args.loss_type != "luffy"  # LUFFY: traces, no SFT term

    def mu(self, step: int) -> float:
        """μ at optimizer step `step` (`expert_mu_*`)."""
        args = self.trainer.args
        return mu_schedule(step, args.expert_mu_warmup_steps, args.expert_mu_decay_steps, args.expert_mu_peak,
                           args.expert_mu_valley)

    # ------------------------------------------------------------------ the demonstrations into the batch
    def after_advantages(self, scored: ScoredRound) -> None:
        if not self.trainer.model.training:
            return
        batch, rows = scored.batch, scored.inputs
        if rows is None or len(rows) != batch["completion_ids"].size(0):
            raise RuntimeError("expert_column: the round's input rows do not match its completions.")
        if is_multimodal(batch):
            raise NotImplementedError("expert_column: expert demonstrations support text-only models.")
        batch[EXPERT_IDS], batch[EXPERT_MASK] = self.expert_tokens([row.get(self.column) for row in rows], batch)

    def expert_tokens(self, answers: list, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, mask), each (B, max_completion_length): the answers' tokens then EOS, cut at the width, padded on
        the right; a None answer is an empty row."""
        trainer = self.trainer
        width = trainer.max_completion_length
        completion_ids, completion_mask = batch["completion_ids"], batch["completion_mask"]
        ids = completion_ids.new_full((len(answers), width), pad_token_id(trainer))
        mask = completion_mask.new_zeros((len(answers), width))
        for row, tokens in enumerate(answer_tokens(trainer, answers)):
            if tokens is not None:
                ids[row, : len(tokens)] = torch.tensor(tokens, dtype=ids.dtype)
                mask[row, : len(tokens)] = 1
        return ids, mask

    # ------------------------------------------------------------------ the loss
    def micro_batch_loss(self, inner, model, inputs):
        """(1 − μ)·L_RL + μ·L_SFT / accumulation in training; L_RL as it is in evaluation (with the policy forward
        of L_RL)."""
        loss, forward = inner(model, inputs)
        trainer = self.trainer
        if not trainer.model.training:
            return loss, forward
        mu = self.mu(trainer.state.global_step)
        log_metric(trainer, "expert/mu", mu)
        if mu == 0.0:
            return loss, forward
        sft, demonstrated = self.sft_loss(model, inputs)
        logged = sft.detach() if demonstrated else loss.new_tensor(float("nan"))
        log_metric(trainer, "expert/sft_loss", trainer.accelerator.gather(logged.reshape(1)).nanmean().item())
        return (1.0 - mu) * loss + mu * sft / trainer.current_gradient_accumulation_steps, forward

    def sft_loss(self, model, inputs: dict) -> tuple[torch.Tensor, bool]:
        """(L_SFT of the micro-batch `inputs`, with grad, from one forward over its distinct (prompt, answer) rows;
        whether any row has a demonstration). With none, the forward still runs, on one row weighted 0, and L_SFT is
        0: every process of a launch runs it (DDP's forward is a collective)."""
        mask = inputs[EXPERT_MASK]
        rows = mask.any(dim=1).nonzero().squeeze(1)
        demonstrated = rows.numel() > 0
        if not demonstrated:
            rows = rows.new_zeros(1)
        width = max(kept_width(mask.any(dim=0), None), 1)
        prompt_ids, prompt_mask = inputs["prompt_ids"][rows], inputs["prompt_mask"][rows]
        expert_ids, expert_mask = inputs[EXPERT_IDS][rows, :width], mask[rows, :width]
        masks = torch.cat([prompt_mask, expert_mask], dim=1).to(prompt_ids.dtype)
        key = torch.cat([prompt_ids, expert_ids, masks], dim=1)  # rows equal in all four are one demonstration
        _, inverse, counts = torch.unique(key, dim=0, return_inverse=True, return_counts=True)
        positions = torch.arange(inverse.numel(), device=inverse.device)
        distinct = torch.empty_like(counts).scatter_(0, inverse, positions)  # a row of each
        input_ids = torch.cat([prompt_ids[distinct], expert_ids[distinct]], dim=1)
        attention_mask = torch.cat([prompt_mask[distinct], expert_mask[distinct]], dim=1)
        logps, _, _ = per_token_logps(self.trainer, model, input_ids, attention_mask, width)
        weights = expert_mask[distinct] * counts.unsqueeze(1)
        return sft_loss(logps, weights, self.trainer.args.expert_phi), demonstrated


def answer_tokens(trainer, answers: list) -> list[list[int] | None]:
    """Each expert answer as the policy's completion tokens: the tokenizer's, no special tokens, then EOS, cut at
    `max_completion_length`; None for no answer (None or blank; a number is its text: `dataset_values.expert_answer`)
    (CHORD's answers here, LUFFY's traces in components/luffy.py). A map-style training set was checked at
    construction; a streamed row that is not an answer is refused here."""
    column = trainer.args.expert_column
    for answer in answers:
        problem = expert_answer_problem(answer)
        if problem is not None:
            raise DatasetValueError(
                f"train_dataset: a streamed row's {column!r} (expert_column) {problem}; {EXPERT_FIX}."
            )
    answers = [expert_answer(answer) for answer in answers]
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    end = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    given = [row for row, answer in enumerate(answers) if answer is not None]
    tokenized = tokenizer([answers[row] for row in given], add_special_tokens=False)["input_ids"] if given else []
    result: list[list[int] | None] = [None] * len(answers)
    for row, tokens in zip(given, tokenized):
        result[row] = (list(tokens) + end)[: trainer.max_completion_length]
    return result
