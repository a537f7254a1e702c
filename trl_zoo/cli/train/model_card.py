"""The model card `trl-zoo train` saves with the adapter (or model): README.md in output_dir.

PEFT's `save_pretrained` writes a blank template, and TRL's card (written only with checkpoints) names a local base
model "None"; neither knows the run. This card says what the run was: the base model, the method (loss, advantage
estimator, sampler, each with its paper: the trainer's `_name` and `_paper`, see `trainer.training_method`), the
data and reward, the main settings, the held-out result, how to load it, and the papers to cite.

The card's metadata names `base_model` and `datasets` only when they are hub ids (a local folder or file is not). A
packaged model (`smollm2-135m-instruct`, `gemma3-270m`: a GGUF file dequantized into the cache) is named by its hub
id, and its card loads the base by its short name through trl_zoo (the dequantized weights it was trained on), never
by the cache folder's path.

Tests: tests/test_model_card.py.
"""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version

from huggingface_hub import ModelCard, ModelCardData

from ... import __version__
from ...io.gguf_checkpoint import PACKAGED_MODELS, packaged_model_name
from ...tasks.evaluation import format_mean_reward


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:  # trl_zoo run from a source tree
        return __version__ if package == "trl-zoo" else "not installed"


def _hub_id(name: str | None) -> str | None:
    """`name` when it can be a hub id (not a local path), else None."""
    if not name or os.path.exists(name) or name.startswith((".", "/", "~")):
        return None
    return name


def _base(summary: dict) -> tuple[str | None, str, str, str | None]:
    """(hub id or None, how the card names the base model, the expression that loads it, the packaged model's short
    name or None): a packaged model by its hub id and short name, any other by what the run was given."""
    packaged = packaged_model_name(summary["model"])
    if packaged is None:
        return _hub_id(summary["model"]), summary["base_policy"], f'"{summary["model"]}"', None
    hub_id = PACKAGED_MODELS[packaged].hub_id
    named = f"{hub_id} (trl_zoo's packaged `{packaged}`: its GGUF file, dequantized)"
    return hub_id, named, f'policy_path("{packaged}")', packaged


def model_card(summary: dict, method: str, citation: str | None, settings: dict, adapter: bool,
               heldout_reward: str | None, builtin_task: bool) -> ModelCard:
    """The card of a finished run. `summary` is the run's summary.json, `method` and `citation` the trainer's
    `_name` and `_paper["citation"]`, `settings` the rows of the settings table (name -> value)."""
    base_model, base_policy, base_path, packaged = _base(summary)
    dataset = None if builtin_task else _hub_id(summary["task"])
    loss = summary["loss_type"]
    metadata = ModelCardData(
        base_model=base_model,
        datasets=[dataset] if dataset else None,
        library_name="peft" if adapter else "transformers",
        model_name=summary["name"],
        tags=["trl", "trl-zoo", "grpo", loss, *(["lora"] if adapter else [])],
    )
    kind = "A LoRA adapter for" if adapter else "A fine-tune of"
    data = f"the built-in task `{summary['task']}`" if builtin_task else summary["task"]
    rows = {"base model": base_policy, "data": summary["task"],
            "reward functions": ", ".join(f"`{name}`" for name in summary["reward_funcs"]), **settings}
    table = "\n".join(["| setting | value |", "|---|---|", *(f"| {key} | {value} |" for key, value in rows.items())])
    load = (
        f'base = AutoModelForCausalLM.from_pretrained({base_path})\n'
        f'model = PeftModel.from_pretrained(base, "{summary["adapter_dir"]}")'
        if adapter
        else f'model = AutoModelForCausalLM.from_pretrained("{summary["adapter_dir"]}")'
    )
    imports = "from peft import PeftModel\n" if adapter else ""
    if packaged:
        imports += "from trl_zoo.io.gguf_checkpoint import policy_path  # the packaged model, dequantized once\n"
    mean_before, mean_after = (format_mean_reward(summary.get(f"mean_reward_{when}")) for when in ("before", "after"))
    result = "No held-out set (num_heldout 0): not evaluated." if summary["accuracy_before"] is None else (
        f"Greedy held-out accuracy {summary['accuracy_before']:.1%} before RL, {summary['accuracy_after']:.1%} after "
        f"{summary['steps']} step{'s' if summary['steps'] != 1 else ''} (best {summary['best_accuracy']:.1%} at step "
        f"{summary['best_step']}), on "
        f"{summary['heldout_size']} held-out prompts scored by `{heldout_reward}`; mean reward {mean_before} before, "
        f"{mean_after} after. Accuracy counts the completions whose reward is exactly 1."
    )
    cite = f"Cite the method as:\n\n```bibtex\n{citation}\n```\n\n" if citation else ""
    content = f"""---
{metadata.to_yaml()}
---

# {summary["name"]}

{kind} {base_policy}, trained with {method}, on {data} (`trl-zoo train`, built on
[TRL](https://github.com/huggingface/trl)).

## Held-out result

{result}

## Training

{table}

## Use

```python
{imports}from transformers import AutoModelForCausalLM, AutoTokenizer

{load}
tokenizer = AutoTokenizer.from_pretrained({base_path})
```

### Framework versions

- trl_zoo: {_version("trl-zoo")}
- TRL: {_version("trl")}
- Transformers: {_version("transformers")}
- PEFT: {_version("peft")}
- PyTorch: {_version("torch")}

## Citations

{cite}TRL: von Werra et al., "TRL: Transformers Reinforcement Learning", https://github.com/huggingface/trl (2020).
"""
    return ModelCard(content)
