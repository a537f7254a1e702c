"""Component: a teacher's per-token signal added to the advantages (on-policy distillation inside the RL loss).

With `teacher_model` set, after the estimator has produced the reward advantages Â_i (or Â_{i,t}) of a round, the
pipeline's `after_advantages` hook point makes them per token:

    Â_{i,t} ← Â_{i,t} + λ · (log π_T(y_{i,t} | x_i, y_{i,<t}) − log π_old(y_{i,t} | x_i, y_{i,<t}))
                                                                                                   (teacher_only=False)
    Â_{i,t} ← λ · (log π_T(y_{i,t}) − log π_old(y_{i,t}))                                          (teacher_only=True)

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

The teacher's prompt: `teacher_prompt_template` (a str.format template over the dataset columns, e.g.
"{prompt}\\n(The answer is {answer}.)") gives it privileged context; the teacher scores the same completion tokens
after the templated prompt, tokenized by TRL's `_tokenize_prompts` (chat template included) and left-padded. A chat
prompt keeps its messages; the last user message's text becomes the filled template, {prompt} being that text.

Identity: the teacher "self" with no template is the reference π_ref, so its term is −λ·k1_t per token, after the
estimator; against `kl_placement="reward"`: docs/formulas.md, "Teacher signal".

Composition: the component sits just outside the estimator, so every estimator and loss sees the sum (a sequence-level
loss takes its masked mean per sequence). A critic's value targets come from the rewards alone (the teacher term is
not in V). With "self" under PEFT and `ref_reset_steps`, the teacher stays the base weights (disable_adapter), not
the reset "ref" adapter; without PEFT it is TRL's reference model, which resets and `sync_ref_model` move.

The teacher's log-probs come from one no-grad pass (`extra_pass("teacher_logps")`, TRL's
`_get_per_token_logps_and_entropies`, chunked at the per-device batch size). Logged: `teacher/log_ratio` (token mean
of log π_T − log π_old over the batch).
"""

from __future__ import annotations

import torch
from accelerate.utils import is_peft_model
from transformers import AutoTokenizer
from trl.models import prepare_deepspeed, prepare_fsdp
from trl.trainer.utils import add_fused_lm_head, create_model_from_path, disable_dropout_in_model

from ..config.teacher import template_columns
from ..hooks.component import Component
from ..hooks.generation import ScoredRound
from ..hooks.model_inputs import forward_inputs, loss_mask
from ..hooks.trl_access import log_metric, pad_token_id, per_token_logps, tokenized_prompts

SELF_TEACHER = "self"


class Teacher(Component):
    """Adds λ·(log π_T − log π_old) per token to the advantages after the estimator (see the module docstring)."""

    name = "teacher"

    def __init__(self, trainer):
        super().__init__(trainer)
        self.teacher = None  # a separate teacher model; None with "self" under PEFT (the base under disable_adapter)
        name = trainer.args.teacher_model
        self.active = name is not None
        if name is None:
            return
        self._check_template_columns()
        policy = trainer.accelerator.unwrap_model(trainer.model)
        if name == SELF_TEACHER:
            if is_peft_model(policy):
                return
            if trainer.ref_model is None:
                raise ValueError(
                    "teacher_model: 'self' means the policy's base weights, which exist only with a PEFT adapter (or "
                    "a reference model, beta > 0); pass peft_config, set beta > 0, or name a teacher model."
                )
            self.teacher = trainer.ref_model  # the initial weights TRL keeps as the reference
            return
        self.teacher = self._load_teacher(name)

    def _check_template_columns(self):
        trainer = self.trainer
        template = trainer.args.teacher_prompt_template
        columns = getattr(trainer.train_dataset, "column_names", None)
        if template is None or columns is None:
            return
        missing = sorted(set(template_columns(template)) - set(columns))
        if missing:
            raise ValueError(
                f"teacher_prompt_template: names column(s) {', '.join(missing)} that the training set lacks (its "
                f"columns: {', '.join(columns)}); add them to the dataset or change the template."
            )

    def _load_teacher(self, name: str):
        trainer = self.trainer
        check_same_tokenizer(name, trainer.processing_class)
        init_kwargs = dict(trainer.args.model_init_kwargs or {})
        init_kwargs.setdefault("dtype", trainer.accelerator.unwrap_model(trainer.model).dtype)
        init_kwargs.setdefault("trust_remote_code", trainer.args.trust_remote_code)
        teacher = create_model_from_path(name, **init_kwargs)
        if trainer.args.disable_dropout:
            disable_dropout_in_model(teacher)
        teacher.requires_grad_(False)
        teacher.eval()
        add_fused_lm_head(
            teacher, temperature=trainer.temperature, cast_lm_head_to_fp32=trainer.args.cast_lm_head_to_fp32
        )
        if trainer.is_deepspeed_enabled:
            return prepare_deepspeed(teacher, trainer.accelerator)
        if trainer.is_fsdp_enabled:
            return prepare_fsdp(teacher, trainer.accelerator)
        return trainer.accelerator.prepare_model(teacher, evaluation_mode=True)

    # ------------------------------------------------------------------ the signal
    def after_advantages(self, scored: ScoredRound) -> None:
        trainer = self.trainer
        output = scored.batch
        mask = loss_mask(output).to(torch.float32)
        policy_logps = output.get("old_per_token_logps")
        if policy_logps is None:
            policy_logps = self._logps_under(trainer.model, "teacher_policy_logps", output)
        teacher_logps = self._teacher_logps(scored)
        log_ratio = (teacher_logps - policy_logps) * mask
        signal = trainer.args.teacher_coef * log_ratio
        advantages = output["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        output["advantages"] = signal if trainer.args.teacher_only else (advantages * mask + signal)
        mode = "train" if trainer.model.training else "eval"
        sums = trainer.accelerator.gather(torch.stack([log_ratio.sum(), mask.sum()]).reshape(1, 2)).sum(0)
        log_metric(trainer, "teacher/log_ratio", (sums[0] / sums[1].clamp(min=1)).item(), mode)

    def _teacher_logps(self, scored: ScoredRound) -> torch.Tensor:
        """log π_T(y_t) of the sampled tokens after the teacher's prompt, no grad."""
        trainer = self.trainer
        output = scored.batch
        if trainer.args.teacher_prompt_template is not None:
            output = self._with_teacher_prompts(output, scored.inputs)
        if self.teacher is not None:
            return self._logps_under(self.teacher, "teacher_logps", output)
        with trainer.accelerator.unwrap_model(trainer.model).disable_adapter():
            return self._logps_under(trainer.model, "teacher_logps", output)

    def _with_teacher_prompts(self, output: dict, inputs: list) -> dict:
        """The batch's completions after the templated prompts, left-padded as TRL pads prompts (a shallow copy)."""
        trainer = self.trainer
        if inputs is None or len(inputs) != output["completion_ids"].size(0):
            raise RuntimeError("teacher_prompt_template: the round's input rows do not match its completions.")
        prompts = [teacher_prompt(trainer.args.teacher_prompt_template, row) for row in inputs]
        prompt_ids, _, _ = tokenized_prompts(trainer, prompts)
        device = output["prompt_ids"].device
        width = max(len(ids) for ids in prompt_ids)
        pad = pad_token_id(trainer)
        padded = torch.full((len(prompt_ids), width), pad, dtype=output["prompt_ids"].dtype, device=device)
        mask = torch.zeros((len(prompt_ids), width), dtype=output["prompt_mask"].dtype, device=device)
        for row, ids in enumerate(prompt_ids):
            if len(ids):
                padded[row, width - len(ids) :] = torch.as_tensor(ids, device=device)
                mask[row, width - len(ids) :] = 1
        return {**output, "prompt_ids": padded, "prompt_mask": mask}

    def _logps_under(self, model, name: str, output: dict) -> torch.Tensor:
        trainer = self.trainer
        input_ids, attention_mask, logits_to_keep, multimodal = forward_inputs(output)
        with trainer.extra_pass(name) as chunk:
            logps, _, _ = per_token_logps(
                trainer, model, input_ids, attention_mask, logits_to_keep, batch_size=chunk, **multimodal
            )
        return logps


def check_same_tokenizer(name: str, policy_tokenizer) -> None:
    """Refuse a teacher whose tokenizer maps tokens to ids differently from the policy's: the teacher scores the
    policy's token ids, which must mean the same tokens."""
    policy_tokenizer = getattr(policy_tokenizer, "tokenizer", policy_tokenizer)
    try:
        teacher_tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"teacher_model: cannot load the tokenizer of {name!r} to compare it with the policy's: {error}"
        )
    if teacher_tokenizer.get_vocab() != policy_tokenizer.get_vocab():
        raise ValueError(
            f"teacher_model: {name!r} has a different tokenizer from the policy's (vocabulary or token ids differ), "
            f"so it cannot score the policy's tokens; use a teacher of the same tokenizer family."
        )


def teacher_prompt(template: str, row: dict):
    """The teacher's prompt for one input row. A text prompt: the filled template. A chat prompt (a list of
    messages): a copy whose last user message's text is the filled template, {prompt} being that text; the other
    messages as they were (TRL's chat template then renders it as it renders the policy's prompt)."""
    prompt = row["prompt"]
    if isinstance(prompt, str):
        return template.format(**{**row, "prompt": prompt})
    messages = [dict(message) for message in prompt]
    users = [i for i, message in enumerate(messages) if message.get("role") == "user"]
    if not users or not isinstance(messages[users[-1]].get("content"), str):
        raise ValueError(
            "teacher_prompt_template: a chat prompt needs a last user message with text content to template."
        )
    last = messages[users[-1]]
    last["content"] = template.format(**{**row, "prompt": last["content"]})
    return messages
