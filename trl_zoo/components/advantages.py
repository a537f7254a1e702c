"""Component: advantage estimators from the advantage table replace TRL's advantages.

TRL computes the advantages inside `_generate_and_score_completions` from the rewards of the whole generation
batch (all processes) and keeps this process's slice. With `advantage_estimator` set (or `kl_placement="reward"`,
which needs the rewards before the baseline; the estimator is then "grpo", TRL's own), this component

1. receives each generation round scored by TRL (the pipeline's `replace_advantages(scored)`,
   `hooks/generation.py`);
2. takes the rewards TRL used from the round (`ScoredRound.total_rewards()`): R_i = Σ_k w_k R_{i,k} over the whole
   batch (all processes, reward shaping included; NaN where every function returned None), subtracts β Σ_t KL_t for
   `kl_placement="reward"` (`kl_control.reward_kl_penalty`), gathers the extras the estimator declares
   (completion mask, per-token penalty, ‖s‖² for `optimal_baseline`, the rollouts' turns for `gigpo` and `mt_grpo`,
   `components/turns.py`) over processes, runs the estimator on the global batch and keeps this process's rows as TRL
   does (process index × local batch size). Per-token (N, T) advantages are padded to the longest completion across
   processes and trimmed back to the local length;
3. replaces TRL's advantages with them, and keeps what the estimator saw in `scored.advantage_inputs` (the critic
   derives its value targets from it).

With `multi_objective_aggregation="normalize_then_sum"` (GDPO) step 2 runs the estimator on each reward function's
own rewards and whitens their weighted sum over the batch (`advantages.reward_decoupled_advantages`); with the
`grpo` estimator that is TRL's own normalize_then_sum.

With `advantage_estimator=None` and `kl_placement="loss"` every call goes straight to TRL.

‖s‖² for `optimal_baseline` needs Σ_v π(v)² per completion token. TRL's fused LM head computes it in its tiles
(`log_sum_sq_probs`) without the full logits: at init a second fused head with that output enabled is built with
TRL's `add_fused_lm_head` and kept aside (the model keeps TRL's head, so TRL's own passes cost nothing extra); one
no-grad pass over the generation batch (`extra_pass`) swaps it in and reads Σ_v π(v)² and log π (the latter
reused for the reward KL when TRL has no old log-probs). That pass supports text models only.

Logged: `advantages/mean`, `advantages/std`, `advantages/abs_max` over the scorable completions (tokens for
per-token advantages) of the whole batch, and `kl_reward/penalty` (mean β Σ_t KL_t) for the reward placement.
"""

from __future__ import annotations

import torch
from accelerate.utils import is_peft_model
from trl.trainer.utils import add_fused_lm_head

from ..advantages import AdvantageInputs, reward_decoupled_advantages
from ..advantages.optimal_baseline import score_sq_norms
from ..dataset_values import reference_rewards
from ..hooks.component import Component
from ..hooks.generation import ScoredRound, row_chunks
from ..hooks.model_inputs import forward_inputs, is_multimodal, loss_mask
from ..hooks.trl_access import log_metric, per_token_logps, replace_logged_advantages, restored, swapped
from ..registry import ADVANTAGES
from .kl_control import reward_kl_penalty
from .turns import gathered_turns

_FUSED_OUTPUTS_WITH_SQUARES = ("log_probs", "entropy", "log_sum_sq_probs")


class Advantages(Component):
    """Replace TRL's advantages by the configured estimator's, computed over the global generation batch."""

    name = "advantages"

    def __init__(self, trainer):
        super().__init__(trainer)
        name = trainer.args.advantage_estimator
        if name is None and trainer.args.kl_placement == "reward":
            name = "grpo"  # TRL's advantages, on the penalised rewards
        self.entry = ADVANTAGES.get(name) if name is not None else None
        self.active = self.entry is not None
        if self.active and "score_sq_norms" in self.entry.spec.needs:
            self._squares_forward = self._fused_forward_with_squares()

    def _fused_forward_with_squares(self):
        """TRL's fused LM head with `log_sum_sq_probs` on, as a forward kept aside (the model keeps TRL's)."""
        trainer = self.trainer
        target = self._lm_head_owner()
        with restored(target, "forward"):  # add_fused_lm_head sets it
            add_fused_lm_head(
                target,
                temperature=trainer.temperature,
                cast_lm_head_to_fp32=trainer.args.cast_lm_head_to_fp32,
                outputs=_FUSED_OUTPUTS_WITH_SQUARES,
            )
            return target.forward

    def _lm_head_owner(self):
        trainer = self.trainer
        model = trainer.accelerator.unwrap_model(trainer.model)
        return model.get_base_model() if is_peft_model(model) else model

    def replace_advantages(self, scored: ScoredRound) -> None:
        scored.batch["advantages"] = self._estimated_advantages(scored)

    # ------------------------------------------------------------------ estimation
    def _estimated_advantages(self, scored: ScoredRound) -> torch.Tensor:
        trainer = self.trainer
        output = scored.batch
        mode = "train" if trainer.model.training else "eval"
        num_generations = trainer.num_generations if mode == "train" else trainer.num_generations_eval
        mask = loss_mask(output)
        local_rows, local_length = mask.shape

        rewards = scored.total_rewards()  # of this round, all processes (the reward seam, components/rewards.py)
        unscorable = scored.unscorable

        policy_logps = output.get("old_per_token_logps")
        norms = None
        if "score_sq_norms" in self.entry.spec.needs:
            pass_logps, norms = self._score_norm_pass(output, mask)
            policy_logps = pass_logps if policy_logps is None else policy_logps
            norms = trainer.accelerator.gather(norms)

        penalty = None
        if trainer.args.kl_placement == "reward" and output.get("ref_per_token_logps") is not None:
            if policy_logps is None:
                policy_logps = self._policy_logps(output)
            penalty = self._gather_padded(reward_kl_penalty(trainer, output, policy_logps))
            sequence_penalty = penalty.sum(-1)
            rewards = rewards - sequence_penalty
            log_metric(trainer, "kl_reward/penalty", sequence_penalty[~unscorable].mean().item(), mode)

        global_mask = self._gather_padded(mask)
        values = None
        if self.plan.has_critic:
            values = self._gather_padded(output["old_values"])  # set by the critic hook (components/critic.py)
        reference = None
        if "reference_rewards" in self.entry.spec.needs:  # a dataset column (advantages/a2po.py)
            local = torch.tensor(reference_rewards(scored.inputs), device=rewards.device)
            reference = trainer.accelerator.gather(local)
        turns = gathered_turns(trainer, output) if "turns" in self.entry.spec.needs else None  # components/turns.py
        estimator_inputs = AdvantageInputs(
            rewards=rewards,
            num_generations=num_generations,
            mask=global_mask,
            token_penalty=penalty,
            score_sq_norms=norms,
            values=values,
            reference_rewards=reference,
            turns=turns,
        )
        scored.advantage_inputs = estimator_inputs  # global; the critic derives its value targets from it
        per_reward = None
        if trainer.multi_objective_aggregation == "normalize_then_sum":  # GDPO: the estimator per reward function
            per_reward = (scored.rewards_per_func, scored.reward_weights.to(rewards.device))
        advantages = self.estimate(estimator_inputs, per_reward)
        self._log_advantages(advantages, global_mask, unscorable, mode)

        start = trainer.accelerator.process_index * local_rows
        local = advantages[start : start + local_rows]
        return local[:, :local_length] if local.dim() == 2 else local

    def estimate(self, inputs: AdvantageInputs, per_reward: tuple | None = None) -> torch.Tensor:
        """Â over the global `inputs` by the configured estimator (TRL's grpo when none is set), NaN (a row with no
        baseline) as 0 and per-token advantages masked; with `per_reward` = (R_{i,k}, w_k), GDPO's form
        (`reward_decoupled_advantages`). The one place an estimator is called: the rounds' advantages and dynamic
        sampling's regrouped batches (`components/dynamic_sampling.py`) both come from here."""
        args = self.trainer.args
        entry = self.entry or ADVANTAGES.get("grpo")
        if per_reward is not None:
            advantages = reward_decoupled_advantages(entry, inputs, *per_reward, args)
        else:
            advantages = entry.fn(inputs, args)
        advantages = torch.nan_to_num(advantages, nan=0.0)
        return advantages * inputs.mask if advantages.dim() == 2 else advantages

    def _gather_padded(self, values: torch.Tensor) -> torch.Tensor:
        """Gather (B, T) rows of every process, padding T with zeros to the longest."""
        trainer = self.trainer
        return trainer.accelerator.gather(trainer.accelerator.pad_across_processes(values, dim=1, pad_index=0))

    def _policy_logps(self, output: dict) -> torch.Tensor:
        """log π(y_t) of the sampled tokens under the current policy, no grad (TRL's own log-prob pass)."""
        trainer = self.trainer
        input_ids, attention_mask, logits_to_keep, multimodal = forward_inputs(output)
        with trainer.extra_pass("reward_kl_logps") as chunk:
            logps, _, _ = per_token_logps(
                trainer,
                trainer.model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size=chunk,
                **multimodal,
            )
        return logps

    def _score_norm_pass(self, output: dict, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log π(y_t) (B, T), ‖s_i‖² (B,)) from one no-grad pass through TRL's fused LM head."""
        trainer = self.trainer
        if is_multimodal(output):
            raise NotImplementedError("advantage_estimator='optimal_baseline' supports text-only models.")
        input_ids, attention_mask, length, _ = forward_inputs(output)
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        labels[:, :-length] = -100

        logps, log_squares = [], []
        target = self._lm_head_owner()
        with swapped(target, "forward", self._squares_forward), trainer.extra_pass("score_sq_norms") as chunk:
            for rows in row_chunks(input_ids.size(0), chunk):  # the swap lasts for this pass only
                with trainer.accelerator.autocast():
                    fused = trainer.model(
                        input_ids=input_ids[rows], attention_mask=attention_mask[rows], labels=labels[rows],
                        fused_lm_head=True,
                    )
                logps.append(fused.log_probs[:, -length:])
                log_squares.append(fused.log_sum_sq_probs[:, -length:])
        logps = torch.cat(logps).float()
        return logps, score_sq_norms(logps, torch.cat(log_squares).float(), mask)

    # ------------------------------------------------------------------ logging
    def _log_advantages(self, advantages: torch.Tensor, mask: torch.Tensor, unscorable: torch.Tensor, mode: str):
        trainer = self.trainer
        if advantages.dim() == 2:
            values = advantages[(mask * (~unscorable).unsqueeze(1)).bool()]
            per_completion = (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        else:
            values = advantages[~unscorable]
            per_completion = advantages
        if values.numel():
            log_metric(trainer, "advantages/mean", values.mean().item(), mode)
            log_metric(trainer, "advantages/std", values.std(unbiased=False).item(), mode)
            log_metric(trainer, "advantages/abs_max", values.abs().max().item(), mode)
        # TRL logged its own advantages for the completions table: show ours instead
        replace_logged_advantages(trainer, per_completion.tolist())
