"""Where TRL's colocated vLLM generation spends its time: one generation batch of the size ladder's shape, decoded
by TRL's own `VLLMGeneration.generate` under sampling options that leave the tokens' distribution alone.

    python benchmarks/vllm_generation.py --shape qwen2.5-1.5b --out FILE.jsonl [--repeats 3]

The engine is the one TRL builds (`lib/ladder_run.py --contender trl_vllm`: TRL's `LLM(...)` arguments, 0.3 of
the card, the model saved to disk); its generation batch is `--prompts` × 8 completions of exactly
`--completion_length` tokens after prompts of `--prompt_length` tokens, every prompt repeated 8 times as TRL's
sampler repeats it. Variants (`VARIANTS`), interleaved round by round after one warm-up each:

    trl             TRL's sampling parameters (`logprobs=0`: the sampled token's log-prob, text detokenized)
    no_detokenize   the same with `detokenize=False` (TRL reads token ids only; its IS correction is unchanged)
    no_logprobs     no log-probs returned (TRL's IS correction then has nothing to read)
    bare            neither text nor log-probs
    prefill         one new token per completion: the prefill and the engine's per-call cost
    n_per_prompt    each prompt once with `n=8` (what TRL's server mode asks for), no text
    flat_logprobs   no text, vLLM's log-probs in its flat container (`flat_logprobs=True`: a few lists per request
                    instead of a dict and a Logprob object per token; TRL reads it as the list of dicts)
    after_sync      no text, right after TRL's weight sync (`sync_weights`: the adapter merged into vLLM), untimed
    after_backward  no text, right after a training pass, untimed: forward and backward of the policy over the
                    optimizer step's micro-batches of prompt + completion length (what a training step leaves in the
                    caching allocator, the CPU's caches and Python's heap), gradients then dropped

Each record: seconds of TRL's `generate` call, of vLLM's `LLM.generate` inside it, and the floor of the decoding:
the bf16 weights read once per decode step plus the KV cache of the real tokens, at lib/harness.py's `BANDWIDTH` (the
rate `step_profile.py` names). `--summarize FILE.jsonl` prints the medians as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = ("trl", "no_detokenize", "no_logprobs", "bare", "prefill", "n_per_prompt", "flat_logprobs", "after_sync",
            "after_backward")


def run(options) -> list[dict]:
    import torch

    from benchmarks.lib import ladder_run
    from benchmarks.lib.harness import decode_floor_s

    ladder = ladder_run.parse_args([
        "--contender", "trl_vllm", "--shape", options.shape, "--prompts", str(options.prompts),
        "--completion_length", str(options.completion_length), "--prompt_length", str(options.prompt_length),
    ])
    trainer = ladder_run.build_trainer(ladder)
    generation = trainer.vllm_generation
    llm = generation.llm
    rows = 2 * options.prompts * 8  # two optimizer steps' completions: one generation batch of the ladder
    vocab = trainer.processing_class.vocab_size
    generator = torch.Generator().manual_seed(0)
    unique = [torch.randint(3, vocab, (options.prompt_length,), generator=generator).tolist()
              for _ in range(rows // 8)]
    repeated = [ids for ids in unique for _ in range(8)]
    inside: list[float] = []
    inner_generate = llm.generate

    def timed_generate(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner_generate(*args, **kwargs)
        finally:
            inside.append(time.perf_counter() - start)

    llm.generate = timed_generate
    base_kwargs = dict(generation.generation_kwargs)
    base_logprobs, base_length = generation.logprobs, generation.max_completion_length

    def training_pass():
        micro_batch = ladder.micro_batch
        length = options.prompt_length + options.completion_length
        for _ in range(rows // 2 // micro_batch):  # one optimizer step's micro-batches
            ids = torch.randint(3, vocab, (micro_batch, length), generator=generator).to(trainer.model.device)
            logits = trainer.model(input_ids=ids).logits
            logits.float().logsumexp(-1).mean().backward()
            del logits
        trainer.model.zero_grad(set_to_none=True)

    def one(variant: str) -> dict:
        generation.generation_kwargs = dict(base_kwargs)
        generation.logprobs, generation.max_completion_length = base_logprobs, base_length
        if variant not in ("trl", "no_logprobs"):
            generation.generation_kwargs["detokenize"] = False
        if variant == "flat_logprobs":
            generation.generation_kwargs["flat_logprobs"] = True
        if variant == "after_sync":
            generation.sync_weights()
        if variant == "after_backward":
            trainer.model.train()
            training_pass()
        if variant in ("no_logprobs", "bare"):
            generation.logprobs = None
        if variant == "prefill":
            generation.max_completion_length = 1
            generation.generation_kwargs["min_tokens"] = 1
        inside.clear()
        torch.cuda.synchronize()
        start = time.perf_counter()
        if variant == "n_per_prompt":
            from vllm import SamplingParams

            params = SamplingParams(n=8, max_tokens=base_length, logprobs=base_logprobs,
                                    **generation.generation_kwargs)
            outputs = llm.generate([{"prompt_token_ids": ids} for ids in unique], sampling_params=params,
                                   use_tqdm=False)
            tokens = sum(len(o.token_ids) for out in outputs for o in out.outputs)
        else:
            _, completion_ids, _, _ = generation.generate(repeated, None, 8)
            tokens = sum(map(len, completion_ids))
        torch.cuda.synchronize()
        return {"variant": variant, "seconds": time.perf_counter() - start, "llm_generate_s": sum(inside),
                "tokens": tokens}

    records = []
    for variant in VARIANTS:
        one(variant)  # warm-up
    for repeat in range(options.repeats):
        for variant in VARIANTS:
            record = one(variant)
            record.update(repeat=repeat, shape=options.shape, rows=rows, prompt_length=options.prompt_length,
                          completion_length=options.completion_length, device=torch.cuda.get_device_name(),
                          decode_floor_s=decode_floor_s(options.shape, rows, options.prompt_length,
                                                        options.completion_length))
            records.append(record)
            print("RESULT " + json.dumps(record), flush=True)
    return records


def summarize(records: list[dict]) -> list[str]:
    rows = ["| shape | variant | s per generation batch | of it in vLLM's generate | tokens/s | × decode floor |",
            "|---|---|---|---|---|---|"]
    for shape in sorted({r["shape"] for r in records}):
        for variant in VARIANTS:
            mine = [r for r in records if r["shape"] == shape and r["variant"] == variant]
            if not mine:
                continue
            seconds = statistics.median(r["seconds"] for r in mine)
            inside = statistics.median(r["llm_generate_s"] for r in mine)
            tokens = mine[0]["tokens"]
            floor = "" if variant == "prefill" else f"{seconds / mine[0]['decode_floor_s']:.1f}"
            rows.append(f"| {shape} | {variant} | {seconds:.2f} | {inside:.2f} | {tokens / seconds:,.0f} | {floor} |")
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="qwen2.5-1.5b")
    parser.add_argument("--prompts", type=int, default=16, help="prompts of one optimizer step (two a batch)")
    parser.add_argument("--prompt_length", type=int, default=200)
    parser.add_argument("--completion_length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--summarize", type=Path)
    options = parser.parse_args(argv)
    if options.summarize:
        records = [json.loads(line) for line in options.summarize.read_text().splitlines() if line.strip()]
        print("\n".join(summarize(records)))
        return
    records = run(options)
    if options.out:
        with options.out.open("a") as handle:
            for record in records:
                handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
