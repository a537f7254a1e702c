"""The generation seam (`trl_zoo/hooks/generation.py`): its hook points run in their stated order for every round and
generation batch, a round's rewards reach the hooks in its `ScoredRound` and nothing of it stays on the trainer, and
every extra no-grad pass over a generation batch runs under TRL's `profiling_context`."""

import pytest
import torch

import trl_zoo
from tests.tiny import make_trainer
from tests.trl_internals import generate_and_score
from trl_zoo.hooks import generation


class RecordingPipeline:
    """The trainer's pipeline, recording each hook point of the generation seam once its components have run."""

    def __init__(self, pipeline, trainer):
        self.pipeline, self.trainer = pipeline, trainer

    def get(self, name):
        return self.pipeline.get(name)

    def chain(self, point, value):
        return self.pipeline.chain(point, value)

    def event(self, point, *args):
        hook = point.name
        before = args[0].batch["advantages"].clone() if hook == "replace_advantages" else None
        self.pipeline.event(point, *args)
        calls, (argument,) = self.trainer.calls, args
        if hook == "before_advantages":
            calls.append(("before", "old_values" in argument.batch))
        elif hook == "replace_advantages":
            calls.append(("replace", not torch.equal(before, argument.batch["advantages"])))
        elif hook == "after_advantages":
            calls.append(("after", "value_targets" in argument.batch))
            self.trainer.rounds.append(argument)
        elif hook == "on_generation_batch":
            calls.append(("whole batch", argument["completion_ids"].size(0)))

    def wrap(self, point, innermost):
        hook, call = point.name, self.pipeline.wrap(point, innermost)

        def recorded(*args, **kwargs):
            result = call(*args, **kwargs)
            if hook == "scored_rewards":
                self.trainer.calls.append(("rewards", tuple(result.shape)))
            elif hook == "generation_batch":
                self.trainer.calls.append(("batch", result["completion_ids"].size(0)))
            return result

        return recorded


class Recording(trl_zoo.GRPOTrainer):
    """Records each hook point of the generation seam as it runs (after its components)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pipeline = RecordingPipeline(self.pipeline, self)


@pytest.fixture
def passes(monkeypatch):
    """The names under which extra passes over a generation batch ran in TRL's profiling context."""
    names = []
    profiling = generation.profiling_context

    def recording(trainer, name):
        names.append(name)
        return profiling(trainer, name)

    monkeypatch.setattr(generation, "profiling_context", recording)
    return names


def generate(trainer):
    torch.manual_seed(0)
    trainer.model.train()
    trainer.calls, trainer.rounds = [], []
    return generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))


def test_hook_points_run_in_order_and_a_round_leaves_nothing_on_the_trainer(passes):
    trainer = make_trainer(Recording, trl_zoo.GRPOConfig, advantage_estimator="gae")  # the critic's head
    batch = generate(trainer)
    rows = batch["completion_ids"].size(0)
    assert trainer.calls == [
        ("rewards", (rows, 1)),  # every process's rows (one here), one reward function
        ("before", True),  # V_old is in the batch before the estimator runs
        ("replace", True),  # GAE replaced TRL's advantages
        ("after", True),  # value targets after them
        ("batch", rows),
        ("whole batch", rows),
    ]
    (scored,) = trainer.rounds
    torch.testing.assert_close(scored.advantage_inputs.rewards, scored.total_rewards())
    assert scored.advantage_inputs.values.shape == batch["completion_mask"].shape
    assert trainer._round_rewards is None
    assert not hasattr(trainer, "rewards_per_func") and not hasattr(trainer, "last_advantage_inputs")
    assert passes == ["critic_values"]


def test_resample_hands_every_round_to_the_round_hook_points(passes):
    trainer = make_trainer(
        Recording, trl_zoo.GRPOConfig, dynamic_sampling="resample", dynamic_sampling_max_rounds=3,
        reward_funcs=[lambda completions, **kwargs: [float(len(c) % 2) for c in completions]],
    )
    generate(trainer)
    kinds = [kind for kind, _ in trainer.calls]
    rounds = len(trainer.rounds)
    assert rounds >= 1 and kinds == ["rewards", "before", "replace", "after"] * rounds + ["batch", "whole batch"]
    assert passes == []  # no estimator, critic or MoE loss: no extra pass


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (dict(advantage_estimator="optimal_baseline"), ["score_sq_norms"]),
        (dict(kl_placement="reward", beta=0.05), ["reward_kl_logps"]),  # on-policy: TRL kept no old log-probs
    ],
)
def test_extra_passes_run_under_trls_profiling_context(passes, overrides, expected):
    trainer = make_trainer(Recording, trl_zoo.GRPOConfig, **overrides)
    generate(trainer)
    assert passes == expected
