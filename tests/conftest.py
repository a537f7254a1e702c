"""Test-wide settings: one intra-op thread (tiny models are far faster single-threaded on a shared 2-core box), and
the longest files collected first, so that the two workers (pyproject's `-n 2 --dist loadfile`: each file runs
whole on one) do not end with one of them alone on a long file."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

# the files that took 100 s or more on 2 cores (pytest --durations), longest first; the rest keep their order
LONGEST_FIRST = ("test_time_to_target.py", "test_fsdp_multiprocess.py", "test_real_model.py",
                 "test_critic_multiprocess.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
