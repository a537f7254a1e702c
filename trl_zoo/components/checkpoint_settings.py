"""The settings a checkpoint's files are laid out by: saved with it, compared when a run resumes from it.

Resumed under another value of one of these, a checkpoint fails deep in a loader (torch's "different number of
parameter groups", a size mismatch in PEFT's state dict) or in a check that blames something else:

    peft_config            the saved weights: a LoRA adapter of that rank on those modules, or the whole model
    advantage_estimator    whether a critic is trained (gae): its weights (critic.pt), the optimizer's parameter groups
    critic_model           the critic's form ("adapter" or "head"), hence its weights
    steps_per_generation,  TRL's buffered generation batch, saved when the checkpoint falls inside a generation
    num_iterations         cycle, and the micro-step at which the next batch is sampled (speed_recipe sets the first)

`layout_settings(trainer)` is saved in ``trl_zoo_state.pt`` (components/resume.py); `check_same_settings` raises a
`CheckpointError` naming the first that changed and the value to resume with. A checkpoint saved before these were
recorded is not compared.

Tests: tests/test_resume_refusals.py.
"""

from __future__ import annotations

from .checkpoint_integrity import CheckpointError

WHY = {
    "peft_config": "it lays out the saved weights",
    "advantage_estimator": "whether it trains a critic (gae does) lays out the critic's weights and the optimizer's "
    "parameter groups",
    "critic_model": "it lays out the critic's weights",
    "steps_per_generation": "it decides TRL's buffered generation batch and when the next one is sampled",
    "num_iterations": "it decides TRL's buffered generation batch and when the next one is sampled",
}


def _adapter(model) -> dict | None:
    """The trained adapter's rank and target modules; None for full fine-tuning."""
    configs = getattr(model, "peft_config", None)
    if not configs:
        return None
    config = configs[model.active_adapter]
    targets = [config.target_modules] if isinstance(config.target_modules, str) else sorted(config.target_modules)
    return {"r": getattr(config, "r", None), "target_modules": targets}


def layout_settings(trainer) -> dict:
    """The run's values of the settings above, as saved with a checkpoint."""
    args = trainer.args
    return {
        "peft_config": _adapter(trainer.accelerator.unwrap_model(trainer.model)),
        "advantage_estimator": args.advantage_estimator,
        "critic_model": None if trainer.critic is None else trainer.critic.mode,
        "steps_per_generation": args.steps_per_generation,
        "num_iterations": args.num_iterations,
    }


def _differs(name: str, saved: dict, current: dict) -> bool:
    if name == "advantage_estimator":  # the estimators without a critic share one layout
        return (saved["critic_model"] is None) != (current["critic_model"] is None)
    return saved[name] != current[name]


SHOWN_MODULES = 3  # target modules spelled out in a line; PEFT's "all-linear" lists every layer's modules by name


def _modules(targets: list[str]) -> str:
    """'q_proj, v_proj', or '14 modules (model.layers.0.mlp.down_proj, ..., …)' beyond `SHOWN_MODULES`."""
    if len(targets) <= SHOWN_MODULES:
        return ", ".join(targets)
    return f"{len(targets)} modules ({', '.join(targets[:SHOWN_MODULES])}, …)"


def _shown(name: str, value) -> str:
    if name != "peft_config":
        return repr(value)
    if value is None:
        return "None (full fine-tuning)"
    return f"LoRA r={value['r']} on {_modules(value['target_modules'])}"


def check_same_settings(checkpoint: str, saved: dict, current: dict, speed_recipe: str | None = None) -> None:
    """Raise CheckpointError naming the first setting of `saved` (the checkpoint's) that `current` changed."""
    for name in current:
        if name not in saved or not _differs(name, saved, current):
            continue
        was, now = _shown(name, saved[name]), _shown(name, current[name])
        if name == "steps_per_generation" and speed_recipe:
            now += f" (with speed_recipe={speed_recipe!r})"
        how = ", set in the CLI by --use_peft, --lora_r, --lora_target_modules" if name == "peft_config" else ""
        raise CheckpointError(
            f"resume_from_checkpoint: {checkpoint} was saved with {name} {was}, this run has {now}: {WHY[name]}; "
            f"resume with {name} {was}{how}."
        )
