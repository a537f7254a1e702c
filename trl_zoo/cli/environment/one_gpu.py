"""`trl-zoo train` run plainly on a machine with several GPUs trains on one of them.

TRL's trainer refuses `nn.DataParallel`, which transformers' `Trainer` uses when one process sees several GPUs, so
the README's main command would stop there. When the process was not started by a distributed launcher and more
than one GPU is visible, the CLI keeps only the first visible GPU (`CUDA_VISIBLE_DEVICES`, set before torch
initialises CUDA) and says so in one line, with the command that uses them all. A distributed launch (`accelerate
launch` with several processes, `torchrun`) is left alone: it gives each process its own GPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping

import torch

ALL_GPUS_COMMAND = (
    "accelerate launch --config_file configs/accelerate/ddp.yaml --num_processes {count} -m trl_zoo.cli {command} ..."
)


def launched_distributed(environ: MutableMapping[str, str]) -> bool:
    """Whether a distributed launcher started this process (torchrun and `accelerate launch` set LOCAL_RANK and
    WORLD_SIZE on every process they start, also on a one-process launch)."""
    return "LOCAL_RANK" in environ or "WORLD_SIZE" in environ


def one_gpu_choice(environ: MutableMapping[str, str], device_count: int) -> str | None:
    """The CUDA_VISIBLE_DEVICES value that leaves only the first visible GPU, or None to change nothing (launched
    distributed, or at most one GPU visible)."""
    if launched_distributed(environ) or device_count <= 1:
        return None
    visible = environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return visible.split(",")[0].strip() if visible else "0"


def use_one_gpu_unless_launched(
    environ: MutableMapping[str, str] = os.environ, log: Callable = print, command: str = "train"
) -> str | None:
    """Keep one GPU visible when several are and no launcher started this process; the value set, or None.
    `command` (train, compare) goes into the line that says how to use every GPU.

    Call it before anything initialises CUDA: `torch.cuda.device_count()` reads NVML without initialising CUDA and
    honours a later change of CUDA_VISIBLE_DEVICES, which an initialised CUDA would ignore (then nothing is changed
    and TRL's own error about `nn.DataParallel` stands)."""
    if torch.cuda.is_initialized():
        return None
    count = torch.cuda.device_count()
    choice = one_gpu_choice(environ, count)
    if choice is not None:
        environ["CUDA_VISIBLE_DEVICES"] = choice
        all_gpus = ALL_GPUS_COMMAND.format(count=count, command=command)
        log(
            f"trl-zoo: {count} GPUs visible and no distributed launch: training on one "
            f"(CUDA_VISIBLE_DEVICES={choice}). To use all {count}: {all_gpus}"
        )
    return choice
