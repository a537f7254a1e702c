"""How many threads `trl-zoo train` gives torch on a CPU.

`trl grpo` runs through accelerate's launcher, which gives a CPU process one thread (OMP_NUM_THREADS=1) unless
told otherwise; a plain Python process gets one torch thread per physical core. On a CPU that other jobs also
use, those threads wait for one another at every parallel region while one of them is descheduled, and a step
takes several times longer (measured: benchmarks/cpu_threads.py). The policy is the launcher's: one thread, when
no GPU trains and the user set no thread count. OMP_NUM_THREADS (or MKL_NUM_THREADS), from the shell or a config
file's `env:` block, always wins.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

CPU_THREADS = 1  # accelerate's launcher's choice for a CPU process, so a run matches `trl grpo`'s
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def physical_cores() -> int:
    """Physical cores this process may run on (psutil's count, capped by the CPU affinity mask)."""
    import psutil

    cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        cores = min(cores, len(os.sched_getaffinity(0)))
    return max(1, cores)


def cpu_thread_count(environ: Mapping[str, str], uses_gpu: bool) -> int | None:
    """The torch thread count for a run: None (leave torch's) when a GPU trains or a thread variable is not a whole
    number ≥ 1; the variable's value when the user set one; else the policy's `CPU_THREADS`."""
    if uses_gpu:
        return None
    for name in THREAD_VARIABLES:
        if environ.get(name):
            value = environ[name].strip()
            return int(value) if value.isdigit() and int(value) >= 1 else None
    return CPU_THREADS


def apply_cpu_threads(use_cpu: bool) -> int | None:
    """Set torch's thread count by `cpu_thread_count` for this process; returns the count set, or None."""
    threads = cpu_thread_count(os.environ, uses_gpu=not use_cpu and torch.accelerator.is_available())
    if threads is not None:
        torch.set_num_threads(threads)
    return threads
