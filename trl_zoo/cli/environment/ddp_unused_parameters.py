"""DDP's `find_unused_parameters` as the run's model needs it, when the user leaves TRL's `ddp_find_unused_parameters`
unset.

transformers turns the search on for any model that is not a bare `PreTrainedModel`, a PEFT model among them: DDP then
walks the autograd graph after every forward for parameters that got no gradient, and warns at the first step that it
found none. A LoRA policy without a critic on a dense model trains every adapter weight in every loss forward, so the
search is off there. It stays transformers' choice with a critic (its value passes run apart from the policy's loss
forward) and on a Mixture-of-Experts model (a batch may route no token to an expert's adapter), for full fine-tuning,
and whenever the field is set.

Tests: tests/test_launched_run.py (no warning on two processes), tests/test_run_folders.py (the choice).
"""

from __future__ import annotations

from transformers import AutoConfig

from ...config.run_plan import has_critic

EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")  # how MoE configs name their expert count


def find_unused_parameters(training_args, model_args, model_path: str) -> bool | None:
    """The value for `ddp_find_unused_parameters`: the user's, else False where no parameter can go unused (a LoRA
    policy, no critic, a dense model), else None (transformers decides)."""
    if training_args.ddp_find_unused_parameters is not None or not model_args.use_peft:
        return training_args.ddp_find_unused_parameters
    if has_critic(training_args.advantage_estimator):
        return None
    return None if has_experts(model_path, model_args.model_revision, training_args.trust_remote_code) else False


def has_experts(model_path: str, revision: str | None, trust_remote_code: bool) -> bool:
    """Whether the model's config declares experts; a config that cannot be read here counts as one that does."""
    try:
        config = AutoConfig.from_pretrained(model_path, revision=revision, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        return True
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return any(getattr(config, name, None) for name in EXPERT_COUNTS)
