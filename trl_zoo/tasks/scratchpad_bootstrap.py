"""A from-scratch base policy for the scratchpad task: supervised on worked solutions, then given a carry-slip habit.

    L(θ) = − (1/|C|) Σ_{t ∈ completion+eos} log π_θ(y_t | y_<t)       (prompt tokens carry no loss)

Phase 1 supervises on right worked solutions (scratchpad.py) until greedy accuracy on a probe of training prompts
reaches `target_accuracy` at a check, or `max_steps`. Phase 2 runs `slip_steps` more steps at `slip_learning_rate`
on demonstrations in which every carry is forgotten with probability `carry_slip_rate`, drawn afresh per carry, row
and batch: the policy keeps the algorithm and acquires the slip as a habit (greedy accuracy drops, sampling still
finds right answers), which is what RL with a verifier should remove. The held-out split decides nothing.

`SCALES` sizes the model: "cpu" (0.3 M parameters, the 1-3-digit task) and "gpu" (29.5 M parameters, the 1-7-digit
task; at most 3000 steps of 256 sequences); how long each takes: docs/benchmarks.md, "Mechanism testbed". The
result is cached like the quickstart's policy (`bootstrap.cache_root()`), under a name that encodes the task and the
recipe.

Tests: tests/test_testbed_task.py (demonstration batches, a CPU bootstrap that learns, the cache).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ..io.cache_lock import build_once
from ..io.policy_cache import cache_root, save_policy, write_policy
from .bootstrap import is_policy_entry, supervised_step, time_to_go, warmup_cosine_learning_rate
from .evaluation import greedy_accuracy, greedy_completions
from .scratchpad import SCRATCHPAD, SCRATCHPAD_SMALL, ScratchpadAdditionTask, carried_columns, worked_solution
from .tiny import build_char_tokenizer, build_tiny_causal_lm

_FORMAT_VERSION = 1


@dataclass(frozen=True)
class ScratchpadRecipe:
    """Architecture, supervised budget and slip habit of the scratchpad base policy (deterministic for a seed)."""

    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    target_accuracy: float = 0.9
    max_steps: int = 2000
    check_every: int = 100
    carry_slip_rate: float = 0.5
    slip_steps: int = 100
    slip_learning_rate: float = 1e-3
    probe_size: int = 256
    batch_size: int = 128
    learning_rate: float = 3e-3
    seed: int = 0

    def learned_cache_name(self, task: ScratchpadAdditionTask) -> str:
        """The phase-1 policy's name: several slip habits start from one learned policy."""
        return (
            f"{task.name}-d{task.min_digits}-{task.max_digits}-s{task.seed}-h{self.hidden_size}-l{self.num_layers}"
            f"-a{self.num_heads}-acc{self.target_accuracy:g}-max{self.max_steps}-b{self.batch_size}"
            f"-lr{self.learning_rate:g}-seed{self.seed}-v{_FORMAT_VERSION}"
        )

    def cache_name(self, task: ScratchpadAdditionTask) -> str:
        return (f"{self.learned_cache_name(task)}-slip{self.carry_slip_rate:g}x{self.slip_steps}"
                f"@{self.slip_learning_rate:g}")


SCALES: dict[str, tuple[ScratchpadAdditionTask, ScratchpadRecipe]] = {
    "cpu": (SCRATCHPAD_SMALL, ScratchpadRecipe(carry_slip_rate=0.7)),
    "gpu": (
        SCRATCHPAD,
        ScratchpadRecipe(hidden_size=640, num_layers=8, num_heads=10, max_steps=3000, batch_size=256,
                         learning_rate=1e-3, slip_learning_rate=3e-4, slip_steps=150),
    ),
}


def scale_setup(scale: str, seed: int = 0) -> tuple[ScratchpadAdditionTask, ScratchpadRecipe]:
    if scale not in SCALES:
        raise ValueError(f"scale: got {scale!r}; use one of {', '.join(SCALES)}.")
    task, recipe = SCALES[scale]
    return task, replace(recipe, seed=seed)


def scratchpad_recipe(task: ScratchpadAdditionTask, seed: int = 0) -> ScratchpadRecipe:
    """The recipe of the scale whose task this is (the CLI's built-in scratchpad tasks), with `seed`."""
    for scale_task, recipe in SCALES.values():
        if scale_task == task:
            return replace(recipe, seed=seed)
    raise ValueError(f"task: no bootstrap recipe for {task.name!r}; give --model_name_or_path.")


def _batch(tokenizer, task: ScratchpadAdditionTask, pairs, slip_rate: float, rng: random.Random, width: int):
    """Right-padded prompt+solution+eos ids and labels (-100 on the prompt and padding); each carry forgotten with
    probability `slip_rate`."""
    vocab = tokenizer.get_vocab()
    ids = torch.full((len(pairs), width), tokenizer.pad_token_id)
    labels = torch.full((len(pairs), width), -100)
    for row, (a, b) in enumerate(pairs):
        digits = task.digits_of(a)
        forget = [column for column in carried_columns(a, b, digits) if rng.random() < slip_rate]
        prompt = [vocab[char] for char in task.prompt(a, b)]
        completion = [vocab[char] for char in worked_solution(a, b, digits, forget)] + [tokenizer.eos_token_id]
        ids[row, : len(prompt) + len(completion)] = torch.tensor(prompt + completion)
        labels[row, len(prompt) : len(prompt) + len(completion)] = torch.tensor(completion)
    return ids, labels


def probe_accuracy(model, tokenizer, task: ScratchpadAdditionTask, pairs) -> float:
    prompts = [task.prompt(a, b) for a, b in pairs]
    said = greedy_completions(model, tokenizer, prompts, task.max_completion_length)
    return sum(task.reward(said, [str(a + b) for a, b in pairs])) / len(pairs)


def supervise(
    model, tokenizer, task: ScratchpadAdditionTask, recipe: ScratchpadRecipe, log: Callable = print,
    learned: bool = False, after_learning: Callable = lambda model: None,
) -> dict:
    """Phase 1 until the probe accuracy reaches the target (skipped when `learned`: the model already went through
    it), `after_learning(model)`, then phase 2 (the slip habit); returns what happened."""
    device = next(model.parameters()).device
    rng = random.Random(recipe.seed)
    width = 2 * task.max_digits + 2 + task.max_completion_length
    probe = task.train_pairs[: recipe.probe_size]
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, betas=(0.9, 0.95), weight_decay=0.0)
    def step(slip_rate: float, lr: float) -> float:
        pairs = rng.choices(task.train_pairs, k=recipe.batch_size)
        ids, labels = (tensor.to(device) for tensor in _batch(tokenizer, task, pairs, slip_rate, rng, width))
        return supervised_step(model, optimizer, ids, labels, tokenizer.pad_token_id, lr)

    model.train()
    steps, loss, accuracy = 0, float("nan"), 0.0
    started = time.perf_counter()
    while steps < recipe.max_steps and not learned:
        loss = step(0.0, warmup_cosine_learning_rate(steps, recipe.learning_rate, recipe.max_steps))
        steps += 1
        if steps % recipe.check_every == 0:
            accuracy = probe_accuracy(model, tokenizer, task, probe)
            log(f"  bootstrap step {steps}/{recipe.max_steps}: supervised loss {loss:.3f}, probe accuracy "
                f"{accuracy:.1%} ({time_to_go(time.perf_counter() - started, steps, recipe)})")
            if accuracy >= recipe.target_accuracy:
                break
    if not learned:
        after_learning(model)
    for _ in range(recipe.slip_steps if recipe.carry_slip_rate > 0 else 0):
        loss = step(recipe.carry_slip_rate, recipe.slip_learning_rate)
    slip_accuracy = probe_accuracy(model, tokenizer, task, probe)
    log(f"  after {recipe.slip_steps} steps forgetting {recipe.carry_slip_rate:.0%} of carries: probe accuracy "
        f"{slip_accuracy:.1%}")
    model.eval()
    return {"steps": steps, "final_loss": loss, "probe_accuracy_learned": accuracy, "probe_accuracy": slip_accuracy}


def build_scratchpad_model(tokenizer, recipe: ScratchpadRecipe):
    return build_tiny_causal_lm(tokenizer, hidden_size=recipe.hidden_size, num_layers=recipe.num_layers,
                                num_heads=recipe.num_heads, max_positions=128, seed=recipe.seed)


def bootstrap_scratchpad_policy(
    task: ScratchpadAdditionTask, recipe: ScratchpadRecipe, cache: Path | None = None, log: Callable = print
) -> Path:
    """Directory of the bootstrapped policy (model + tokenizer), building and caching it on first use (once, however
    many processes ask at the same time: `cache_lock.build_once`)."""
    target = Path(cache or cache_root()) / recipe.cache_name(task)
    if is_policy_entry(target):
        log(f"Using the cached base policy in {target}")
        return target
    return build_once(target, lambda staging: _build_policy(task, recipe, target, staging, log), is_policy_entry, log)


def _build_policy(task: ScratchpadAdditionTask, recipe: ScratchpadRecipe, target: Path, folder: Path, log: Callable):
    """Bootstrap the policy of `recipe` (from the cached phase-1 policy when there is one) and write it into
    `folder`; the phase-1 policy is cached on the way (its own entry, built once)."""
    started = time.perf_counter()
    learned_dir = target.parent / recipe.learned_cache_name(task)
    learned = (learned_dir / "config.json").is_file()
    if learned:
        log(f"Giving the slip habit to the learned policy in {learned_dir}")
        tokenizer = AutoTokenizer.from_pretrained(learned_dir)
        model = AutoModelForCausalLM.from_pretrained(learned_dir)
    else:
        tokenizer = build_char_tokenizer()
        model = build_scratchpad_model(tokenizer, recipe)
        log(f"Bootstrapping a {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M-parameter policy for "
            f"{task.name!r}: at most {recipe.max_steps} supervised steps, then {recipe.slip_steps} on sloppy "
            "demonstrations; once, then cached ...")
    torch.manual_seed(recipe.seed)
    if torch.cuda.is_available():
        model.to("cuda")
    outcome = supervise(
        model, tokenizer, task, recipe, log, learned,
        after_learning=lambda model: save_policy(model, tokenizer, learned_dir, log),
    )
    heldout = task.heldout_dataset()
    accuracy = greedy_accuracy(model, tokenizer, heldout["prompt"], task.max_completion_length, reward=task.reward,
                               reward_kwargs={"answer": heldout["answer"]})
    seconds = time.perf_counter() - started
    log(f"Bootstrapped in {seconds:.1f} s: held-out greedy accuracy {accuracy:.1%}")
    summary = {"task": task.name, "recipe": asdict(recipe), **outcome, "heldout_accuracy": accuracy,
               "seconds": seconds}
    write_policy(model, tokenizer, folder, {"bootstrap.json": json.dumps(summary, indent=2)})
