"""The real-model study on one GPU: the packaged SmolLM2-135M-Instruct with LoRA on the chat_arithmetic tasks,
many configurations × seeds as parallel processes on one card (a 135 M run uses ~1.4 GiB; accuracy does not
depend on what else runs; step times taken this way are not speed comparisons — see time_to_target.py).

    python benchmarks/real_model.py --plan easy --out results/real-model [--parallel 14] [--deadline 560]

Plans (each run: `benchmarks/lib/real_model_run.py`, 3 seeds unless --seeds):
    easy      chat_arithmetic: grpo, dr_grpo, dapo, gspo, cispo, sapo; the null-reward control (grpo, rewards
              shuffled); dapo with ε_high 0.2 (named
              dapo_symmetric, but `--loss_type dapo` alone has ε_high 0.2 too: the same run); TRL's GRPOTrainer with
              grpo, dr_grpo, dapo, cispo, sapo
    hard      chat_arithmetic_hard: grpo; grpo + greso (at most 3 generation rounds a step); grpo with MaxRL's
              estimator; grpo with the teacher signal ("self": the base weights, the answer in its prompt) and
              the same teacher without the answer (grpo_teacher_no_context); the control
    medium    chat_arithmetic_medium (a - b: below 5 % greedy, yet a tenth of the groups with spread): grpo, grpo +
              resample, grpo + greso, grpo + adaptive_budget (4 completions, given up when they agree, else
              topped up to 8; each sampler at most 3 generation rounds a step), MaxRL's estimator, the teacher
              signal with and without the answer in the teacher's prompt (sparse rewards that are present), the
              control
    offpolicy chat_arithmetic, 8 optimizer steps per generation batch (--num_iterations 8, 80 steps = 10
              batches): dapo with ε_high 0.28 (clip-higher) and 0.2 (symmetric), dppo, topr, m2po
    methods   chat_arithmetic (issue 60): every loss and estimator added since `easy`, each beside grpo and the
              control on the same seeds: MaxRL's, pass@k's (passk, k 4) and verl's grpo_passk estimators; dppo,
              topr, m2po and ipo at 4 updates a batch (60 steps, 15 batches: one update never moves π_θ off
              π_old); LUFFY and CHORD-φ on the task's own labels as worked lines ("47 + 38 = 85",
              `--expert_traces true`, the expert column expert_answer); the teacher signal (answer in its prompt);
              A*-PO, V*(x) from 8 samples of every training prompt by the starting policy, drawn and scored
              before training (`--reference_reward_samples 8`; their cost in reference_rewards.json); DLER's
              truncation penalty (reward 0 past the completion length); TTRL trained on majority_vote alone (the
              labels score the held-out evaluation only); GDPO over final_number and exact_match (the number
              alone). GiGPO and MT-GRPO: plan `tools`. Run with
              `--parallel 4` (four 135 M processes on the one card); pass@k of passk, grpo_passk and maxrl:
              benchmarks/pass_at_k.py
    tools     chat_arithmetic_calculator (issue 60): one calculator call, then the answer (the held-out evaluation
              runs the call greedily); the packaged model never calls the tool on its own, so every arm but
              grpo_no_sft has CHORD's SFT term (μ 0.1) on the first turn's call (`--expert_traces true`: the call
              on the question's own expression): grpo, GiGPO, MT-GRPO (turn reward: the call computed the answer),
              the control (rewards shuffled, the same SFT term) and grpo without the term. Run with `--parallel 4`
    trl       chat_arithmetic: TRL's GRPOTrainer with grpo and dapo
    gemma     chat_arithmetic with the base model gemma3-270m (few-shot prompts) at the model's own preset
              (learning rate 5e-5, 24 new tokens: PackagedModel.preset; a --learning_rate flag overrides it): the
              six losses of `easy`, the null-reward control and TRL's GRPOTrainer with grpo. At the task's 2e-4
              every run fell below the base model (benchmarks/results/2026-11-27-h100x4-gemma.md)
Several plans: `--plan hard,offpolicy` (one queue, seeds outermost). `--skip_done` leaves out runs that finished in
an earlier invocation (their summary.json exists: a run that failed writes costs.json but no summary) and resumes,
from its last complete checkpoint, a run an earlier invocation stopped (runs save one every `--save_steps`, 10 by
default), so a study can go in pieces.
Runs land in <out>/<task>/<name>/seed<s> (the layout `trl-zoo compare` reads); a run still going at the deadline
is stopped (and resumed by the next `--skip_done` invocation). `--list` prints the commands without running them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

TEACHER = "{prompt} (The answer is {answer}.)"  # privileged context: the teacher sees the answer
# the teacher signal with the answer in the teacher's prompt, and the same teacher without it: the base weights on the
# policy's prompt, i.e. a k1 KL-to-reference term in the advantages; what the privileged context adds is the difference
TEACHER_PAIR = {
    "grpo_teacher": ["--loss_type", "grpo", "--teacher_model", "self", "--teacher_prompt_template", TEACHER],
    "grpo_teacher_no_context": ["--loss_type", "grpo", "--teacher_model", "self"],
}
LOSSES = ["grpo", "dr_grpo", "dapo", "gspo", "cispo", "sapo"]
TRL_LOSSES = ["grpo", "dr_grpo", "dapo", "cispo", "sapo"]  # TRL's own loss_type names


# dppo's, m2po's and ipo's trust regions and topr's truncated weight act only once π_θ has left π_old, which never
# happens at one update per batch (the preset's shape): 4 updates of each batch, 60 steps = 15 batches
OFF_POLICY_UPDATES = ["--num_iterations", "4", "--max_steps", "60"]


def method_runs() -> dict[str, list[str]]:
    """The `methods` plan: every loss and estimator added since the `easy` study, beside grpo and the control."""
    grpo = ["--loss_type", "grpo"]
    return {
        "grpo": grpo,
        "control": [*grpo, "--null_reward_control", "true"],
        "maxrl": [*grpo, "--advantage_estimator", "maxrl"],
        "passk": [*grpo, "--advantage_estimator", "passk", "--passk_k", "4"],
        "grpo_passk": [*grpo, "--advantage_estimator", "grpo_passk"],
        # the recorded offpolicy runs' dppo: prime-rl's KL term and token mean
        "dppo": ["--loss_type", "dppo", "--dppo_kl_coef", "0.001", "--loss_aggregation", "token_mean_global",
                 *OFF_POLICY_UPDATES],
        "topr": ["--loss_type", "topr", *OFF_POLICY_UPDATES],
        "m2po": ["--loss_type", "m2po", *OFF_POLICY_UPDATES],
        "ipo": ["--loss_type", "ipo", *OFF_POLICY_UPDATES],
        # the task's own labels as worked lines ("47 + 38 = 85", --expert_traces): LUFFY's one off-policy trace of
        # each group of 8 (the paper's; scored like a completion, so a right trace is in its batch reward),
        # CHORD-φ's SFT term at its default constant μ = 0.1
        "luffy": ["--loss_type", "luffy", "--expert_traces", "true", "--expert_column", "expert_answer"],
        "chord": [*grpo, "--expert_traces", "true", "--expert_column", "expert_answer"],
        # A*-PO: V*(x) from 8 samples of every training prompt by the starting policy, scored before training
        # (--reference_reward_samples: their count and seconds in reference_rewards.json); β₂ 1e-3, the paper's;
        # the 640 prompts 40 steps of 16 draw (all 6,000: 9 times the completions the training generates)
        "a2po": ["--loss_type", "a2po", "--advantage_estimator", "a2po", "--beta", "0.001",
                 "--reference_reward_samples", "8", "--train_prompts", "640"],
        "grpo_teacher": TEACHER_PAIR["grpo_teacher"],
        # DLER's paper: a completion not ended within L = max_completion_length tokens gets reward 0
        "dler": [*grpo, "--truncation_penalty", "0.0"],
        # TTRL: trained on majority_vote alone; the recording reward (real_model_run.py puts it first) has weight 0
        # and scores the held-out evaluation with the labels
        "ttrl": [*grpo, "--reward_funcs", "majority_vote", "--reward_weights", "0", "1"],
        # GDPO: two objectives normalised apart, the answer (the recording final_number) and the answer alone
        # (exact_match: the completion is the number and nothing else)
        "gdpo": [*grpo, "--reward_funcs", "exact_match", "--multi_objective_aggregation", "normalize_then_sum"],
        # GiGPO and MT-GRPO read turns and per-turn rewards: plan `tools`, on the task with a calculator
    }


def tool_runs() -> dict[str, list[str]]:
    """The `tools` plan: the multi-turn estimators beside grpo and the control, with the call taught by an SFT term."""
    grpo = ["--loss_type", "grpo"]
    taught = ["--expert_traces", "true", "--expert_column", "expert_answer"]
    return {
        "grpo": [*grpo, *taught],
        "gigpo": [*grpo, *taught, "--advantage_estimator", "gigpo"],
        "mt_grpo": [*grpo, *taught, "--advantage_estimator", "mt_grpo"],
        "control": [*grpo, *taught, "--null_reward_control", "true"],
        "grpo_no_sft": grpo,
    }


def plan(name: str) -> tuple[str, dict[str, list[str]]]:
    """(task, {run name: extra train flags})."""
    if name == "easy":
        runs = {loss: ["--loss_type", loss] for loss in LOSSES}
        runs["control"] = ["--loss_type", "grpo", "--null_reward_control", "true"]
        runs["dapo_symmetric"] = ["--loss_type", "dapo", "--epsilon_high", "0.2"]
        runs.update({f"trl_{loss}": ["--trainer", "trl", "--loss_type", loss] for loss in TRL_LOSSES})
        return "chat_arithmetic", runs
    if name == "hard":
        return "chat_arithmetic_hard", {
            "grpo": ["--loss_type", "grpo"],
            "grpo_greso": ["--loss_type", "grpo", "--dynamic_sampling", "greso", "--dynamic_sampling_max_rounds", "3"],
            "maxrl": ["--loss_type", "grpo", "--advantage_estimator", "maxrl"],
            **TEACHER_PAIR,
            "control": ["--loss_type", "grpo", "--null_reward_control", "true"],
        }
    if name == "medium":
        return "chat_arithmetic_medium", {
            "grpo": ["--loss_type", "grpo"],
            "grpo_resample": [
                "--loss_type", "grpo", "--dynamic_sampling", "resample", "--dynamic_sampling_max_rounds", "3",
            ],
            "grpo_greso": ["--loss_type", "grpo", "--dynamic_sampling", "greso", "--dynamic_sampling_max_rounds", "3"],
            # a prompt opened with 4 completions, given up when they agree, else topped up to a group of 8
            "grpo_adaptive_budget": [
                "--loss_type", "grpo", "--dynamic_sampling", "adaptive_budget", "--dynamic_sampling_max_rounds", "3",
                "--adaptive_budget_first_size", "4", "--adaptive_budget_min_size", "8",
                "--adaptive_budget_give_up_size", "4",
            ],
            "maxrl": ["--loss_type", "grpo", "--advantage_estimator", "maxrl"],
            **TEACHER_PAIR,
            "control": ["--loss_type", "grpo", "--null_reward_control", "true"],
        }
    if name == "offpolicy":
        updates = ["--num_iterations", "8", "--max_steps", "80"]
        runs = {loss: ["--loss_type", loss, *updates] for loss in ["dppo", "topr", "m2po"]}
        # the dppo the recorded runs trained: prime-rl's KL term and token mean (dppo's defaults are now the paper's)
        runs["dppo"] += ["--dppo_kl_coef", "0.001", "--loss_aggregation", "token_mean_global"]
        # `--loss_type dapo` alone is TRL's dapo: its aggregation, with ε_high = ε = 0.2 (clip-higher's 0.28 comes
        # with configs/dapo.yaml), so the symmetric run is plain `dapo` and clip-higher sets ε_high
        runs["dapo_symmetric"] = ["--loss_type", "dapo", *updates]
        runs["dapo_clip_higher"] = ["--loss_type", "dapo", "--epsilon_high", "0.28", *updates]
        return "chat_arithmetic", runs
    if name == "gemma":
        # the base model in the few-shot format (docs/models.md); the model's own preset gives learning rate 5e-5
        # and 24 new tokens (its answer line on every level), unless the invocation's flags override them
        gemma = ["--model_name_or_path", "gemma3-270m"]
        runs = {loss: ["--loss_type", loss, *gemma] for loss in LOSSES}
        runs["control"] = ["--loss_type", "grpo", "--null_reward_control", "true", *gemma]
        runs["trl_grpo"] = ["--trainer", "trl", "--loss_type", "grpo", *gemma]
        return "chat_arithmetic", runs
    if name == "methods":
        return "chat_arithmetic", method_runs()
    if name == "tools":
        return "chat_arithmetic_calculator", tool_runs()
    if name == "trl":
        return "chat_arithmetic", {
            f"trl_{loss}": ["--trainer", "trl", "--loss_type", loss] for loss in ["grpo", "dapo"]
        }
    raise SystemExit(f"--plan: easy, medium, hard, offpolicy, methods, tools, trl or gemma, got {name!r}")


def command(task: str, flags: list[str], seed: int, out: Path, extra: list[str], resume: bool = False) -> list[str]:
    """One run's command; `resume` continues it from its last complete checkpoint instead of starting afresh."""
    trainer = flags[:2] if flags[:1] == ["--trainer"] else []
    rest = flags[2:] if trainer else flags
    start = ["--resume_from_checkpoint", "true"] if resume else ["--overwrite_output_dir", "true"]
    return [
        sys.executable, "benchmarks/lib/real_model_run.py", *trainer, "--task", task, "--seed", str(seed),
        "--output_dir", str(out), *start, "--write_report", "false", *rest, *extra,
    ]


def resumable(out: Path) -> bool:
    """Whether an earlier invocation left this run a complete checkpoint to go on from."""
    from trl_zoo.components.resume import last_complete_checkpoint

    return out.is_dir() and last_complete_checkpoint(str(out), lambda *_: None) is not None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--only", default=None, help="Comma-separated run names of the plan.")
    parser.add_argument("--parallel", type=int, default=14)
    parser.add_argument("--deadline", type=float, default=560, help="Seconds; runs still going are stopped.")
    parser.add_argument("--start_until", type=float, default=None,
                        help="Seconds; no run starts after this (one that could not finish by the deadline).")
    parser.add_argument("--skip_done", action="store_true", help="Leave out runs that finished (summary.json exists).")
    parser.add_argument("--save_steps", type=int, default=10, help="Checkpoint every N steps (what a stopped run "
                        "resumes from); 0: no checkpoints.")
    parser.add_argument("--list", action="store_true")
    args, extra = parser.parse_known_args(argv)
    if args.save_steps:
        extra = ["--save_strategy", "steps", "--save_steps", str(args.save_steps), "--save_total_limit", "1", *extra]
    plans = [plan(name) for name in args.plan.split(",")]
    only = set(args.only.split(",")) if args.only else None
    seeds = [int(s) for s in args.seeds.split(",")]
    jobs = []
    # seeds outermost, so that a deadline cuts whole configurations' last seeds rather than whole configurations
    for seed in seeds:
        for task, runs in plans:
            for name, flags in runs.items():
                out = Path(args.out) / task / name / f"seed{seed}"
                if (only and name not in only) or (args.skip_done and (out / "summary.json").exists()):
                    continue
                resume = args.skip_done and resumable(out)
                jobs.append((name, seed, out, command(task, flags, seed, out, extra, resume)))
    if args.list:
        for *_, cmd in jobs:
            print(" ".join(cmd))
        return 0
    started, running, finished = time.time(), [], []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    while running or (jobs and not (args.start_until is not None and time.time() - started > args.start_until)):
        late = args.start_until is not None and time.time() - started > args.start_until
        while jobs and len(running) < args.parallel and not late:
            name, seed, out, cmd = jobs.pop(0)
            out.mkdir(parents=True, exist_ok=True)
            log = open(out / "log.txt", "a" if "--resume_from_checkpoint" in cmd else "w")
            running.append((name, seed, out, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)))
        time.sleep(2)
        for entry in list(running):
            if entry[3].poll() is not None:
                running.remove(entry)
                finished.append((entry[0], entry[1], entry[3].returncode))
                print(f"[{time.time() - started:5.0f} s] {entry[0]} seed{entry[1]}: exit {entry[3].returncode}",
                      flush=True)
        if time.time() - started > args.deadline:
            for name, seed, out, process in running:
                process.kill()
                print(f"[deadline] {name} seed{seed} stopped", flush=True)
            print(f"[deadline] {len(jobs)} runs never started", flush=True)
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
