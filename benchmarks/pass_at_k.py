"""Held-out pass@k of finished runs' adapters (and of the base model): the figure MaxRL (arXiv:2602.02710) claims to
improve, which greedy accuracy cannot show. Definitions: `trl_zoo/tasks/pass_at_k.py`.

    python benchmarks/pass_at_k.py --task chat_arithmetic_hard --runs OUT/chat_arithmetic_hard/*/seed* \
        [--base smollm2-135m-instruct] [--samples 8] [--num_heldout 200] [--out pass_at_k.jsonl]

Each run folder is one `trl-zoo train` output (its `summary.json` names the base model, the folder holds the LoRA
adapter). Every run is scored on the same first `--num_heldout` held-out prompts of the task, `--samples` completions
each at temperature 1 from the same sampling seed, the task's completion length and reward (last number for the
chat tasks). One JSON line per run, and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_zoo.io.gguf_checkpoint import policy_path
from trl_zoo.tasks import get_task
from trl_zoo.tasks.pass_at_k import default_ks, pass_at_ks, sampled_right_counts
from trl_zoo.tasks.rewards import final_number_reward


def load(base: str, adapter: str | None):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype).to(device)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return model, AutoTokenizer.from_pretrained(adapter or base)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--runs", nargs="*", default=[])
    parser.add_argument("--base", default=None, help="Also score this base model (a name, path or packaged GGUF).")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--num_heldout", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    task = get_task(args.task)
    heldout = task.heldout_dataset()
    heldout = heldout.select(range(min(args.num_heldout, len(heldout))))
    prompts = [[{"role": "user", "content": p}] for p in heldout["prompt"]]
    ks = default_ks(args.samples)
    entries = ([("base", policy_path(args.base, None), None)] if args.base else []) + [
        (str(Path(run)), json.loads((Path(run) / "summary.json").read_text())["model"], run) for run in args.runs
    ]
    rows = []
    for name, base, adapter in entries:
        model, tokenizer = load(base, adapter)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        counts = sampled_right_counts(
            model, tokenizer, prompts, task.max_completion_length, final_number_reward,
            {"answer": list(heldout["answer"])}, samples=args.samples, seed=args.seed,
        )
        row = {"run": name, "prompts": len(counts), "samples": args.samples,
               **{f"pass@{k}": value for k, value in pass_at_ks(counts, args.samples, ks).items()}}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "a") as handle:
                handle.write(json.dumps(row) + "\n")
    print("\n| run | " + " | ".join(f"pass@{k}" for k in ks) + " |\n|---|" + "---|" * len(ks))
    for row in rows:
        print(f"| {row['run']} | " + " | ".join(f"{row[f'pass@{k}']:.1%}" for k in ks) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
