"""Device time of what ran under `torch.profiler`: every kernel's time summed, the launches, the largest kernels.

    with KernelTime() as kernels:
        work()
    kernels.summary(top=12)   # {"device_s", "launches", "top": [{"kernel", "ms", "calls"}, ...]}

On a machine without CUDA the operators' CPU time stands in (the same keys), so the benchmarks that use it run
anywhere; its figures are a GPU's only on a GPU.
"""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

CUDA = torch.cuda.is_available()


class KernelTime:
    """A `torch.profiler` session over the `with` block (device synchronised at both ends)."""

    def __enter__(self):
        if CUDA:
            torch.cuda.synchronize()
        self._profile = profile(activities=[ProfilerActivity.CUDA] if CUDA else [ProfilerActivity.CPU])
        self._profile.__enter__()
        return self

    def __exit__(self, *exc):
        if CUDA:
            torch.cuda.synchronize()
        return self._profile.__exit__(*exc)

    def summary(self, top: int = 12) -> dict:
        events = self._profile.key_averages()
        if CUDA:
            kernels = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
        else:  # operators' own CPU time: their nesting would count a parent's children twice
            kernels = list(events)

        def ms(event) -> float:
            if not CUDA:
                return event.self_cpu_time_total / 1e3
            total = getattr(event, "device_time_total", None)
            return (getattr(event, "cuda_time_total", 0.0) if total is None else total) / 1e3

        kernels.sort(key=ms, reverse=True)
        return {
            "device_s": sum(ms(e) for e in kernels) / 1e3,
            "launches": sum(e.count for e in kernels),
            "top": [{"kernel": e.key[:120], "ms": round(ms(e), 2), "calls": e.count} for e in kernels[:top]],
        }
