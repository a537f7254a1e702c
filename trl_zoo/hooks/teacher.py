"""Trainer hook: a teacher's per-token signal added to the advantages (on-policy distillation inside the RL loss).

With `teacher_model` set, after the estimator has produced the reward advantages Â_i (or Â_{i,t}) of a round, the
generation seam's `_after_advantages` makes them per token:

    Â_{i,t} ← Â_{i,t} + λ · (log π_T(y_{i,t} | x_i, y_{i,<t}) − log π_old(y_{i,t} | x_i, y_{i,<t}))    (teacher_only=False)
    Â_{i,t} ← λ · (log π_T(y_{i,t}) − log π_old(y_{i,t}))                                                (teacher_only=True)

λ = `teacher_coef`, zero outside the completion mask. The sign rewards tokens the teacher finds likelier than the
policy does: the term is −(log π_old − log π_T), the negative per-token reverse-KL sample (k1) of GKD's on-policy
distillation (arXiv:2306.13649). On-policy π_old = π_θ at sampling time: TRL's old log-probs when it keeps them
(`steps_per_generation > 1` or importance sampling), else one no-grad pass of the current policy, which is π_old.
The term enters the advantages, so every loss weights it by its ratio and clip like the reward advantages and it
carries no gradient of its own (it is a reward, not a loss).

The teacher is
- a model name or path: loaded like TRL's reference model (`model_init_kwargs`, the policy's dtype), dropout off,
  frozen, TRL's fused LM head, prepared with accelerate as TRL prepares `ref_model`; its tokenizer must equal the
  policy's (same vocabulary, token for id), or it is refused at construction;
- "self": the policy's base weights, under PEFT's `disable_adapter()` (no extra weights); without PEFT the reference
  model TRL built (beta > 0: the initial weights), else refused.

Identity: the teacher "self" (the reference weights) with λ = β is the k1 KL in the reward placed per token after
the estimator: Â_{i,t} = Â_i − β·(log π_old(y_t) − log π_ref(y_t)). `kl_placement="reward"` instead subtracts
β Σ_t KL_t from R_i before the estimator; with the `rloo`-free estimator "reinforce" ... see docs/formulas.md for the
exact relation (tested in tests/test_teacher.py).

The teacher's log-probs come from one no-grad pass (`_generation_pass("teacher_logps")`, TRL's
`_get_per_token_logps_and_entropies`, chunked at the per-device batch size). Logged: `teacher/log_ratio` (token mean
of log π_T − log π_old over the batch).
"""

from __future__ import annotations

import math

import torch
from accelerate.utils import is_peft_model
from transformers import AutoTokenizer
from trl.models import prepare_deepspeed, prepare_fsdp
from trl.trainer.utils import add_fused_lm_head, create_model_from_path, disable_dropout_in_model

from ..model_inputs import forward_inputs, loss_mask
from .generation import ScoredRound

SELF_TEACHER = "self"


def check_teacher_options(args) -> None:
    """Config-time checks of the teacher fields (one line each)."""
    coef = args.teacher_coef
    if not isinstance(coef, (int, float)) or not math.isfinite(coef) or coef < 0:
        raise ValueError(f"teacher_coef: λ={coef!r} must be a finite number ≥ 0.")
    if args.teacher_model is None and args.teacher_only:
        raise ValueError("teacher_only: True needs a teacher; set teacher_model (a name or path, or 'self').")
    if args.teacher_only and coef == 0:
        raise ValueError("teacher_only: with teacher_coef=0 every advantage is 0; set teacher_coef > 0.")


class TeacherSignalMixin:
    """Adds λ·(log π_T − log π_old) per token to the advantages after the estimator (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher = None  # a separate teacher model; None with "self" under PEFT (the base under disable_adapter)
        name = self.args.teacher_model
        if name is None:
            return
        policy = self.accelerator.unwrap_model(self.model)
        if name == SELF_TEACHER:
            if is_peft_model(policy):
                return
            if self.ref_model is None:
                raise ValueError(
                    "teacher_model: 'self' means the policy's base weights, which exist only with a PEFT adapter (or "
                    "a reference model, beta > 0); pass peft_config, set beta > 0, or name a teacher model."
                )
            self.teacher = self.ref_model  # the initial weights TRL keeps as the reference
            return
        self.teacher = self._load_teacher(name)

    def _load_teacher(self, name: str):
        check_same_tokenizer(name, self.processing_class)
        init_kwargs = dict(self.args.model_init_kwargs or {})
        init_kwargs.setdefault("dtype", self.accelerator.unwrap_model(self.model).dtype)
        init_kwargs.setdefault("trust_remote_code", self.args.trust_remote_code)
        teacher = create_model_from_path(name, **init_kwargs)
        if self.args.disable_dropout:
            disable_dropout_in_model(teacher)
        teacher.requires_grad_(False)
        teacher.eval()
        add_fused_lm_head(teacher, temperature=self.temperature, cast_lm_head_to_fp32=self.args.cast_lm_head_to_fp32)
        if self.is_deepspeed_enabled:
            return prepare_deepspeed(teacher, self.accelerator)
        if self.is_fsdp_enabled:
            return prepare_fsdp(teacher, self.accelerator)
        return self.accelerator.prepare_model(teacher, evaluation_mode=True)

    # ------------------------------------------------------------------ the signal
    def _after_advantages(self, scored: ScoredRound) -> None:
        super()._after_advantages(scored)
        if self.args.teacher_model is None:
            return
        output = scored.batch
        mask = loss_mask(output).to(torch.float32)
        policy_logps = output.get("old_per_token_logps")
        if policy_logps is None:
            policy_logps = self._logps_under(self.model, "teacher_policy_logps", output)
        teacher_logps = self._teacher_logps(output)
        log_ratio = (teacher_logps - policy_logps) * mask
        signal = self.args.teacher_coef * log_ratio
        advantages = output["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        output["advantages"] = signal if self.args.teacher_only else (advantages * mask + signal)
        mode = "train" if self.model.training else "eval"
        tokens = self.accelerator.gather(mask.sum()).sum().clamp(min=1)
        self._metrics[mode]["teacher/log_ratio"].append((self.accelerator.gather(log_ratio.sum()).sum() / tokens).item())

    def _teacher_logps(self, output: dict) -> torch.Tensor:
        """log π_T(y_t) of the sampled tokens, no grad."""
        if self.teacher is not None:
            return self._logps_under(self.teacher, "teacher_logps", output)
        with self.accelerator.unwrap_model(self.model).disable_adapter():
            return self._logps_under(self.model, "teacher_logps", output)

    def _logps_under(self, model, name: str, output: dict) -> torch.Tensor:
        input_ids, attention_mask, logits_to_keep, multimodal = forward_inputs(output)
        with self._generation_pass(name) as chunk:
            logps, _, _ = self._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=chunk, **multimodal
            )
        return logps


def check_same_tokenizer(name: str, policy_tokenizer) -> None:
    """Refuse a teacher whose tokenizer maps tokens to ids differently from the policy's: the teacher scores the
    policy's token ids, which must mean the same tokens."""
    policy_tokenizer = getattr(policy_tokenizer, "tokenizer", policy_tokenizer)
    try:
        teacher_tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as error:
        raise ValueError(f"teacher_model: cannot load the tokenizer of {name!r} to compare it with the policy's: {error}")
    if teacher_tokenizer.get_vocab() != policy_tokenizer.get_vocab():
        raise ValueError(
            f"teacher_model: {name!r} has a different tokenizer from the policy's (vocabulary or token ids differ), so "
            f"it cannot score the policy's tokens; use a teacher of the same tokenizer family."
        )
