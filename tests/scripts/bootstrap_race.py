"""Worker for tests/test_cache_lock.py: bootstrap the same tiny policy into one cache folder (argv[2]) as the other
processes started with it, then load it. Run on two processes by `accelerate launch` (with the process group created
first, as `trl-zoo train` creates it while parsing its arguments) or as two plain processes started together.

The process that builds holds its build until another process says it is waiting for the entry (at most
`HOLD_S` seconds), so the processes really do meet at the entry. Writes, as JSON to argv[1] (one file for a launch,
written by rank 0 with every process's report; one per plain process): each process's log lines, whether it loaded
the entry's model and tokenizer, and the sum of the loaded weights."""

from __future__ import annotations

import faulthandler
import os
import sys
import time
from pathlib import Path

import torch

from tests.two_processes import WORKER_TIMEOUT_S, write_result

HOLD_S = 60
RECIPE = dict(hidden_size=32, num_layers=1, num_heads=2, max_steps=4, check_every=2, slip_steps=2, batch_size=16,
              probe_size=8)


def main(output_path: str, cache: str):
    distributed = "RANK" in os.environ
    if distributed:
        from accelerate import PartialState

        PartialState()  # the process group exists before the bootstrap, as in `trl-zoo train`
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import trl_zoo.tasks.bootstrap as bootstrap
    from trl_zoo.tasks import get_task

    logs_dir = Path(cache) / "logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    own_log = logs_dir / f"{os.getpid()}.log"
    lines = []

    def log(line: str):
        lines.append(line)
        with own_log.open("a") as handle:
            handle.write(line + "\n")

    supervise = bootstrap.supervise

    def supervise_when_the_others_wait(*args, **kwargs):
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline and not any(
            "Waiting for another process" in path.read_text() for path in logs_dir.glob("*.log") if path != own_log
        ):
            time.sleep(0.1)
        return supervise(*args, **kwargs)

    bootstrap.supervise = supervise_when_the_others_wait
    path = bootstrap.bootstrap_policy(get_task("addition"), bootstrap.BootstrapRecipe(**RECIPE), Path(cache), log)
    model = AutoModelForCausalLM.from_pretrained(path)
    AutoTokenizer.from_pretrained(path)
    report = {"logs": lines, "weight_sum": sum(p.double().sum().item() for p in model.parameters()),
              "files": sorted(os.listdir(path))}
    if distributed:
        reports = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(reports, report)
        if torch.distributed.get_rank() == 0:
            write_result(output_path, {"processes": reports})
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    else:
        write_result(output_path, {"processes": [report]})


if __name__ == "__main__":
    faulthandler.dump_traceback_later(WORKER_TIMEOUT_S, exit=True)
    main(*sys.argv[1:])
