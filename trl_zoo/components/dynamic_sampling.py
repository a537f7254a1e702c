"""Component: dynamic sampling (`dynamic_sampling`, formulas in `trl_zoo/samplers/`).

The pipeline's `generation_batch` hook point (`hooks/generation.py`) hands the inputs TRL drew to the sampler from the
sampler table through a session that generates lazily: reading its rounds lets TRL generate and score those inputs
(the hook point's `inner`: one round, with the per-round hook points: values, advantages); a sampler that filters
prompts before generation (`greso`) instead draws prompt batches (gathered from all processes) and picks the rows of
each round itself. Every round reads the task rewards of the whole batch (all processes) from its `ScoredRound`
(`task_rewards()`, checked by the reward seam, `components/rewards.py`). Samplers may ask for more rounds: their
prompts come from a stream of its own over the training set (TRL's `RepeatSampler` with one repeat, seeded with
`seed + 1`), each process taking its slice of a generation batch as the training dataloader does. Without a sampler
the batch is TRL's, and `informative_share` and `generated_per_trained` are logged from the same rewards (one host
transfer per generation batch). The kept groups are then moved to their place in the new batch: every tensor is
padded to the widest process (prompts on the left, completions on the right), gathered, and each process takes its
`generation_batch_size / num_processes` rows, so every process ends with the same number of rows and the groups stay
whole. Columns that are padding in every local row are trimmed, and `num_items_in_batch` is recomputed over the kept
tokens of all processes. Old, reference and sampling log-probs travel with their rows; when rounds differ in prompt
width a row's left padding changes, which leaves rotary-position models unchanged (attention depends on relative
positions) up to float rounding. Advantages are those of the round a group was generated in: exact for per-group
estimators; batch-level statistics (`scale_rewards="batch"`) come from that round. Multimodal inputs cannot be
regrouped yet (use `reweight`).

A sampler that assembles its batch row by row (`adaptive_budget`: a prompt's completions come from several rounds)
calls `assemble_rows` and returns the batch's group structure (`SampledBatch.regrouped`); its advantages are then
computed again here over those groups of unequal size (`regrouped_advantages`: the estimator of
`advantage_estimator`, TRL's grpo when None, on the rows' total rewards with `AdvantageInputs.group_sizes`, 0 for
filler rows), replacing those of the rounds, whose groups of G consecutive rows were not the prompts' groups (what
the rounds logged of their advantages and reward spread is theirs).
Tests: tests/test_sampling.py, tests/test_sampling_multiprocess.py, tests/test_adaptive_budget.py,
tests/test_adaptive_budget_multiprocess.py.
"""

from __future__ import annotations

import copy
import itertools

import torch
from accelerate.utils import gather_object
from datasets import IterableDataset
from trl.trainer.utils import RepeatSampler, repeat_iterable_dataset

from ..advantages import AdvantageInputs
from ..hooks.batch_layout import batch_layouts, trim_padding
from ..hooks.component import Component
from ..hooks.model_inputs import loss_mask
from ..hooks.trl_access import log_metric, pad_token_id, without_unused_columns
from ..registry import SAMPLERS
from ..samplers.base import Regrouped, Round, group_reward_spread, sampling_metrics

PROMPT_BATCHES_DRAWN = "dynamic_sampling/prompt_batches_drawn"  # state key: position in the prompt stream


class DynamicSampling(Component):
    """`dynamic_sampling` (see the module docstring); without a sampler, the sampling metrics of TRL's one round."""

    name = "dynamic_sampling"

    def __init__(self, trainer):
        super().__init__(trainer)
        name = trainer.args.dynamic_sampling
        self.sampler = SAMPLERS.get(name).fn if name else None  # the sampler table's function, or None
        self._prompt_stream = None  # the sampler's own generation batches, made on first use

    def owns_state(self, key: str) -> bool:
        """Its own keys ("dynamic_sampling/...") and the sampler's ("<sampler>/...")."""
        owner = key.split("/", 1)[0]
        return owner == self.name or owner in SAMPLERS.names()

    # ------------------------------------------------------------------ dynamic sampling
    def generation_batch(self, inner, inputs) -> dict:
        trainer = self.trainer
        if not trainer.model.training:
            return inner(inputs).batch
        if self.sampler is None:
            scored = inner(inputs)
            spread = group_reward_spread(scored.task_rewards(), trainer.num_generations)
            groups, informative = spread.numel(), int(spread.sum())
            for name, value in sampling_metrics(groups, informative, informative, trainer.num_generations).items():
                log_metric(trainer, name, value)
            return scored.batch
        session = TrainerSamplingSession(trainer, self, inputs, inner)
        sampled = self.sampler(session, trainer.args)
        if sampled.regrouped is not None:
            sampled.batch["advantages"] = self.regrouped_advantages(sampled.batch, sampled.regrouped)
        for name, value in sampled.metrics.items():
            log_metric(trainer, name, value)
        return sampled.batch

    def regrouped_advantages(self, batch: dict, regrouped: Regrouped) -> torch.Tensor:
        """This process's advantages of a batch regrouped row by row: the estimator (`advantage_estimator`, TRL's
        grpo when None) over the trained rows and their groups of unequal size, 0 for the fillers."""
        trainer = self.trainer
        mask = loss_mask(batch)
        local_rows, local_length = mask.shape
        global_mask = trainer.accelerator.gather(trainer.accelerator.pad_across_processes(mask, dim=1, pad_index=0))
        trained = regrouped.trained.to(global_mask.device)
        if not bool(trained.any()):  # fillers only: nothing is trained on
            return torch.zeros(local_rows, device=mask.device)
        inputs = AdvantageInputs(
            rewards=regrouped.rewards.to(global_mask.device)[trained],
            num_generations=trainer.num_generations,
            mask=global_mask[trained],
            group_sizes=regrouped.group_sizes,
        )
        estimated = trainer.pipeline.get("advantages").estimate(inputs)
        advantages = estimated.new_zeros((global_mask.size(0), *estimated.shape[1:]))
        advantages[trained] = estimated
        start = trainer.accelerator.process_index * local_rows
        local = advantages[start : start + local_rows]
        return local[:, :local_length] if local.dim() == 2 else local

    def next_prompt_batch(self) -> list:
        """This process's slice of the next generation batch of the sampler's own prompt stream."""
        drawn = self.state.get(PROMPT_BATCHES_DRAWN, 0)
        if self._prompt_stream is None:  # a resumed run skips what the checkpointed run drew (the state is saved)
            self._prompt_stream = self._local_generation_batches(skip=drawn)
        self.state[PROMPT_BATCHES_DRAWN] = drawn + 1
        return [dict(row) if isinstance(row, dict) else row for row in next(self._prompt_stream)]

    def _local_generation_batches(self, skip: int = 0):
        trainer = self.trainer
        dataset = trainer.train_dataset
        size = trainer.args.generation_batch_size
        local = size // trainer.accelerator.num_processes
        start = trainer.accelerator.process_index * local
        prompts_per_batch = size // trainer.num_generations
        if isinstance(dataset, IterableDataset):
            source = dataset.shuffle(seed=trainer.args.seed + 1) if trainer.shuffle_dataset else dataset
            for epoch in itertools.count():
                if hasattr(source, "set_epoch"):
                    source.set_epoch(epoch)
                repeated = repeat_iterable_dataset(source, trainer.num_generations, prompts_per_batch, repeat_count=1)
                rows, produced = [], False
                for row in repeated:
                    rows.append(row)
                    if len(rows) == size:
                        produced = True
                        if skip:
                            skip -= 1
                        else:
                            yield rows[start : start + local]
                        rows = []
                if not produced:
                    raise ValueError(_too_small_message(prompts_per_batch))
        if hasattr(dataset, "column_names"):
            dataset = without_unused_columns(trainer, dataset, description="Training")
        sampler = RepeatSampler(
            dataset,
            mini_repeat_count=trainer.num_generations,
            batch_size=prompts_per_batch,
            repeat_count=1,
            shuffle=trainer.shuffle_dataset,
            seed=trainer.args.seed + 1,
        )
        while True:
            indices = list(sampler)  # one epoch; the sampler's generator reshuffles on every pass
            if not indices:
                raise ValueError(_too_small_message(prompts_per_batch))
            for offset in range(0, len(indices), size):
                if skip:
                    skip -= 1
                    continue
                batch_indices = indices[offset : offset + size][start : start + local]
                rows = {i: dataset[i] for i in dict.fromkeys(batch_indices)}  # each prompt read once, not G times
                yield [copy.deepcopy(rows[i]) for i in batch_indices]


def _too_small_message(prompts_per_batch: int) -> str:
    return (
        f"dynamic_sampling: the training set holds fewer than {prompts_per_batch} prompts, one generation batch "
        f"(generation_batch_size / num_generations); add prompts or lower generation_batch_size."
    )


class TrainerSamplingSession:
    """The `SamplingSession` of one training generation batch (see `trl_zoo.samplers.base.SamplingSession`)."""

    def __init__(self, trainer, sampling: DynamicSampling, first_inputs, score_round):
        self.trainer = trainer
        self.accelerator = trainer.accelerator
        self._score_round = score_round  # one round of inputs → its `ScoredRound` (the hook point's inner)
        self._prompt_batches = sampling.next_prompt_batch
        self.group_size = trainer.num_generations
        self.num_groups = trainer.args.generation_batch_size // self.group_size
        self.state = sampling.state  # the sampler's own keys, "<sampler>/...", kept with dynamic sampling's
        self.local_size = len(first_inputs)
        self._first_inputs = first_inputs  # not generated until a sampler reads `rounds` or draws them
        self._rounds: list[Round] = []

    @property
    def rounds(self) -> list[Round]:
        if self._first_inputs is not None:
            self.generate_round()
        return self._rounds

    def draw_prompts(self) -> list:
        return gather_object([dict(row) for row in self._next_local_inputs()])

    def generate_round(self, rows: list | None = None) -> Round:
        if rows is None:
            return self._score(self._next_local_inputs())
        start = self.accelerator.process_index * self.local_size
        return self._score(rows[start : start + self.local_size])

    def _next_local_inputs(self) -> list:
        inputs, self._first_inputs = self._first_inputs, None
        return inputs if inputs is not None else self._prompt_batches()

    def _score(self, inputs) -> Round:
        scored = self._score_round(inputs)
        batch, rewards = scored.batch, scored.task_rewards().cpu()
        spread = group_reward_spread(rewards, self.group_size)
        start = self.accelerator.process_index * self.local_size
        local_groups = torch.arange(start, start + self.local_size) // self.group_size
        group_reward = rewards.view(-1, self.group_size).nanmean(dim=1)
        total = scored.total_rewards().cpu()
        self._rounds.append(
            Round(batch, spread, local_groups, group_reward, rewards.nanmean().item(), rewards, total)
        )
        return self._rounds[-1]

    # ------------------------------------------------------------------ moving rows
    def assemble(self, picks: list[tuple[int, int]]) -> dict:
        if picks == [(0, group) for group in range(self.num_groups)]:
            return self.rounds[0].batch  # nothing dropped: TRL's batch as it is
        return self.assemble_rows(
            [(index, group * self.group_size + k) for index, group in picks for k in range(self.group_size)]
        )

    def assemble_rows(self, order: list[tuple[int, int]]) -> dict:
        size = self.local_size
        mine = order[self.accelerator.process_index * size : (self.accelerator.process_index + 1) * size]
        used = sorted({index for index, _ in order})  # the same on every process: collectives stay matched
        keys = list(self.rounds[0].batch)
        for scored in self.rounds:
            if list(scored.batch) != keys:
                raise ValueError(
                    f"dynamic_sampling: rounds returned different batch keys: {keys} vs {list(scored.batch)}."
                )
        layouts = self._layouts([key for key in keys if key != "num_items_in_batch"])
        batch = {}
        for key, (side, pad_value) in layouts.items():
            pieces = {}
            for index in used:
                tensor = self.rounds[index].batch[key]
                if side != "row":
                    tensor = self.accelerator.pad_across_processes(
                        tensor, dim=1, pad_index=pad_value, pad_first=side == "left"
                    )
                pieces[index] = self.accelerator.gather(tensor)
            batch[key] = _stack_rows(pieces, mine, side, pad_value)
        self._trim_padding(batch, layouts)
        batch["num_items_in_batch"] = self.accelerator.gather(loss_mask(batch).sum()).sum()
        return batch

    def _layouts(self, keys) -> dict[str, tuple[str, object]]:
        """key -> (side, pad value), see `trl_zoo.hooks.batch_layout.batch_layouts`."""
        return batch_layouts(
            [scored.batch for scored in self.rounds],
            keys,
            self.local_size,
            pad_token_id(self.trainer),
            self.trainer.vllm_importance_sampling_mode.startswith("token"),
            ("dynamic_sampling='resample' cannot regroup", "use dynamic_sampling='reweight'"),
        )

    def _trim_padding(self, batch, layouts):
        """Drop columns that are padding in every local row (as TRL's own padding would have produced)."""
        trim_padding(batch, layouts, pad_token_id(self.trainer), self.trainer.pad_to_multiple_of)


def _stack_rows(pieces: dict[int, torch.Tensor], mine, side: str, pad_value) -> torch.Tensor:
    """Rows `mine` = [(round, global row)] taken from the gathered `pieces`, padded to a common width."""
    first = next(iter(pieces.values()))
    shape = list(first.shape)
    shape[0] = len(mine)
    if side != "row":
        shape[1] = max(piece.size(1) for piece in pieces.values())
    out = torch.full(shape, pad_value if pad_value is not None else 0, dtype=first.dtype, device=first.device)
    for index, piece in pieces.items():
        positions = [position for position, (source, _) in enumerate(mine) if source == index]
        if not positions:
            continue
        rows = piece[torch.tensor([row for source, row in mine if source == index], device=piece.device)]
        target = torch.tensor(positions, device=piece.device)
        if side == "left":
            out[target, shape[1] - rows.size(1) :] = rows
        elif side == "right":
            out[target, : rows.size(1)] = rows
        else:
            out[target] = rows
    return out
