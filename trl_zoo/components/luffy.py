"""Component: LUFFY's expert traces as off-policy rollouts of each prompt's group (arXiv:2504.14945; the loss:
`trl_zoo/losses/luffy.py`).

With `loss_type="luffy"`, in every training round the first N_off (`luffy_off_policy_rows`) completions of each
prompt's group of G are replaced by that prompt's expert trace from `expert_column`, so the group holds N_off expert
traces and G − N_off of the policy's completions, as in the authors' code (its `n_prefix` traces first in each group,
`max_prefix_ratio=1.0`: the whole trace).

Where. The substitution happens at `generate`, around TRL's `_generate` (its tokenized prompts, completion ids and
decoded completions), before TRL does anything else with the round: TRL's reward call then scores the traces with the
reward functions like any completion, its completion mask, old log-probs (trl_zoo's `old_logps`) and the estimator's
advantages (`advantages`) all see the mixed group, and nothing downstream knows a row was not sampled. A row's
slot in its group is its place in TRL's gathered order (process-major, G consecutive rows a group: TRL's own
grouping of the rewards), so the choice needs no collective. The trace is tokenized as CHORD's answers are
(`components/expert_sft.answer_tokens`: the policy's tokenizer, no special tokens, then EOS, cut at
`max_completion_length`) and decoded for the reward functions as TRL decodes a completion (special tokens skipped;
a chat prompt's completion as one assistant message). A row whose trace is None or blank ('' or whitespace) keeps its
own completion; a number is its text (`dataset_values.expert_answer`).

At the end of the round (`generated_round`) the batch gains ``off_policy``, a (B,) bool per row, which travels
with its row (a row entry, `batch_layout.py`) to the loss, which reads it from `PolicyBatch.extras`. Evaluation
rounds pass straight through (no flag: the loss is the clipped GRPO term). No collective is added: under DDP every
process runs TRL's same calls, and the loss reuses the trainer's one policy forward.

Not carried over: TRL's completion-length metrics of the round are those of the sampled completions (measured inside
`_generate`), and the N_off sampled completions of each group are generated, then dropped. Refused (one line each):
vLLM (no sampler log-probs of the traces for TRL's importance-sampling correction: at the config),
`dynamic_sampling="adaptive_budget"` (its rounds are not groups of G rows in a row, which the slots assume: at the
config, `samplers/adaptive_budget.py`), tools, custom rollouts and images (the traces are plain text completions: at
the first round).

Tests: tests/test_luffy.py, tests/test_luffy_multiprocess.py (two DDP processes, a group spanning both).
"""

from __future__ import annotations

import torch

from ..hooks.component import Component
from ..hooks.trl_access import as_generate_result, generate_result
from ..losses.luffy import OFF_POLICY
from .expert_sft import answer_tokens


class Luffy(Component):
    """Puts LUFFY's expert traces into the first N_off slots of each group and flags their rows (module docstring)."""

    name = "luffy"

    def __init__(self, trainer):
        super().__init__(trainer)
        args = trainer.args
        self.active = args.loss_type == "luffy"
        self.column = args.expert_column
        self.off_policy_rows = getattr(args, "luffy_off_policy_rows", 1)
        self._rows: list | None = None  # TRL's input rows of the training round being generated
        self._flag: torch.Tensor | None = None  # its rows' off-policy flags, set at `generate`

    def slots(self, rows: int) -> torch.Tensor:
        """(rows,) bool: the rows of this process in the first N_off slots of their group (TRL's gathered order)."""
        trainer = self.trainer
        first = trainer.accelerator.process_index * rows
        positions = (torch.arange(rows) + first) % trainer.num_generations
        return positions < self.off_policy_rows

    def generated_round(self, inner, inputs) -> dict:
        if not self.trainer.model.training:
            return inner(inputs)
        self._rows, self._flag = inputs, None
        try:
            batch = inner(inputs)
            flag = self._flag
        finally:
            self._rows, self._flag = None, None
        if flag is None or flag.numel() != batch["completion_ids"].size(0):
            raise RuntimeError("luffy: the round's completions do not match the rows its expert traces were put in.")
        batch[OFF_POLICY] = flag.to(batch["completion_ids"].device)
        return batch

    def generate(self, inner, prompts):
        output = inner(prompts)
        rows = self._rows
        if rows is None:  # evaluation, or a generation outside a training round
            return output
        result = generate_result(output)
        completion_ids, completions = result["completion_ids"], result["completions"]
        if result["tool_mask"] is not None or result["extra_fields"] or result["images"] is not None or any(
            result["tool_images"] or ()
        ):
            raise NotImplementedError(
                "loss_type='luffy': expert traces replace plain text completions; tools, custom rollouts and images "
                "are not supported."
            )
        if result["logprobs"] is not None:
            raise NotImplementedError("loss_type='luffy': the expert traces have no sampler log-probs; use_vllm=False")
        if len(rows) != len(completion_ids):
            raise RuntimeError("luffy: the round's input rows do not match its completions.")
        slots = self.slots(len(rows)).tolist()
        answers = [row.get(self.column) if slot else None for row, slot in zip(rows, slots)]
        traces = answer_tokens(self.trainer, answers)
        placed = [row for row, tokens in enumerate(traces) if tokens is not None]
        completion_ids, completions = list(completion_ids), list(completions)
        texts = self.trainer.processing_class.batch_decode([traces[row] for row in placed], skip_special_tokens=True)
        for row, text in zip(placed, texts):
            completion_ids[row] = traces[row]
            completions[row] = [{"role": "assistant", "content": text}] if isinstance(completions[row], list) else text
        flag = torch.zeros(len(rows), dtype=torch.bool)
        flag[placed] = True
        self._flag = flag
        return as_generate_result({**result, "completion_ids": completion_ids, "completions": completions})
