"""Worker: one configuration of the size ladder (`benchmarks/size_ladder.py`), in this process.

A random-weight model of a public architecture (`harness.SHAPES`, bf16 weights, or 4-bit NF4 with `--load_in_4bit`),
LoRA r 16 on every linear layer, `--prompts` prompts × 8 completions of exactly `--completion_length` tokens
(`min_new_tokens`: the end-of-sequence token is never sampled, so every contender decodes the same number of tokens),
micro-batches of `--micro_batch` completions, `--steps` optimizer steps of `trainer.train()`.

Measured:
- `step_s`: mean of TRL's logged `step_time` over the steps after the first two (the first records or compiles;
  with an even `--steps` and two optimizer steps per generation batch the mean covers whole generation cycles);
- `generation_s`: seconds inside TRL's `_generate_single_turn` (the decoding, merge and restore included; with vLLM
  the weight sync and vLLM's generation) per optimizer step, over the same steps; `generation_share` = generation_s /
  step_s; `sync_s`: the weight sync into vLLM per optimizer step (inside generation_s; contenders `trl_vllm`,
  `zoo_vllm`, whose peaks include vLLM's pool of 0.3 of the card);
- `train_peak_gib`: the peak GPU memory allocated outside the decoding (old log-probs, loss, backward, optimizer),
  `generation_peak_gib` the peak inside it, measured apart by resetting torch's peak counter around each decoding;
- with `--profile`, `seams`: seconds per optimizer step of each seam over the same steps (`SEAMS`: TRL's profiled
  blocks, `lib/block_times.py`, and `step_profile.Seams`' backward and optimizer clocks; each synchronises the
  device at its ends, so the profiled step is a little slower than an unprofiled one), and `floors`: the matmul
  FLOPs of the log-prob passes at `step_profile.MATMUL_FLOPS` (backward twice the forward, gradient checkpointing's
  recompute not counted) and the decoding's bandwidth floor (`lib/harness.py`'s `decode_floor_s`);
- with `--layers liger`, the decoder layers run Liger-Kernel's RMSNorm, SwiGLU and rotary kernels (`pip install
  liger-kernel`, CUDA only), another way than `compiled_layers` (the "vllm" recipe's) to fuse the training passes'
  elementwise kernels;
- with `--kernels N`, `kernels`: optimizer step N (from 1) under `torch.profiler` (`lib/kernel_time.py`): its
  seconds, the device time in all its kernels and their launches, its 12 largest kernels (with two optimizer steps
  per generation batch an even N decodes nothing: the loss passes and the optimizer alone, as
  `benchmarks/log_prob_pass.py` times them bare);

Prints one `RESULT {json}` line. By hand:

    python benchmarks/lib/ladder_run.py --contender trl_best --shape qwen2.5-1.5b --steps 6
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.lib.harness import (  # noqa: E402
    SHAPES,
    all_linear_lora,
    length_parity_reward,
    load_4bit,
    numbered_tokenizer,
    prompt_dataset,
    random_model,
    short_run_args,
    trainer_classes,
)
from benchmarks.lib.kernel_time import KernelTime  # noqa: E402

CUDA = torch.cuda.is_available()

# Each contender: (implementation, extra config fields). "trl_best" is TRL at its own best setting here: two optimizer
# steps per generation batch (TRL's steps_per_generation), the field behind most of the recipes' gain at 135 M.
TWO_STEPS = "two_steps"
# TRL's colocated vLLM at 0.3 of the card: the model is saved to disk first (vLLM loads a path)
VLLM = {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3}
CONTENDERS: dict[str, tuple[str, dict]] = {
    "trl_default": ("trl", {}),
    "trl_best": ("trl", {TWO_STEPS: True}),
    "trl_vllm": ("trl", {TWO_STEPS: True, **VLLM}),
    "zoo_vllm": ("zoo", {TWO_STEPS: True, **VLLM}),
    # levers on the vLLM path, measured alone and together: vLLM returns token ids without their text (TRL reads
    # ids only); no importance-sampling correction, so the first optimizer step's old log-probs are skipped
    "trl_vllm_no_detokenize": ("trl", {TWO_STEPS: True, **VLLM, "generation_kwargs": {"detokenize": False}}),
    "zoo_vllm_skip_old": ("zoo", {
        TWO_STEPS: True, **VLLM, "vllm_importance_sampling_correction": False, "skip_on_policy_old_logps": True,
    }),
    # the recipe of those levers (TRL's correction kept, the first step's computed in its loss forward) and the LoRA
    # layers fused (`fused_lora`: two matrix products a layer, no elementwise pass over the activations); without
    # the fusion (the recipe before fused_lora joined it)
    "zoo_vllm_recipe": ("zoo", {**VLLM, "speed_recipe": "vllm"}),
    "zoo_vllm_recipe_unfused": ("zoo", {
        TWO_STEPS: True, **VLLM, "generation_kwargs": {"detokenize": False}, "skip_on_policy_old_logps": True,
    }),
    # the recipe with its decoder layers eager (before compiled_layers joined it)
    "zoo_vllm_recipe_eager": ("zoo", {
        TWO_STEPS: True, **VLLM, "generation_kwargs": {"detokenize": False}, "skip_on_policy_old_logps": True,
        "fused_lora": True,
    }),
    # and each distinct prompt of a log-prob pass forwarded once (needs --gradient_checkpointing false)
    "zoo_vllm_prompt_once": ("zoo", {**VLLM, "speed_recipe": "vllm", "prompt_once": True}),
    "zoo_vllm_levers": ("zoo", {
        TWO_STEPS: True, **VLLM, "generation_kwargs": {"detokenize": False},
        "vllm_importance_sampling_correction": False, "skip_on_policy_old_logps": True,
    }),
    "zoo_default": ("zoo", {}),
    # the transformers path with each distinct prompt forwarded once (needs --gradient_checkpointing false)
    "zoo_prompt_once": ("zoo", {TWO_STEPS: True, "skip_on_policy_old_logps": True, "prompt_once": True}),
    "lora": ("zoo", {"speed_recipe": "lora"}),
    "lora_graphed": ("zoo", {"speed_recipe": "lora_graphed"}),
    # lora_graphed without fused_lora (the recipe before it joined)
    "graphed_merged": ("zoo", {
        TWO_STEPS: True, "merge_adapter_for_generation": True, "compile_generation": True,
        "compile_generation_backend": "cuda_graph", "skip_on_policy_old_logps": True,
    }),
    "graphed_unmerged": ("zoo", {
        TWO_STEPS: True, "compile_generation": True, "compile_generation_backend": "cuda_graph",
        "skip_on_policy_old_logps": True,
    }),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contender", choices=sorted(CONTENDERS), required=True)
    parser.add_argument("--shape", default="qwen2.5-1.5b", choices=sorted(SHAPES))
    parser.add_argument("--load_in_4bit", action="store_true")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--num_generations", type=int, default=8)
    parser.add_argument("--micro_batch", type=int, default=32)
    parser.add_argument("--prompt_length", type=int, default=200)
    parser.add_argument("--completion_length", type=int, default=256)
    parser.add_argument("--steps", type=int, default=6, help="an even number: whole generation cycles")
    parser.add_argument("--lora_r", type=int, default=16)
    parser.add_argument("--gradient_checkpointing", choices=("true", "false"), default=None,
                        help="override the contender's (TRL's default: on)")
    parser.add_argument("--profile", action="store_true", help="time each seam of the step (module docstring)")
    parser.add_argument("--layers", choices=LAYERS, default="as_configured",
                        help="how the decoder layers run (docstring)")
    parser.add_argument("--kernels", type=int, default=None, metavar="N", help="profile optimizer step N's kernels")
    return parser.parse_args(argv)


class DecodingMeter:
    """Wraps the trainer's `_generate_single_turn`: seconds inside it, and peak memory inside and outside it."""

    def __init__(self, trainer):
        self.seconds: list[float] = []
        self.inside_peak = 0
        self.outside_peak = 0
        inner = trainer._generate_single_turn

        def timed(*args, **kwargs):
            self._synchronize()
            self.outside_peak = max(self.outside_peak, self._peak())
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self._synchronize()
                self.seconds.append(time.perf_counter() - start)
                self.inside_peak = max(self.inside_peak, self._peak())

        trainer._generate_single_turn = timed

    @staticmethod
    def _synchronize():
        if CUDA:
            torch.cuda.synchronize()

    @staticmethod
    def _peak() -> int:
        if not CUDA:
            return 0
        peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        return peak

    def finish(self):
        self.outside_peak = max(self.outside_peak, self._peak())


def saved_model(model, shape: str, tokenizer) -> str:
    """`model` and its tokenizer saved once under the temporary folder (bf16), for vLLM to load by path."""
    folder = Path(tempfile.gettempdir()) / f"ladder-model-{shape}"
    if not (folder / "config.json").exists():
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return str(folder)


class SyncMeter:
    """Seconds inside TRL's weight sync into vLLM (`VLLMGeneration.sync_weights`: merge, load, unmerge)."""

    def __init__(self, trainer):
        self.seconds: list[float] = []
        generation = getattr(trainer, "vllm_generation", None)
        if generation is None:
            return
        inner = generation.sync_weights

        def timed():
            DecodingMeter._synchronize()
            start = time.perf_counter()
            try:
                return inner()
            finally:
                DecodingMeter._synchronize()
                self.seconds.append(time.perf_counter() - start)

        generation.sync_weights = timed


class StepKernels(TrainerCallback):
    """Optimizer step `step` (from 1) under `lib/kernel_time.py`'s profiler: its seconds and kernels."""

    def __init__(self, step: int):
        self.step, self.result, self._kernels = step, None, None

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step - 1:
            self._kernels = KernelTime().__enter__()
            self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self._kernels is not None and self.result is None:
            self._kernels.__exit__(None, None, None)
            self.result = {"step": self.step, "seconds": time.perf_counter() - self._start, **self._kernels.summary()}


LAYERS = ("as_configured", "liger")


def set_layers(trainer, layers: str) -> None:
    """With `--layers liger`, the policy's base patched with Liger-Kernel's RMSNorm, SwiGLU and rotary kernels."""
    if layers == "liger":
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        from trl_zoo.components.weight_layout import policy_base

        _apply_liger_kernel_to_instance(model=policy_base(trainer.model, trainer.accelerator), rope=True,
                                        rms_norm=True, swiglu=True, cross_entropy=False,
                                        fused_linear_cross_entropy=False)


def build_trainer(options):
    implementation, fields = CONTENDERS[options.contender]
    fields = {name: dict(value) if isinstance(value, dict) else value for name, value in fields.items()}
    two_steps = fields.pop(TWO_STEPS, False)
    trainer_cls, config_cls = trainer_classes(implementation)
    completions = options.prompts * options.num_generations
    accumulation = completions // options.micro_batch
    if two_steps:
        fields["steps_per_generation"] = 2 * accumulation
    if options.gradient_checkpointing is not None:
        fields["gradient_checkpointing"] = options.gradient_checkpointing == "true"
    vocab_size = SHAPES[options.shape]["vocab_size"]
    model = load_4bit(options.shape, Path(tempfile.gettempdir())) if options.load_in_4bit else random_model(
        options.shape
    )
    at_least = {"min_new_tokens": options.completion_length}
    if fields.get("use_vllm"):  # vLLM loads the model by path; its SamplingParams name the floor min_tokens
        model = saved_model(model, options.shape, numbered_tokenizer(vocab_size))
        at_least = {"min_tokens": options.completion_length}
        fields["model_init_kwargs"] = {"dtype": "bfloat16"}
    at_least.update(fields.pop("generation_kwargs", {}))
    args = config_cls(
        output_dir=str(Path(tempfile.gettempdir()) / f"ladder-{options.contender}"),
        loss_type="grpo",
        per_device_train_batch_size=options.micro_batch,
        gradient_accumulation_steps=accumulation,
        num_generations=options.num_generations,
        max_completion_length=options.completion_length,
        generation_kwargs=at_least,
        max_steps=options.steps,
        **short_run_args(),
        **fields,
    )
    trainer = trainer_cls(
        model=model,
        reward_funcs=length_parity_reward,
        args=args,
        train_dataset=prompt_dataset(completions * (options.steps + 1), options.prompt_length, vocab_size),
        processing_class=numbered_tokenizer(vocab_size),
        peft_config=all_linear_lora(options.lora_r),
    )
    set_layers(trainer, options.layers)
    return trainer


# seam -> TRL's profiled blocks (nesting paths of lib/block_times.py) or step_profile.Seams' clocks it sums
PREPARE = "_prepare_inputs"
SEAMS = {
    "generation": [f"{PREPARE} > vLLM.generate", f"{PREPARE} > transformers.generate"],
    "weight_sync": [f"{PREPARE} > sync_weights"],
    "old_logps": [f"{PREPARE} > _get_per_token_logps_and_entropies", "old_logps"],
    "reward": [f"{PREPARE} > _calculate_rewards"],
    "loss_forward": ["compute_loss"],
    "backward": ["backward"],
    "optimizer": ["optimizer"],
}


def seam_seconds(blocks: dict, seams, steps: list[int], step_s: float) -> dict[str, float]:
    """Seconds per optimizer step of each seam of `SEAMS` over `steps`; `prepare_rest` is the rest of TRL's
    `_prepare_inputs`, `rest` the rest of the step."""
    chosen = set(steps)

    def summed(path: str) -> float:
        table = blocks.get(path) or seams.seconds.get(path) or {}
        return sum(v for s, v in table.items() if int(s) in chosen)

    out = {name: sum(summed(p) for p in paths) / len(steps) for name, paths in SEAMS.items()}
    trls_old_logps = summed(SEAMS["old_logps"][0]) / len(steps)  # inside `_prepare_inputs` (trl_zoo's pass is not)
    inside_prepare = out["generation"] + out["weight_sync"] + trls_old_logps + out["reward"]
    out["prepare_rest"] = max(0.0, summed(PREPARE) / len(steps) - inside_prepare)
    out["rest"] = max(0.0, step_s - sum(out.values()))
    return out


def seam_floors(trainer, seams, steps: list[int], options) -> dict[str, float]:
    """Per optimizer step: the matmul FLOPs floor of the log-prob passes and the decoding's bandwidth floor."""
    from benchmarks.lib.harness import decode_floor_s
    from benchmarks.step_profile import MATMUL_FLOPS, model_facts

    facts = model_facts(trainer.accelerator.unwrap_model(trainer.model))
    body = facts["matmul_params"] - facts["head_params"]
    chosen, out = set(steps), {"old_logps": 0.0, "loss_forward": 0.0, "backward": 0.0}
    for p in seams.passes:
        if p["step"] not in chosen:
            continue
        forward = 2 * body * p["rows"] * p["width"] + 2 * facts["head_params"] * p["rows"] * p["logits_to_keep"]
        if p["grad"]:
            out["loss_forward"] += forward / MATMUL_FLOPS
            out["backward"] += 2 * forward / MATMUL_FLOPS
        else:
            out["old_logps"] += forward / MATMUL_FLOPS
    out = {name: value / len(steps) for name, value in out.items()}
    args = trainer.args
    batch = args.per_device_train_batch_size * args.steps_per_generation  # one generation batch's rows
    cycle = args.steps_per_generation // args.gradient_accumulation_steps  # optimizer steps it feeds
    out["generation"] = decode_floor_s(options.shape, batch, options.prompt_length, options.completion_length) / cycle
    return out


def main(argv=None):
    options = parse_args(argv)
    blocks = seams = None
    if options.profile:
        from benchmarks.lib.block_times import BlockTimes
        from benchmarks.step_profile import Seams

        blocks, seams = BlockTimes(), Seams()
        blocks.install()
    trainer = build_trainer(options)
    if seams is not None:
        seams.install(trainer)
    meter = DecodingMeter(trainer)
    syncs = SyncMeter(trainer)
    kernels = StepKernels(options.kernels) if options.kernels else None
    if kernels is not None:
        trainer.add_callback(kernels)
    if CUDA:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    meter.finish()
    step_times = [log["step_time"] for log in trainer.state.log_history if "step_time" in log]
    timed = step_times[2:] or step_times
    decodings_timed = meter.seconds[1:] or meter.seconds  # the first decoding records (or compiles)
    generations_per_step = len(meter.seconds) / max(len(step_times), 1)
    speed = trainer.pipeline.get("generation_speed") if hasattr(trainer, "pipeline") else None
    compiled = trainer.pipeline.get("compiled_layers") if hasattr(trainer, "pipeline") else None
    graphed = getattr(speed, "graphed_decoding", None)
    generation_s = statistics.mean(decodings_timed) * generations_per_step if meter.seconds else float("nan")
    step_s = statistics.mean(timed)
    result = {
        "contender": options.contender,
        "shape": options.shape,
        "load_in_4bit": options.load_in_4bit,
        "completions": options.prompts * options.num_generations,
        "prompt_length": options.prompt_length,
        "completion_length": options.completion_length,
        "steps": len(step_times),
        "step_s": step_s,
        "step_times": step_times,
        "generation_s": generation_s,
        "generation_share": generation_s / step_s,
        "decodings": len(meter.seconds),
        "sync_s": statistics.mean(syncs.seconds[1:] or syncs.seconds) * generations_per_step if syncs.seconds
        else None,  # inside generation_s: the weight sync per optimizer step (vLLM only)
        "train_peak_gib": meter.outside_peak / 2**30,
        "generation_peak_gib": meter.inside_peak / 2**30,
        "merged": bool(getattr(speed, "merge", False)),  # what applied (a quantized base generates unmerged)
        "graph": {name: getattr(graphed, name) for name in ("captures", "replays", "warm_ups", "disabled_because")}
        if graphed is not None else None,
        "gradient_checkpointing": bool(trainer.args.gradient_checkpointing),
        "micro_batch": options.micro_batch,
        "layers": options.layers if options.layers == "liger" else
        "compiled" if getattr(compiled, "compiled", 0) else "eager",
        "device": torch.cuda.get_device_name() if CUDA else "cpu",
    }
    if kernels is not None:
        result["kernels"] = kernels.result
    if seams is not None:
        measured = list(range(2, len(step_times))) or list(range(len(step_times)))
        result["seams"] = seam_seconds(blocks.seconds, seams, measured, step_s)
        result["floors"] = seam_floors(trainer, seams, measured, options)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
