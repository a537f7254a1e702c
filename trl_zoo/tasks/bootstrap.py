"""The quickstart's base policy, bootstrapped offline: a tiny causal LM supervised on imperfect demonstrations.

    L(θ) = − (1/|A|) Σ_{t ∈ answer+eos} log π_θ(y_t | y_<t)       (prompt tokens carry no loss)

The demonstrations make a human slip: where the units digits carry (7 + 8 = 15), a fraction `carry_slip_rate` of
the answers forget the carry in the tens digit (47+38= "75" instead of "85"; the slipped sum is a + b − 10). The slip
is drawn afresh for every row of every batch, so the policy knows how to add *and* has the slip as a habit: on
carried sums it says the wrong tens digit more often than the right one, but samples the right one often enough for
a verifier to notice. That is the situation RL with verifiable rewards is good at — turning what a policy can sample
into what it says (pass@k into pass@1) — and it leaves room to measure: held-out greedy accuracy starts low, and
the fix (always carry) generalises to unseen sums.

Phase 1 supervises on right sums until greedy accuracy on a probe of training prompts reaches a target: small
models learn addition in a sudden transition, so a fixed step count would land anywhere on it; a target does not.
Phase 2 is a short run on the sloppy demonstrations, which turns the slip into a habit. The held-out split is never
used for either decision. The result is saved with
`save_pretrained` (model and tokenizer) in a cache directory (`$TRL_ZOO_CACHE`, default ~/.cache/trl_zoo) under a
name that encodes the task and the recipe, and later runs load it from there like any other local model.

Tests: tests/test_quickstart.py (train, cache, reuse; the carry slip; the target check), tests/test_cache_lock.py
(concurrent builds), tests/test_learning.py.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..io.cache_lock import build_once
from ..io.policy_cache import cache_root, write_policy
from .arithmetic import AdditionTask
from .evaluation import greedy_accuracy, greedy_completions
from .tiny import build_char_tokenizer, build_tiny_causal_lm

_FORMAT_VERSION = 2  # bump when the bootstrap procedure changes, so stale caches are not reused


@dataclass(frozen=True)
class BootstrapRecipe:
    """Architecture, demonstrations and supervised budget of the bootstrapped policy (deterministic for a seed).

    Phase 1 (learn to add) supervises on right sums until greedy accuracy on a probe of training prompts reaches
    `target_accuracy` at a check (every `check_every` steps), or `max_steps`. Phase 2 (the habit) runs `slip_steps`
    more steps at `slip_learning_rate` on demonstrations in which `carry_slip_rate` of the carried sums forget the
    carry (0: clean demonstrations, no habit).
    """

    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    target_accuracy: float = 0.95
    max_steps: int = 1500
    check_every: int = 50
    carry_slip_rate: float = 0.8
    slip_steps: int = 100
    slip_learning_rate: float = 1e-3
    probe_size: int = 500
    batch_size: int = 256
    learning_rate: float = 5e-3
    weight_decay: float = 0.0
    adam_beta2: float = 0.95
    seed: int = 0

    def cache_name(self, task: AdditionTask) -> str:
        return (
            f"{task.name}-d{task.digits}-s{task.seed}-h{self.hidden_size}-l{self.num_layers}-a{self.num_heads}"
            f"-acc{self.target_accuracy:g}-max{self.max_steps}-b{self.batch_size}-lr{self.learning_rate:g}"
            f"-slip{self.carry_slip_rate:g}x{self.slip_steps}@{self.slip_learning_rate:g}-seed{self.seed}"
            f"-v{_FORMAT_VERSION}"
        )




def slipped_sum(a: int, b: int) -> int:
    """a + b with the units carry forgotten in the tens digit (a + b − 10 where the units digits carry)."""
    return a + b - 10 if a % 10 + b % 10 >= 10 else a + b


def _encode(tokenizer, task: AdditionTask, pairs, answer=lambda a, b: a + b, width: int = 0):
    """Right-padded prompt+answer+eos ids and labels (-100 on the prompt and on padding), at least `width` wide."""
    rows, label_rows = [], []
    for a, b in pairs:
        prompt_ids = tokenizer(task.prompt(a, b), add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(str(answer(a, b)), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(prompt_ids + answer_ids)
        label_rows.append([-100] * len(prompt_ids) + answer_ids)
    width = max(width, *(len(row) for row in rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    for i, (row, label_row) in enumerate(zip(rows, label_rows)):
        ids[i, : len(row)] = torch.tensor(row)
        labels[i, : len(label_row)] = torch.tensor(label_row)
    return ids, labels


def demonstrations(
    tokenizer, task: AdditionTask, pairs
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, labels) of the right answers and (ids, labels) of the slipped ones, row-aligned and equally wide."""
    width = task.digits * 2 + 2 + task.max_completion_length  # "a+b=" plus the longest answer and eos
    return (*_encode(tokenizer, task, pairs, width=width), *_encode(tokenizer, task, pairs, slipped_sum, width))


def _probe(model, tokenizer, task: AdditionTask, pairs) -> tuple[float, float]:
    """(share of greedy answers that are right, share that are the slipped sum) on `pairs`."""
    prompts = [task.prompt(a, b) for a, b in pairs]
    said = [text.strip() for text in greedy_completions(model, tokenizer, prompts, task.max_completion_length)]
    right = sum(text == str(a + b) for text, (a, b) in zip(said, pairs))
    slipped = sum(text == str(slipped_sum(a, b)) != str(a + b) for text, (a, b) in zip(said, pairs))
    return right / len(pairs), slipped / len(pairs)


def supervise(model, tokenizer, task: AdditionTask, recipe: BootstrapRecipe, log: Callable = print) -> dict:
    """Phase 1 until the probe accuracy reaches the target, then phase 2 (the slip habit); returns what happened."""
    device = next(model.parameters()).device
    right_ids, right_labels, slip_ids, slip_labels = (
        tensor.to(device) for tensor in demonstrations(tokenizer, task, task.train_pairs)
    )
    probe = task.train_pairs[: recipe.probe_size]
    generator = torch.Generator().manual_seed(recipe.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=recipe.learning_rate, betas=(0.9, recipe.adam_beta2), weight_decay=recipe.weight_decay
    )
    def step(slip_rate: float, learning_rate: float) -> float:
        index = torch.randint(len(right_ids), (recipe.batch_size,), generator=generator).to(device)
        slip = (torch.rand(recipe.batch_size, generator=generator) < slip_rate).to(device)[:, None]
        ids = torch.where(slip, slip_ids[index], right_ids[index])
        labels = torch.where(slip, slip_labels[index], right_labels[index])
        return supervised_step(model, optimizer, ids, labels, tokenizer.pad_token_id, learning_rate)

    model.train()
    steps, loss, accuracy = 0, float("nan"), 0.0
    started = time.perf_counter()
    while steps < recipe.max_steps:
        loss = step(0.0, warmup_cosine_learning_rate(steps, recipe.learning_rate, recipe.max_steps))
        steps += 1
        if steps % recipe.check_every == 0:
            accuracy, _ = _probe(model, tokenizer, task, probe)
            log(
                f"  bootstrap step {steps}/{recipe.max_steps}: supervised loss {loss:.3f}, probe accuracy "
                f"{accuracy:.1%} ({time_to_go(time.perf_counter() - started, steps, recipe)})"
            )
            if accuracy >= recipe.target_accuracy:
                break
    for _ in range(recipe.slip_steps if recipe.carry_slip_rate > 0 else 0):
        loss = step(recipe.carry_slip_rate, recipe.slip_learning_rate)
    slip_accuracy, slipped = _probe(model, tokenizer, task, probe)
    if recipe.carry_slip_rate > 0:
        log(
            f"  after {recipe.slip_steps} steps on sloppy demonstrations: probe accuracy {slip_accuracy:.1%}, "
            f"{slipped:.1%} of the answers forget a carry"
        )
    model.eval()
    return {
        "steps": steps,
        "final_loss": loss,
        "probe_accuracy_learned": accuracy,
        "probe_accuracy": slip_accuracy,
        "probe_slipped": slipped,
    }


def bootstrap_policy(
    task: AdditionTask, recipe: BootstrapRecipe = BootstrapRecipe(), cache: Path | None = None, log: Callable = print
) -> Path:
    """Directory of the bootstrapped policy (model + tokenizer), building and caching it on first use.

    Processes that ask for the same entry at once (those of one distributed launch, or runs started together) build
    it once: one builds, the others wait for it (`cache_lock.build_once`)."""
    target = Path(cache or cache_root()) / recipe.cache_name(task)
    if is_policy_entry(target):
        log(f"Using the cached base policy in {target}")
        return target
    return build_once(target, lambda staging: _build_policy(task, recipe, staging, log), is_policy_entry, log)


def _build_policy(task: AdditionTask, recipe: BootstrapRecipe, folder: Path, log: Callable):
    """Bootstrap the policy of `recipe` and write it into `folder`."""
    slip_steps = recipe.slip_steps if recipe.carry_slip_rate > 0 else 0
    log(
        f"Bootstrapping a tiny base policy for {task.name!r}: supervised on right sums until it adds "
        f"({recipe.target_accuracy:.0%} of a probe, at most {recipe.max_steps} supervised steps, then {slip_steps} on "
        f"the sloppy demonstrations, which forget {recipe.carry_slip_rate:.0%} of the carries); once, then cached ..."
    )
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
    log(f"Bootstrapped in {seconds:.1f} s: held-out greedy accuracy {accuracy:.1%}")

    summary = {
        "task": task.name, "recipe": asdict(recipe), **outcome, "heldout_accuracy": accuracy, "seconds": seconds,
    }
    write_policy(model, tokenizer, folder, {"bootstrap.json": json.dumps(summary, indent=2)})


def time_to_go(elapsed: float, steps: int, recipe) -> str:
    """Elapsed time and an upper bound on the rest at the pace so far (`recipe`: either bootstrap's): phase 1 may
    stop at any check, so the remaining (max_steps − steps) + slip_steps steps are the most it can take."""
    remaining = recipe.max_steps - steps + (recipe.slip_steps if recipe.carry_slip_rate > 0 else 0)
    return f"{elapsed:.0f} s so far, at most ~{elapsed / steps * remaining:.0f} s to go"


def warmup_cosine_learning_rate(step: int, peak: float, max_steps: int) -> float:
    """Linear warm-up over max_steps/50 steps, then cosine decay to a tenth of `peak` at `max_steps`."""
    warmup = max(1, max_steps // 50)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, max_steps - warmup)
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def supervised_step(model, optimizer, ids, labels, pad_token_id: int, learning_rate: float) -> float:
    """One step of next-token cross-entropy on `labels` (-100 ignored), gradient norm clipped at 1; the loss."""
    loss = model(input_ids=ids, attention_mask=(ids != pad_token_id).long(), labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def is_policy_entry(folder: Path) -> bool:
    """Whether `folder` holds a finished policy: its model config and its bootstrap record (written last)."""
    return (folder / "config.json").is_file() and (folder / "bootstrap.json").is_file()
