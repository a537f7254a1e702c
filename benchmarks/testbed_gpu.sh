#!/usr/bin/env bash
# The mechanism testbed on one H200, in two calls of at most 10 minutes each:
#
#     bash benchmarks/testbed_gpu.sh OUT 1      # bootstrap (cached) + the first runs
#     bash benchmarks/testbed_gpu.sh OUT 2      # the rest (re-bootstraps in ~2 min if the machine was released)
#
# Installs nothing: torch, transformers, trl, datasets and this checkout must already import. One configuration per
# process (benchmarks/lib/testbed.py), sequentially; every run writes OUT/<preset>-seed<S>.jsonl and its log
# OUT/<preset>-seed<S>.log; progress goes to stdout. Draw the figures elsewhere (matplotlib):
#     python benchmarks/testbed_figures.py --runs OUT --every 16
#
# Plan (priority: figures (a), (c), (d)): presets grpo, dr_grpo, dapo, dapo_symmetric, gspo; seeds 0, 1, 2;
# STEPS (default 96) optimizer steps of 128 completions each, SPG (default 16) per generation batch of 2048
# completions (256 prompts × 8): on the CPU, figure (d) separated the losses at 16 off-policy micro-steps per batch
# and not at 4 (benchmarks/results/2026-11-26-cpu-testbed-offpolicy16.md).
#   call 1: bootstrap, then seed 0 of all five presets, then seed 1 of grpo and dapo      (7 runs)
#   call 2: seed 1 of dr_grpo, dapo_symmetric, gspo, then seed 2 of all five              (8 runs)
# Figures (b) dynamic sampling and (e) CISPO need three more runs each (dapo with the resample sampler, cispo); add
# them as PRESET:SEED[:SAMPLER] items, e.g. EXTRA="cispo:0 dapo:0:resample", if the first two calls left time.
#
# Time estimate (not measured on a GPU: extrapolated from the CPU runs and the model size). The gpu scale is a
# 30 M-parameter policy (hidden 640, 8 layers) on 1-7-digit sums (completions 11-72 tokens, mean 42); the cpu scale
# (0.3 M, 1-3 digits, mean 22 tokens, 32 completions per step) trains 100 steps in 10-19 s on one idle core (up to
# 85 s on a shared one), plus ~10 s of process start. Both are overhead-bound, not FLOP-bound: on an H200 a 30 M
# model decodes a 2048-row batch at roughly 10-20 ms per token, so a generation round (72 tokens, one per 16 steps)
# ≈ 1-1.5 s; its old log-probabilities plus a training step of 128 sequences ≈ 0.15-0.25 s; TRL's bookkeeping
# ≈ 0.1 s: 96 steps ≈ 6 × 1.5 + 96 × 0.35 ≈ 45 s, plus 6 held-out evaluations (512 greedy prompts, ≈ 0.7 s each)
# and ≈ 20 s of process start and model load: ≈ 60-70 s per configuration. The bootstrap: ≤ 3000 supervised steps
# of 256 sequences at ≈ 30 ms plus probes ≈ 1.5-2.5 min, once (cached in TRL_ZOO_CACHE, default runs/testbed_cache
# under this checkout, which survives between calls while the machine stays warm). Whether the gpu recipe reaches
# its 90 % probe target within 3000 steps is untested: read "Bootstrapped in ... held-out greedy accuracy" in the
# first run's log (40-60 % sampled accuracy is the aim; the step-0 line of each JSONL has the greedy held-out one).
# Call 1 ≈ 2 + 7 × 1.1 ≈ 9.5 min, call 2 ≈ 8 × 1.1 ≈ 9 min (+2 if the cache is gone; the guard then skips the
# last runs, which it names — run them in a third call with RUNS="..."). A guard stops starting runs once
# BUDGET seconds (default 540) minus the last run's duration have passed, and names the runs it skipped.
set -euo pipefail

OUT=${1:?usage: testbed_gpu.sh OUT PART(1|2)}
PART=${2:-}
STEPS=${STEPS:-96}
SPG=${SPG:-16}
BUDGET=${BUDGET:-540}
PYTHON=${PYTHON:-python}
SCALE=${SCALE:-gpu}  # SCALE=cpu STEPS=2 RUNS="grpo:0 dapo:0:resample" checks the driver on a CPU
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TRL_ZOO_CACHE=${TRL_ZOO_CACHE:-$ROOT/runs/testbed_cache}
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"

if [[ -n ${RUNS:-} ]]; then PART=custom; fi
case "$PART" in
  custom) ;;
  1) RUNS="grpo:0 dapo:0 dapo_symmetric:0 dr_grpo:0 gspo:0 grpo:1 dapo:1" ;;
  2) RUNS="dr_grpo:1 dapo_symmetric:1 gspo:1 grpo:2 dapo:2 dapo_symmetric:2 dr_grpo:2 gspo:2" ;;
  *) echo "PART must be 1 or 2, got '$PART'"; exit 2 ;;
esac
RUNS="$RUNS ${EXTRA:-}"

"$PYTHON" -c "import torch, transformers, trl, datasets; print('torch', torch.__version__, 'transformers', \
transformers.__version__, 'trl', trl.__version__, 'cuda', torch.cuda.is_available())"

started=$SECONDS
last=0
skipped=""
for item in $RUNS; do
  IFS=: read -r preset seed sampler <<< "$item"
  sampler=${sampler:-none}
  if [[ $sampler == none ]]; then name=$preset; else name=$preset-$sampler; fi
  elapsed=$((SECONDS - started))
  if (( elapsed + last > BUDGET )); then
    skipped="$skipped $item"; continue
  fi
  log="$OUT/$name-seed$seed.log"
  echo "[$(date -u +%H:%M:%S) +${elapsed}s] start $preset seed $seed sampler $sampler ($STEPS steps)"
  run_started=$SECONDS
  "$PYTHON" "$ROOT/benchmarks/lib/testbed.py" --preset "$preset" --seed "$seed" --sampler "$sampler" --scale "$SCALE" \
    --steps "$STEPS" --steps_per_generation "$SPG" --eval_every "$SPG" --out "$OUT" > "$log" 2>&1 \
    || echo "  FAILED: see $log"
  last=$((SECONDS - run_started))
  grep -h "Bootstrapped in" "$log" || true
  tail -n 1 "$log"
done
echo "[$(date -u +%H:%M:%S) +$((SECONDS - started))s] done part $PART${skipped:+; skipped (budget):$skipped}"
