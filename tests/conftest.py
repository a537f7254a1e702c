"""Test-wide settings: one intra-op thread (tiny models are far faster single-threaded on a shared 2-core box)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)
