"""Component: `skip_on_policy_old_logps`, old log-probs only where they differ from the policy's own.

TRL computes old log-probs log π_old(y_t) of the whole generation batch in one no-grad forward inside
`_generate_and_score_completions` whenever gradient_accumulation_steps is not a multiple of steps_per_generation ×
num_iterations. With num_iterations = 1 and steps_per_generation > gradient_accumulation_steps (G), the batch's
micro-batches are trained at micro-steps s, s + 1, …: those inside the optimizer step of the generation (buffer
entries 0 … G − 1 when s is a multiple of G) are trained with the very weights that generated them, so their old
log-probs are the policy's own, detached, which is what TRL's loss and `hooks/loss_step.py` use when a micro-batch
carries none (ratio 1). Only the later entries need old log-probs.

With the field on and applicable (`old_logps_skip_applies`, config/generation_speed.py), TRL's pass is not run at
generation (`old_logps_pass_skipped`, the door, around each training round's `generated_round`, the pipeline's
hook point of TRL's round); right after TRL's `_prepare_inputs` built (and length bucketing re-cut) the buffer
of micro-batches (`new_buffer`), before any optimizer update on it, each micro-batch of a later optimizer step gets
`old_per_token_logps` from the same forward TRL uses (`trl_access.per_token_logps` on prompt + completion
ids and masks, chunked by the per-device batch size, under `extra_pass("old_logps")`: no grad, gradient
checkpointing off, outside autocast as TRL's pass). Computed on the re-cut micro-batches, they are the log-probs of
exactly the rows and padding the loss forward sees. The buffer then goes to the resume component, which saves it with
them. Entries not used before the next generation (only after a resume that lost the buffer) get them too.

Under vLLM's importance-sampling correction (TRL's default with `use_vllm`), TRL's round computes neither the
correction nor its metrics (the door turns it off with the pass, `old_logps_pass_skipped`); each later micro-batch
gets `importance_sampling_ratio` from its old log-probs here, and each first-step micro-batch in its loss forward,
where π_old = π_θ is known (`OldLogps.deferred_sampling_ratio`, asked by hooks/loss_step.py): the same ratio TRL
computes (trl_zoo/sampling_correction.py), TRL's `sampling/…` metrics logged over each micro-batch.

Where it does not apply, TRL's behaviour is unchanged: eval, a multimodal batch (TRL's pass then runs in full), and
every setting of `old_logps_skip_conflicts` (num_iterations > 1, a teacher, the reward's KL, a MoE-router loss:
these read every row's old log-probs). Set by the user, such a setting is refused when
the config is built; set by `speed_recipe`, the field silently does not apply. Dynamic sampling composes: its rounds
generate without the pass, and only trained rows get old log-probs.

`old_logps/rows`, the rows put through an old-log-prob pass per generation batch (TRL's and this one's, summed over
processes), is logged at each generation batch where TRL would run its pass: half of TRL's with the recipe's
steps_per_generation = 2 G.

Tests: tests/test_old_logps_skip.py.
"""

from __future__ import annotations

import torch

from ..config.generation_buffer import entries_trained_on_policy, vllm_correction_on
from ..hooks.component import Component
from ..hooks.generation import ScoredRound
from ..hooks.model_inputs import forward_inputs, is_multimodal, loss_mask
from ..hooks.trl_access import log_metric, micro_step, old_logps_pass_skipped, per_token_logps, trl_computes_old_logps
from ..sampling_correction import correction_metrics, sampling_ratio

ROWS = "old_logps/rows"
OLD_LOGPS = "old_per_token_logps"
SAMPLING_RATIO, SAMPLING_LOGPS = "importance_sampling_ratio", "sampling_per_token_logps"


class OldLogps(Component):
    """`skip_on_policy_old_logps`, and the count of rows through old-log-prob passes (see the module docstring)."""

    name = "old_logps"

    def __init__(self, trainer):
        super().__init__(trainer)
        self.rows = 0  # rows through an old-log-prob pass in the current generation batch, this process
        # the field applies: TRL's pass is skipped at generation (`old_logps_pass_skipped`)
        self.skip_on_policy = self.plan.skips_on_policy_old_logps
        # vLLM's correction moves with the skipped pass: later micro-batches get it here, the first step's in the loss
        self.defers_correction = self.skip_on_policy and vllm_correction_on(trainer.args)

    def generated_round(self, inner, inputs) -> dict:
        if self.skip_on_policy and self.trainer.model.training:
            with old_logps_pass_skipped(self.trainer):
                return inner(inputs)
        return inner(inputs)

    def before_advantages(self, scored: ScoredRound) -> None:
        old = scored.batch.get(OLD_LOGPS)
        if old is not None and self.trainer.model.training:
            self.rows += old.size(0)  # TRL's pass over this round

    def new_buffer(self, micro_batches: list[dict]) -> list[dict]:
        """The new buffer with old log-probs where a later optimizer step needs them; the generation batch's count
        of rows through old-log-prob passes logged, and a fresh count for the next one."""
        trainer = self.trainer
        if self.skip_on_policy:
            micro_batches = self._with_old_logps(micro_batches, micro_step(trainer))
        if trl_computes_old_logps(trainer):
            rows = torch.tensor(float(self.rows), device=trainer.accelerator.device)
            log_metric(trainer, ROWS, trainer.accelerator.reduce(rows, reduction="sum").item())
        self.rows = 0
        return micro_batches

    def _with_old_logps(self, micro_batches: list[dict], step: int) -> list[dict]:
        """`micro_batches` with `old_per_token_logps` in each one not trained in the generation's optimizer step."""
        trainer = self.trainer
        on_policy = entries_trained_on_policy(trainer.args, step)
        result = []
        with trainer.extra_pass("old_logps") as chunk:
            for micro_batch, own in zip(micro_batches, on_policy):
                if own or OLD_LOGPS in micro_batch or is_multimodal(micro_batch):
                    result.append(micro_batch)
                    continue
                input_ids, attention_mask, logits_to_keep, _ = forward_inputs(micro_batch)
                old, _, _ = per_token_logps(
                    trainer, trainer.model, input_ids, attention_mask, logits_to_keep, batch_size=chunk
                )
                extra = {OLD_LOGPS: old}
                if self.defers_correction and SAMPLING_RATIO not in micro_batch:
                    extra[SAMPLING_RATIO] = corrected(trainer, micro_batch, old)
                result.append({**micro_batch, **extra})
                self.rows += input_ids.size(0)
        return result

    def deferred_sampling_ratio(self, inputs: dict, logps: torch.Tensor) -> torch.Tensor:
        """The loss step's ratio for a micro-batch whose correction this component deferred (`defers_correction`, a
        first-step micro-batch): π_old = π_θ, the loss forward's `logps` detached."""
        if not self.active or not self.defers_correction:
            raise KeyError(f"{SAMPLING_RATIO}: a micro-batch under vLLM's importance-sampling correction carries none")
        return corrected(self.trainer, inputs, logps.detach())


def corrected(trainer, micro_batch: dict, old_logps: torch.Tensor) -> torch.Tensor:
    """vLLM's importance-sampling ratio of `micro_batch` from its old log-probs, TRL's metrics of it logged."""
    mask = loss_mask(micro_batch)
    sampling = micro_batch[SAMPLING_LOGPS]
    ratio = sampling_ratio(old_logps, sampling, mask, trainer.args)
    gather = trainer.accelerator.gather
    for name, value in correction_metrics(old_logps, sampling, mask, ratio, gather).items():
        log_metric(trainer, name, value)
    return ratio


