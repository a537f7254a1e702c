"""TRL's generation buffer and its old-log-prob condition, in the config's numbers alone: written once here, for the
config's checks and for the door (`hooks/trl_access.py`), which applies them to a trainer's TRL state. TRL 1.16's
`GRPOTrainer` writes both inline:

- the buffer (`_prepare_inputs`): in training, TRL generates a generation batch, cuts it into `steps_per_generation`
  micro-batches and buffers them; micro-step k trains on buffer entry k mod steps_per_generation, and TRL generates
  again when k is a multiple of the generation cycle, steps_per_generation × num_iterations (or when it holds no
  buffer, as after a resume);
- old log-probs (`_generate_and_score_completions`): TRL computes them for the whole generation batch unless every
  micro-batch is trained by the weights that generated it (gradient_accumulation_steps a multiple of the cycle), and
  always under vLLM's importance-sampling correction.

Tests: tests/test_old_logps_skip.py, tests/test_length_bucketing.py, tests/test_resume.py.
"""

from __future__ import annotations


def generation_cycle(args) -> int:
    """Micro-steps per generation batch: steps_per_generation × num_iterations."""
    return args.steps_per_generation * args.num_iterations


def inside_generation_cycle(args, micro_step: int) -> bool:
    """Whether training micro-step `micro_step` falls inside a generation cycle (TRL trains on its buffer then, if it
    holds one) rather than at its start (TRL generates)."""
    return micro_step % generation_cycle(args) != 0


def buffer_entry(args, micro_step: int) -> int:
    """The buffered micro-batch that training micro-step `micro_step` trains on."""
    return micro_step % args.steps_per_generation


def entries_trained_on_policy(args, micro_step: int) -> list[bool]:
    """Per buffer entry of a buffer built at training micro-step `micro_step`: whether it is trained in that
    micro-step's optimizer step (micro-step s ≥ `micro_step` trains on entry `buffer_entry(args, s)`, one a
    micro-step, and optimizer step s // gradient_accumulation_steps)."""
    first = buffer_entry(args, micro_step)
    accumulation = args.gradient_accumulation_steps
    step_of_generation = micro_step // accumulation
    return [
        entry >= first and (micro_step + entry - first) // accumulation == step_of_generation
        for entry in range(args.steps_per_generation)
    ]


def generation_on_policy(args) -> bool:
    """Whether every micro-batch is trained by the weights that generated it: gradient_accumulation_steps a multiple of
    the generation cycle (TRL: the generation falls at the end of a full optimizer step)."""
    return args.gradient_accumulation_steps % generation_cycle(args) == 0


def vllm_correction_on(args) -> bool:
    """Whether TRL corrects for the difference between vLLM's sampling and the trained model (importance sampling)."""
    return bool(args.use_vllm and args.vllm_importance_sampling_correction)


def old_logps_pass_runs(args) -> bool:
    """Whether TRL's `_generate_and_score_completions` computes old log-probs: not every micro-batch on-policy, or
    vLLM's importance-sampling correction on."""
    return not generation_on_policy(args) or vllm_correction_on(args)
