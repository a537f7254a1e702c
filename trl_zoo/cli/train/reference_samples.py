"""A*-PO's reference samples for a `trl-zoo train` run (`--reference_reward_samples K`): before training, K
completions of every training prompt sampled from the reference policy and scored with the run's rewards, into the
column `reference_rewards` that `advantage_estimator="a2po"` reads (`trl_zoo.sample_reference_rewards`,
`io/reference_rewards.py`; V*(x): `advantages/a2po.py`).

    with_reference_rewards(train, model, tokenizer, functions, K, training_args)  ->  (train with the column, cost)

The reference is the policy before training, loaded from its path (with LoRA, the base the adapter is added to);
the prompts are those the trainer will render (after `policy_prompts`), the rewards the run's own, unshuffled
(the null-reward control shuffles only what training sees), weighted by `reward_weights`, at the run's
temperature and completion length. The cost is the sampling's: K × prompts completions and their seconds, logged in
one line and written to `<output_dir>/reference_rewards.json` (a line first where `max_steps` draws fewer prompts
than the set holds: `--train_prompts` samples only those), so a comparison with a run that samples nothing can
count it. The column is kept there too (with a CRC32 of the prompts it belongs to), and a run that resumes from a
checkpoint reads it back rather than sampling again, when it holds the same prompts and K (a line says so). One
process: a launch would sample a different column in each, so it is refused (sample once and give the dataset's
own column instead). Without an estimator that reads the column the field is refused.

Tests: tests/test_reference_samples.py.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from pathlib import Path

import torch

from ...config.generation_buffer import generation_cycle
from ...dataset_values import REFERENCE_REWARDS
from ...io.reference_rewards import sample_reference_rewards
from ...trainer import reads_reference_rewards
from ..errors import ConfigError

COST_FILE = "reference_rewards.json"
SAMPLING_PROMPTS = 128  # prompts a generate call samples K completions of


def check_reference_samples(samples: int, training_args) -> None:
    """A one-line ConfigError for a count the run cannot use (module docstring)."""
    if samples < 0:
        raise ConfigError(f"reference_reward_samples: must be ≥ 0 (0: none), got {samples}.")
    if samples and not reads_reference_rewards(training_args):
        raise ConfigError(
            f"reference_reward_samples: only an estimator that reads {REFERENCE_REWARDS} uses the samples "
            f"(advantage_estimator a2po), and this run's is {training_args.advantage_estimator!r}; drop the flag."
        )
    if samples and training_args.world_size > 1:
        raise ConfigError(
            "reference_reward_samples: each process of a launch would sample its own column; sample it once "
            "(trl_zoo.sample_reference_rewards), save the dataset and train on it."
        )


def prompts_drawn(training_args) -> int | None:
    """How many prompts a run of `max_steps` draws (None without max_steps): one generation batch every
    steps_per_generation × num_iterations micro-steps, generation_batch_size / num_generations prompts each."""
    if training_args.max_steps <= 0:
        return None
    micro_steps = training_args.max_steps * training_args.gradient_accumulation_steps
    batches = math.ceil(micro_steps / generation_cycle(training_args))
    return batches * training_args.generation_batch_size // training_args.num_generations


def with_reference_rewards(train, model, tokenizer, functions, samples: int, training_args, log=print):
    """(`train` with the column `reference_rewards`, the cost record); `model` is the reference."""
    drawn = prompts_drawn(training_args)
    if drawn is not None and drawn < len(train):
        log(f"reference_reward_samples: sampling all {len(train)} training prompts; max_steps "
            f"{training_args.max_steps} draws about {drawn} of them, and --train_prompts {drawn} samples only those.")
    started = time.perf_counter()
    torch.manual_seed(training_args.seed)
    train = sample_reference_rewards(
        model, tokenizer, train, list(functions), num_samples=samples,
        max_completion_length=training_args.max_completion_length, temperature=training_args.temperature,
        batch_size=SAMPLING_PROMPTS, reward_weights=training_args.reward_weights,
        nan_rewards=training_args.nan_rewards,
    )
    cost = {"prompts": len(train), "samples_per_prompt": samples, "completions": len(train) * samples,
            "seconds": time.perf_counter() - started}
    log(f"reference_reward_samples: {cost['completions']} reference completions ({samples} of each of "
        f"{cost['prompts']} prompts) sampled and scored before training in {cost['seconds']:.0f} s "
        f"({COST_FILE}).")
    return train, cost


def prompts_crc(train) -> int:
    """CRC32 of the training prompts in order: which data a kept column belongs to."""
    return zlib.crc32(json.dumps(list(train["prompt"]), sort_keys=True).encode())


def kept_column(path: Path, train, samples: int) -> list | None:
    """The column an earlier start of this run kept at `path`, if it belongs to these prompts and this K."""
    if not path.is_file():
        return None
    kept = json.loads(path.read_text())
    same = (kept.get("samples_per_prompt"), kept.get("prompts_crc")) == (samples, prompts_crc(train))
    return kept.get("rewards") if same and len(kept.get("rewards") or []) == len(train) else None


def add_reference_rewards(train, model_path: str, tokenizer, functions, samples: int, training_args, model_args,
                          log=print, resumed: bool = False):
    """`train` with the column sampled from the policy at `model_path` (on the GPU when there is one), or, for a
    `resumed` run, the one its start kept; the cost and the column written to `<output_dir>/reference_rewards.json`."""
    from transformers import AutoModelForCausalLM

    output_dir = Path(training_args.output_dir)
    kept = kept_column(output_dir / COST_FILE, train, samples) if resumed else None
    if kept is not None:
        log(f"reference_reward_samples: the resumed run reads back the {len(train)} × {samples} reference rewards "
            f"its start sampled ({COST_FILE} holds their cost).")
        given = [REFERENCE_REWARDS] if REFERENCE_REWARDS in train.column_names else []
        return train.remove_columns(given).add_column(REFERENCE_REWARDS, kept)

    model = AutoModelForCausalLM.from_pretrained(
        model_path, revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code,
    ).to("cuda" if torch.cuda.is_available() else "cpu")
    try:
        train, cost = with_reference_rewards(train, model, tokenizer, functions, samples, training_args, log)
    finally:
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    output_dir.mkdir(parents=True, exist_ok=True)
    kept = {**cost, "prompts_crc": prompts_crc(train), "rewards": list(train[REFERENCE_REWARDS])}
    (output_dir / COST_FILE).write_text(json.dumps(kept))
    return train
