"""Count the host-synchronising calls of one loss step (compute_loss + backward), TRL vs trl_zoo, per loss.

On a GPU every call below waits for the device and copies a value to the host: `.item()`, `.tolist()`, `.cpu()`,
`bool()` / `int()` / `float()` of a tensor, `nonzero()`. They are counted by wrapping those methods, which is exact
and device-independent, so it runs on a CPU too (where the same calls exist but cost nothing). A count is an upper
bound on the syncs a GPU would see: a call on a tensor that already lives on the host counts as well.

    python benchmarks/host_syncs.py --losses grpo,dapo,gspo,reinforce,ppo_kl,clip_cov,kl_cov --shape tiny

Prints one JSON line per (implementation, loss) and a Markdown table.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.step_benchmark import parse_args as step_arguments  # noqa: E402
from benchmarks.step_benchmark import prepare  # noqa: E402

SYNCING_METHODS = ("item", "tolist", "cpu", "__bool__", "__int__", "__float__", "nonzero")
TRL_LOSSES = {"grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"}


@contextlib.contextmanager
def counting_syncs():
    """Yield a Counter of syncing method calls made inside the block."""
    counts = collections.Counter()
    originals = {name: getattr(torch.Tensor, name) for name in SYNCING_METHODS}

    def wrap(name, method):
        def counted(self, *args, **kwargs):
            counts[name] += 1
            return method(self, *args, **kwargs)

        return counted

    for name, method in originals.items():
        setattr(torch.Tensor, name, wrap(name, method))
    try:
        yield counts
    finally:
        for name, method in originals.items():
            setattr(torch.Tensor, name, method)


def count_loss_step(implementation: str, loss_type: str, step_argv: list[str]) -> dict:
    options = step_arguments(["--implementation", implementation, "--loss_type", loss_type, *step_argv])
    trainer, micro_batch = prepare(options)
    trainer.compute_loss(trainer.model, micro_batch).backward()  # warm-up: one-time checks and caches
    trainer.model.zero_grad(set_to_none=True)
    with counting_syncs() as counts:
        trainer.compute_loss(trainer.model, micro_batch).backward()
    return {"implementation": implementation, "loss_type": loss_type, "syncs": sum(counts.values()), **counts}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--losses", default="grpo,dapo,gspo,gmpo,reinforce,ppo_kl,clip_cov,kl_cov")
    options, step_argv = parser.parse_known_args(argv)
    step_argv = step_argv or ["--shape", "tiny", "--prompt_length", "16", "--completion_length", "16"]
    rows = []
    for loss_type in options.losses.split(","):
        for implementation in ("trl", "zoo") if loss_type in TRL_LOSSES else ("zoo",):
            row = count_loss_step(implementation, loss_type, step_argv)
            print("RESULT " + json.dumps(row), flush=True)
            rows.append(row)
    print("\n| loss | TRL | trl_zoo | trl_zoo by call |\n|---|---|---|---|")
    for loss_type in options.losses.split(","):
        counts = {row["implementation"]: row for row in rows if row["loss_type"] == loss_type}
        zoo = counts["zoo"]
        detail = ", ".join(f"{name} {zoo[name]}" for name in SYNCING_METHODS if zoo.get(name))
        print(f"| {loss_type} | {counts['trl']['syncs'] if 'trl' in counts else '—'} | {zoo['syncs']} | {detail} |")


if __name__ == "__main__":
    main()
