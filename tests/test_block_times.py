"""BlockTimes: TRL's profiled blocks summed per nesting path and optimizer step (CPU; no wall-clock asserts beyond
order: an outer block lasts at least as long as the blocks inside it)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from trl.extras import profiling

from benchmarks.lib.block_times import BlockTimes


@pytest.fixture
def restore_profiling():
    enter, exit_ = profiling.ProfilingContext.__enter__, profiling.ProfilingContext.__exit__
    yield
    profiling.ProfilingContext.__enter__, profiling.ProfilingContext.__exit__ = enter, exit_


class FakeTrainer:
    def __init__(self):
        self.args = SimpleNamespace(report_to=[])
        self.accelerator = SimpleNamespace(is_main_process=True)
        self.state = SimpleNamespace(global_step=0)

    @profiling.profiling_decorator
    def _get_per_token_logps_and_entropies(self):
        time.sleep(0.002)

    @profiling.profiling_decorator
    def _prepare_inputs(self):
        with profiling.profiling_context(self, "transformers.generate"):
            time.sleep(0.002)
        self._get_per_token_logps_and_entropies()  # the old log-probs

    @profiling.profiling_decorator
    def compute_loss(self):
        self._get_per_token_logps_and_entropies()  # the training forward


def test_blocks_are_summed_per_nesting_path_and_step(restore_profiling):
    times = BlockTimes()
    times.install()
    trainer = FakeTrainer()
    for step in range(2):
        trainer.state.global_step = step
        trainer._prepare_inputs()
        trainer.compute_loss()
        trainer.compute_loss()
    record = times.as_record()
    assert set(record) == {
        "_prepare_inputs", "_prepare_inputs > transformers.generate",
        "_prepare_inputs > _get_per_token_logps_and_entropies", "compute_loss",
        "compute_loss > _get_per_token_logps_and_entropies",
    }
    assert all(list(steps) == ["0", "1"] for steps in record.values())
    seconds = {path: {str(step): s for step, s in steps.items()} for path, steps in times.seconds.items()}
    assert record == {path: {step: round(s, 4) for step, s in steps.items()} for path, steps in seconds.items()}
    for step in ("0", "1"):  # order on the unrounded sums: two summands rounded up may pass their rounded outer block
        inner = seconds["_prepare_inputs > transformers.generate"][step] + seconds[
            "_prepare_inputs > _get_per_token_logps_and_entropies"][step]
        assert seconds["_prepare_inputs"][step] >= inner > 0
        forward = seconds["compute_loss > _get_per_token_logps_and_entropies"][step]
        assert seconds["compute_loss"][step] >= forward >= 0.004
