"""What torch compiled in this process, for a benchmark's record (compiled decoding).

    {"unique_graphs": 1, "recompiles": 0, "cudagraph_skips": 0,
     "seconds": {"entire_frame_compile": 6.4, "bytecode_tracing": 4.3, ...}}

`cudagraph_skips` counts graphs that run their traced code without CUDA graphs; `seconds` sums dynamo's
`compile_times` per compile phase (tracing, guards, the backend's compile or cache load), which tell where a
compiled run's first step goes.
"""

from __future__ import annotations


def compile_counts() -> dict:
    from torch._dynamo.utils import compile_times, counters

    phases, seconds = compile_times(repr="csv", aggregate=True)
    return {"unique_graphs": counters["stats"]["unique_graphs"], "recompiles": counters["recompiles"].total(),
            "cudagraph_skips": counters["inductor"]["cudagraph_skips"],
            "seconds": {phase: round(float(value), 3) for phase, value in zip(phases, seconds)}}
