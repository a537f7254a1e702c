"""Where a generation batch's time goes: torch's profiler around one `_generate_and_score_completions` of a size-ladder
configuration (`lib/ladder_run.py`'s trainer), after one unprofiled batch; prints the operators by self CUDA time and
by self CPU time, and the seconds per decoded token.

    python benchmarks/decode_profile.py --contender trl_best --shape qwen2.5-1.5b --completion_length 32
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.ladder_run import build_trainer, parse_args  # noqa: E402


def main(argv=None):
    options = parse_args(argv)
    trainer = build_trainer(options)
    trainer.model.train()
    completions = options.prompts * options.num_generations
    prompts = trainer.train_dataset["prompt"][:options.prompts]
    batch = [{"prompt": prompt} for prompt in prompts for _ in range(options.num_generations)]
    assert len(batch) == completions
    trainer._generate_and_score_completions(batch)
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        start = time.perf_counter()
        trainer._generate_and_score_completions(batch)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    print(f"PROFILE {options.contender} {options.shape}: {seconds:.2f} s a batch, "
          f"{1000 * seconds / options.completion_length:.1f} ms a decoded token")
    table = prof.key_averages()
    print(table.table(sort_by="self_cuda_time_total", row_limit=14, max_name_column_width=60))
    print(table.table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))


if __name__ == "__main__":
    main()
