"""The quickstart's base policy, bootstrapped offline: a tiny causal LM briefly supervised on the task.

    L(θ) = − (1/|A|) Σ_{t ∈ answer+eos} log π_θ(y_t | y_<t)       (prompt tokens carry no loss)

AdamW steps run until greedy accuracy on a probe of training prompts reaches a target (half, by default), which
leaves the model partially competent: where RL has signal to work with. The result is saved with `save_pretrained` (model and
tokenizer) in a cache directory (`$TRL_ZOO_CACHE`, default ~/.cache/trl_zoo) under a name that encodes the task
and the recipe, and later runs load it from there like any other local model.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .arithmetic import AdditionTask
from .evaluation import greedy_accuracy
from .tiny import build_char_tokenizer, build_tiny_causal_lm

CACHE_ENV = "TRL_ZOO_CACHE"
_FORMAT_VERSION = 1  # bump when the bootstrap procedure changes, so stale caches are not reused


@dataclass(frozen=True)
class BootstrapRecipe:
    """Architecture and supervised budget of the bootstrapped policy (deterministic for a given seed).

    Supervision stops at the first check (every `check_every` steps) where greedy accuracy on a probe of training
    prompts reaches `target_accuracy`, or after `max_steps`. Small models learn addition in a sudden transition,
    so a fixed step count lands at very different accuracies as numerics vary; a target does not. The held-out
    split is never used for this decision.
    """

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    target_accuracy: float = 0.5
    max_steps: int = 1500
    check_every: int = 25
    probe_size: int = 500
    batch_size: int = 256
    learning_rate: float = 5e-3
    seed: int = 0

    def cache_name(self, task: AdditionTask) -> str:
        return (
            f"{task.name}-d{task.digits}-s{task.seed}-h{self.hidden_size}-l{self.num_layers}-a{self.num_heads}"
            f"-acc{self.target_accuracy:g}-max{self.max_steps}-b{self.batch_size}-lr{self.learning_rate:g}"
            f"-seed{self.seed}-v{_FORMAT_VERSION}"
        )


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "trl_zoo")


def _encode(tokenizer, task: AdditionTask, pairs) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded prompt+answer+eos ids and labels (-100 on the prompt and on padding)."""
    rows, label_rows = [], []
    for a, b in pairs:
        prompt_ids = tokenizer(task.prompt(a, b), add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(str(a + b), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(prompt_ids + answer_ids)
        label_rows.append([-100] * len(prompt_ids) + answer_ids)
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    for i, (row, label_row) in enumerate(zip(rows, label_rows)):
        ids[i, : len(row)] = torch.tensor(row)
        labels[i, : len(label_row)] = torch.tensor(label_row)
    return ids, labels


def supervise(model, tokenizer, task: AdditionTask, recipe: BootstrapRecipe, log: Callable = print) -> dict:
    """Run the supervised warm-up in place until the probe accuracy reaches the target; returns what happened."""
    device = next(model.parameters()).device
    ids, labels = (tensor.to(device) for tensor in _encode(tokenizer, task, task.train_pairs))
    attention_mask = (ids != tokenizer.pad_token_id).long()
    probe = task.train_pairs[: recipe.probe_size]
    probe_prompts = [task.prompt(a, b) for a, b in probe]
    probe_answers = [str(a + b) for a, b in probe]
    generator = torch.Generator().manual_seed(recipe.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=0.0)
    warmup = max(1, recipe.max_steps // 50)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    model.train()
    step, loss, probe_accuracy = 0, float("nan"), 0.0
    while step < recipe.max_steps:
        index = torch.randint(len(ids), (recipe.batch_size,), generator=generator).to(device)
        output = model(input_ids=ids[index], attention_mask=attention_mask[index], labels=labels[index])
        output.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        step, loss = step + 1, output.loss.item()
        if step % recipe.check_every == 0:
            probe_accuracy = greedy_accuracy(
                model, tokenizer, probe_prompts, task.max_completion_length, reward_kwargs={"answer": probe_answers}
            )
            log(f"  bootstrap step {step}: supervised loss {loss:.3f}, probe accuracy {probe_accuracy:.1%}")
            if probe_accuracy >= recipe.target_accuracy:
                break
    model.eval()
    return {"steps": step, "final_loss": loss, "probe_accuracy": probe_accuracy}


def bootstrap_policy(
    task: AdditionTask, recipe: BootstrapRecipe = BootstrapRecipe(), cache: Path | None = None, log: Callable = print
) -> Path:
    """Directory of the bootstrapped policy (model + tokenizer), building and caching it on first use."""
    target = Path(cache or cache_root()) / recipe.cache_name(task)
    if (target / "bootstrap.json").exists():
        log(f"Using the cached base policy in {target}")
        return target
    log(f"Bootstrapping a tiny base policy for {task.name!r} (supervised until {recipe.target_accuracy:.0%} on a probe) ...")
    started = time.perf_counter()
    tokenizer = build_char_tokenizer()
    model = build_tiny_causal_lm(
        tokenizer,
        hidden_size=recipe.hidden_size,
        num_layers=recipe.num_layers,
        num_heads=recipe.num_heads,
        max_positions=64,
        seed=recipe.seed,
    )
    torch.manual_seed(recipe.seed)
    if torch.cuda.is_available():  # a GPU makes the harder tasks' bootstrap quick; on a CPU it stays bit-reproducible
        model.to("cuda")
    outcome = supervise(model, tokenizer, task, recipe, log)
    heldout = task.heldout_dataset()
    accuracy = greedy_accuracy(
        model, tokenizer, heldout["prompt"], task.max_completion_length, reward_kwargs={"answer": heldout["answer"]}
    )
    seconds = time.perf_counter() - started
    log(f"Bootstrapped in {seconds:.1f} s ({outcome['steps']} steps): held-out greedy accuracy {accuracy:.1%}")

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    model.cpu().save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    summary = {"task": task.name, "recipe": asdict(recipe), **outcome, "heldout_accuracy": accuracy, "seconds": seconds}
    (staging / "bootstrap.json").write_text(json.dumps(summary, indent=2))
    try:
        staging.rename(target)
    except OSError:  # another process finished the same bootstrap first: use theirs
        shutil.rmtree(staging, ignore_errors=True)
    return target
