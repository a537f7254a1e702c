"""What compiled decoding costs and saves in TRL's `model.generate` path, per configuration, one process each.

`compile_generation` (trl_zoo/components/generation_speed.py) turns on transformers' compiled decoding with a static
KV cache. This measures, on the real-model task's prompts (or the tiny model on a CPU), for each configuration:

- the first `generate` call (it pays the compile) and the median of the later ones (steady state), in seconds,
  device synchronised; new tokens per second at the steady state;
- what torch did (benchmarks/lib/compile_counts.py): graphs compiled (`unique_graphs`), recompiles, CUDA-graph skips
  (`cudagraph_skips`: a configuration that skips its graphs runs the traced decoding without them) and seconds per
  compile phase.

Configurations (`CONFIGS`): `eager` (TRL's default: a dynamic cache, not compiled), `static` (a static cache, not
compiled), `inductor` (transformers' default `CompileConfig`: generated kernels and CUDA graphs) with a cold
compile cache, `inductor_warm` (the same, a second process reusing the first one's compile cache: what a user's
second run on the same machine pays), `cudagraphs` (`compile_generation_backend="cudagraphs"`) and
`cudagraphs_mutation` (the same with torch's `cudagraph_backend_support_input_mutation` on: the static cache is
written in place at every step, an input mutation that backend may refuse to capture), and `eager_peft`,
`inductor_peft`, `inductor_peft_warm`: the model as the trainer generates with `merge_adapter_for_generation` (a
LoRA adapter merged into the weights, train mode, generating through the PEFT wrapper), to tell the wrapper's cost
from the decoding's; `eager_peft_fp32`, `inductor_peft_fp32`: the same in float32, TRL's default dtype (TRL
generates outside the training step's autocast, so its decoding runs in the weights' dtype);
`eager_peft_fp32_autocast`, `inductor_peft_fp32_autocast`: float32 weights decoding under bf16 autocast, what
`generation_autocast` does. `cuda_graph`, `cuda_graph_peft`, `cuda_graph_peft_fp32`,
`cuda_graph_peft_fp32_autocast`: the same models decoding through trl_zoo's CUDA graph of the decode step
(`compile_generation_backend="cuda_graph"`, trl_zoo/components/decode_graph.py: no torch.compile), with its counts of
captures, replays and eager steps.

Every call generates exactly `--new_tokens` tokens for `--batch` prompts (EOS suppressed by `min_new_tokens`), the
prompts of call k being the k-th slice of the task's training questions, so every configuration does the same work.

    python benchmarks/compiled_decoding.py --out DIR [--devices 0,1] [--configs eager,static,inductor,...]
    python benchmarks/compiled_decoding.py --out DIR --tiny          # CPU smoke: tiny model, eager, static, cuda_graph

Writes DIR/CONFIG.json per configuration and DIR/summary.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]


class Config(NamedTuple):
    """One configuration of the decoding measured (see the module docstring)."""

    cache_implementation: str | None
    compile: dict | None  # CompileConfig's keyword arguments; None: not compiled
    dynamo: dict = {}  # torch._dynamo.config overrides
    warm_from: str | None = None  # the configuration whose compile cache it reuses (None: a fresh, empty one)
    peft: bool = False  # as the trainer generates: a LoRA adapter (r 16, every linear layer) merged, train mode
    dtype: str | None = None  # the weights' dtype; None: bfloat16 on a GPU, float32 on the CPU
    autocast: bool = False  # generate under bf16 autocast (trl_zoo's generation_autocast)


# `Config.compile` meaning trl_zoo's CUDA graph of the decode step (trl_zoo/components/decode_graph.py), no
# torch.compile
CUDA_GRAPH = {"trl_zoo": "cuda_graph"}

CONFIGS: dict[str, Config] = {
    "eager": Config(None, None),
    "static": Config("static", None),
    "inductor": Config("static", {}),
    "inductor_warm": Config("static", {}, warm_from="inductor"),
    "cudagraphs": Config("static", {"backend": "cudagraphs", "mode": None}),
    "cudagraphs_mutation": Config(
        "static", {"backend": "cudagraphs", "mode": None}, {"cudagraph_backend_support_input_mutation": True}
    ),
    "eager_peft": Config(None, None, peft=True),
    "inductor_peft": Config("static", {}, peft=True),
    "inductor_peft_warm": Config("static", {}, warm_from="inductor_peft", peft=True),
    # the trainer's generation with TRL's default dtype (ModelConfig.dtype "float32"; generation runs outside autocast)
    "eager_peft_fp32": Config(None, None, peft=True, dtype="float32"),
    "inductor_peft_fp32": Config("static", {}, peft=True, dtype="float32"),
    # the same under `generation_autocast`: float32 weights, bf16 autocast
    "eager_peft_fp32_autocast": Config(None, None, peft=True, dtype="float32", autocast=True),
    "inductor_peft_fp32_autocast": Config("static", {}, peft=True, dtype="float32", autocast=True),
    # trl_zoo's own CUDA graph of the decode step (compile_generation_backend="cuda_graph"), no torch.compile
    "cuda_graph": Config("static", CUDA_GRAPH),
    "cuda_graph_peft": Config("static", CUDA_GRAPH, peft=True),
    "cuda_graph_peft_fp32": Config("static", CUDA_GRAPH, peft=True, dtype="float32"),
    "cuda_graph_peft_fp32_autocast": Config("static", CUDA_GRAPH, peft=True, dtype="float32", autocast=True),
}
TINY_CONFIGS = "eager,static,cuda_graph"


def load(tiny: bool, device: str, dtype: str | None = None):
    """(model, tokenizer, prompts): the packaged SmolLM2-135M-Instruct in bf16 with the chat template applied to the
    chat_arithmetic questions, or the tiny model of trl_zoo.tasks.tiny with the arithmetic task's prompts."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if tiny:
        from trl_zoo.tasks import ADDITION
        from trl_zoo.tasks.tiny import build_char_tokenizer, build_tiny_causal_lm

        tokenizer = build_char_tokenizer()
        model = build_tiny_causal_lm(tokenizer)
        prompts = list(ADDITION.train_dataset()["prompt"])
    else:
        from trl_zoo.io.gguf_checkpoint import policy_path
        from trl_zoo.tasks import CHAT_ARITHMETIC

        path = policy_path(CHAT_ARITHMETIC.default_model, None)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(device, dtype))
        prompts = [
            tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
            for q in CHAT_ARITHMETIC.train_dataset()["prompt"]
        ]
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device).eval(), tokenizer, prompts


def merged_adapter_model(model):
    """The model as trl_zoo's trainer generates with `merge_adapter_for_generation`: wrapped in a LoRA adapter (r 16,
    every linear layer, the real-model task's preset), the adapter merged into the weights, in train mode."""
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                  task_type="CAUSAL_LM"))
    peft_model.merge_adapter()
    return peft_model.train()


def torch_dtype(device: str, dtype: str | None = None):
    import torch

    if dtype is not None:
        return getattr(torch, dtype)
    return torch.bfloat16 if device.startswith("cuda") else torch.float32


def measure(name: str, args) -> dict:
    """One configuration in this process: `args.calls` timed `generate` calls and torch's compile counters."""
    import torch
    from transformers import CompileConfig, GenerationConfig

    from benchmarks.lib.compile_counts import compile_counts

    config_of = CONFIGS[name]
    cache_implementation, compile_kwargs = config_of.cache_implementation, config_of.compile
    for key, value in config_of.dynamo.items():
        setattr(torch._dynamo.config, key, value)
    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    torch.manual_seed(0)
    model, tokenizer, prompts = load(args.tiny, device, config_of.dtype)
    if config_of.peft:
        model = merged_adapter_model(model)
    config = GenerationConfig(
        do_sample=True, temperature=1.0, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        cache_implementation=cache_implementation, disable_compile=compile_kwargs is None,
    )
    graphed = compile_kwargs == CUDA_GRAPH
    if graphed:
        from trl_zoo.components import decode_graph

        step = decode_graph.install(model)
        compile_kwargs = {}
    if compile_kwargs is not None:
        config.compile_config = CompileConfig(**compile_kwargs)
        if device == "cpu":
            config.compile_config._compile_all_devices = True
    seconds = []
    for call in range(args.calls):
        batch = [prompts[(call * args.batch + i) % len(prompts)] for i in range(args.batch)]
        inputs = tokenizer(batch, return_tensors="pt", padding=True).to(device)
        sync(device)
        start = time.perf_counter()
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=config_of.autocast):
            out = model.generate(**inputs, generation_config=config)
        sync(device)
        seconds.append(time.perf_counter() - start)
        if out.shape[1] - inputs["input_ids"].shape[1] != args.new_tokens:
            raise RuntimeError(f"{name}: generated {out.shape[1] - inputs['input_ids'].shape[1]} tokens, "
                               f"not {args.new_tokens}")
    steady = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
    return {
        "config": name, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "batch": args.batch, "new_tokens": args.new_tokens, "call_seconds": seconds,
        "first_call_seconds": seconds[0], "steady_call_seconds": steady,
        "tokens_per_second": args.batch * args.new_tokens / steady,
        **compile_counts(),
        **({"graph_captures": step.captures, "graph_replays": step.replays, "graph_eager_steps": step.eager_steps,
            "graph_disabled_because": step.disabled_because} if graphed else {}),
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
    }


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def summary_table(records: list[dict]) -> str:
    reference = next((r for r in records if r["config"] == "eager"), None)
    rows = [
        "| configuration | first call s | steady call s (median) | × eager steady | new tokens/s | graphs | "
        "recompiles | CUDA-graph skips |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        if "error" in r:
            rows.append(f"| {r['config']} | failed: {r['error']} | | | | | | |")
            continue
        ratio = f"{r['steady_call_seconds'] / reference['steady_call_seconds']:.2f}" if reference else "–"
        rows.append(
            f"| {r['config']} | {r['first_call_seconds']:.2f} | {r['steady_call_seconds']:.3f} | {ratio} | "
            f"{r['tokens_per_second']:,.0f} | {r['unique_graphs']} | {r['recompiles']} | {r['cudagraph_skips']} |"
        )
    return "\n".join(rows)


def run_config(name: str, args, out: Path, device: str | None) -> dict:
    """One configuration in its own process (compile caches and counters start empty), on `device` if given."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    cache_of = CONFIGS[name].warm_from or name
    env["TORCHINDUCTOR_CACHE_DIR"] = str((out / "compile_cache" / cache_of).resolve())
    command = [sys.executable, __file__, "--one", name, "--out", str(out), "--batch", str(args.batch),
               "--new_tokens", str(args.new_tokens), "--calls", str(args.calls), *(["--tiny"] if args.tiny else [])]
    with open(out / f"{name}.log", "w") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode
    path = out / f"{name}.json"
    if code != 0 or not path.exists():
        tail = (out / f"{name}.log").read_text().splitlines()[-1:] or ["no output"]
        return {"config": name, "error": f"exit {code}: {tail[0][:200]}"}
    return json.loads(path.read_text())


def queues_for(names: list[str], devices: int) -> list[list[str]]:
    """The configurations dealt out to the devices, each to the shortest queue, a warm one after its cold one."""
    queues: list[list[str]] = [[] for _ in range(devices)]
    for name in names:
        cold = CONFIGS[name].warm_from
        home = next((q for q in queues if cold in q), None) if cold else None
        (home if home is not None else min(queues, key=len)).append(name)
    return queues


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--configs", default=None, help=f"Comma-separated, of {', '.join(CONFIGS)} (default all; "
                        f"--tiny: {TINY_CONFIGS}).")
    parser.add_argument("--devices", default=None, help="CUDA devices; the configurations are dealt out in order, "
                        "one process per device at a time (a *_warm configuration goes after its cold one).")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--tiny", action="store_true", help="The tiny model on the CPU (a smoke run, no speed claim).")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.one is not None:
        (out / f"{args.one}.json").write_text(json.dumps(measure(args.one, args)) + "\n")
        return 0
    names = [c for c in (args.configs or (TINY_CONFIGS if args.tiny else ",".join(CONFIGS))).split(",") if c]
    unknown = [c for c in names if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"--configs: unknown {unknown}; known: {', '.join(CONFIGS)}")
    devices = args.devices.split(",") if args.devices else [None]
    queues = queues_for(names, len(devices))
    with ThreadPoolExecutor(max_workers=len(devices)) as pool:
        done = pool.map(lambda k: [run_config(n, args, out, devices[k]) for n in queues[k]], range(len(devices)))
        by_name = {r["config"]: r for records in done for r in records}
    table = summary_table([by_name[n] for n in names])
    (out / "summary.md").write_text(table + "\n")
    print(table)
    return 0 if all("error" not in r for r in by_name.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
