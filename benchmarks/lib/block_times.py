"""Where a training step's time goes: TRL's own profiled blocks, summed per optimizer step and nesting path.

TRL times its main blocks with `trl.extras.profiling.ProfilingContext` (`profiling_context`, `profiling_decorator`):
`_prepare_inputs` (on a generating step: generation, rewards and the old log-probs), `transformers.generate`,
`_calculate_rewards`, `_get_per_token_logps_and_entropies` and `compute_loss`. It sends each duration to a tracker
only. `BlockTimes.install()` makes every such block also add its duration here, under its nesting path (so the
old log-probs, `_prepare_inputs > _get_per_token_logps_and_entropies`, are apart from the training forward,
`compute_loss > _get_per_token_logps_and_entropies`) and the optimizer step it ran in. The device is synchronised
when a block begins and ends, so a block's time includes its queued kernels; that adds a few synchronisations per
micro-batch, hence it is opt-in (`time_to_target_run.py --profile_blocks`).

    record["block_seconds"] = {"_prepare_inputs": {"0": 26.1, "2": 1.5, ...}, "_prepare_inputs > ...": {...}, ...}

keys of the inner dicts are the `global_step` a block began at (0 is the first optimizer step).
"""

from __future__ import annotations

import time
from collections import defaultdict


class BlockTimes:
    def __init__(self):
        self.seconds: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        self._stack: list[str] = []

    def install(self) -> None:
        """Patch TRL's ProfilingContext class-wide (one run per process)."""
        import torch
        from trl.extras import profiling

        times = self
        cuda = torch.cuda.is_available()

        def enter(context):
            if cuda:
                torch.cuda.synchronize()
            times._stack.append(context.name.split(".", 1)[-1])
            context._start_time = time.perf_counter()
            return context

        def exit_(context, *exc):
            if cuda:
                torch.cuda.synchronize()
            duration = time.perf_counter() - context._start_time
            times.seconds[" > ".join(times._stack)][context.step or 0] += duration
            times._stack.pop()
            context._log_metrics(duration)
            return False

        profiling.ProfilingContext.__enter__ = enter
        profiling.ProfilingContext.__exit__ = exit_

    def as_record(self) -> dict[str, dict[str, float]]:
        return {path: {str(step): round(s, 4) for step, s in sorted(steps.items())}
                for path, steps in self.seconds.items()}
