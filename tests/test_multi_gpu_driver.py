"""benchmarks/multi_gpu.py: its CPU smoke mode runs the cheapest part end to end on two gloo processes, and its
summariser's group checks read synthetic per-process batches right."""

import json
import subprocess
import sys
import time

from benchmarks.multi_gpu import REPO, plan, sampling_checks


def test_cpu_smoke_critic_part_writes_a_summary_row(tmp_path):
    result = subprocess.run(
        [sys.executable, "benchmarks/multi_gpu.py", "--cpu_smoke", "--smoke_model", "tiny", "--only", "critic_ddp",
         "--out", str(tmp_path), "--deadline", "100"],
        cwd=REPO, capture_output=True, text=True, timeout=150,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = (tmp_path / "summary.md").read_text()
    assert "| policy | 16384 |" in summary and "| yes |" in summary
    assert "| critic_ddp | gae | ok | 0 |" in summary


def test_sampling_checks_on_synthetic_batches():
    def batch(crcs, advantages, skipped=0.0):
        return {"rows": len(crcs), "prompt_crc": crcs, "advantages": advantages, "prompts_skipped": skipped}

    # groups of 4; the second group straddles the processes (rows 4-5 on rank 0, 0-1 on rank 1)
    rank_0 = {"batches": [batch([1, 1, 1, 1, 2, 2], [1, -1, 0, 0, 1, 1])]}
    rank_1 = {"batches": [batch([2, 2, 3, 3, 3, 3], [-1, -1, 0, 0, 0, 0])]}
    checks = sampling_checks([rank_0, rank_1], 4)
    assert checks["whole_groups"] and checks["skipped_equal"] and checks["equal_rows"]
    assert checks["spread"] == "2/3"
    rank_1["batches"][0]["prompt_crc"] = [2, 9, 3, 3, 3, 3]
    assert not sampling_checks([rank_0, rank_1], 4)["whole_groups"]
    rank_1["batches"][0] = batch([2, 2], [0, 0], skipped=1.0)
    checks = sampling_checks([rank_0, rank_1], 4)
    assert not checks["equal_rows"] and not checks["skipped_equal"]


def test_plan_lists_every_part_with_separate_processes(tmp_path):
    runs = plan(
        ["ddp_speed", "one_gpu_speed", "fsdp_parity", "sampling_ddp", "critic_ddp", "checkpoint"], tmp_path, False
    )
    names = [(run.part, run.name) for run in runs]
    assert names[:4] == [
        ("ddp_speed", "trl-1"), ("ddp_speed", "zoo-1"), ("ddp_speed", "trl-2"), ("ddp_speed", "zoo-2")
    ]
    assert sum(part == "fsdp_parity" for part, _ in names) == 8
    speed = runs[0].command
    assert "--gradient_accumulation_steps" in speed and speed[speed.index("--gradient_accumulation_steps") + 1] == "2"
    assert runs[4].env == {"CUDA_VISIBLE_DEVICES": "0"} and "accelerate" not in " ".join(runs[4].command)


def test_parity_runs_replay_the_ddp_references_completions(tmp_path):
    runs = {(run.part, run.name): run.command for run in plan(["fsdp_parity", "zero2_parity"], tmp_path, False)}
    reference = runs[("fsdp_parity", "grpo-ddp")]
    assert "--record_generations" in reference and "--replay_generations" not in reference
    for key in (("fsdp_parity", "grpo-fsdp2"), ("zero2_parity", "grpo-zero2")):
        command = runs[key]
        assert command[command.index("--replay_generations") + 1] == str(tmp_path / "fsdp_parity" / "grpo-ddp")
        assert "--record_generations" not in command


def test_parity_runs_take_two_updates_per_batch_and_cispo_its_presets_cap(tmp_path):
    runs = {(run.part, run.name): run.command for run in plan(["fsdp_parity"], tmp_path, False)}
    for loss in ("grpo", "gspo", "cispo"):
        for name in (f"{loss}-ddp", f"{loss}-fsdp2"):
            command = runs[("fsdp_parity", name)]
            assert command[command.index("--num_iterations") + 1] == "2"
            assert ("--epsilon_high" in command) == (loss == "cispo")
    cispo = runs[("fsdp_parity", "cispo-fsdp2")]
    assert cispo[cispo.index("--epsilon_high") + 1] == "5.0"


def test_cpu_smoke_runs_deepspeed_on_its_cpu_accelerator_and_the_rest_as_cpu_processes(tmp_path):
    from benchmarks.multi_gpu import cpu_smoke_env
    runs = {(run.part, run.name): run.command for run in plan(["fsdp_parity", "zero3_parity"], tmp_path, True)}
    assert cpu_smoke_env(runs[("zero3_parity", "grpo-zero3")]) == {"OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}
    for name in ("grpo-ddp", "grpo-fsdp2"):
        assert cpu_smoke_env(runs[("fsdp_parity", name)]) == {"OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}


def test_parity_rows_say_what_accelerate_really_ran(tmp_path):
    """A sharded config accelerate cannot honour falls back silently (FSDP on CPU processes runs as DDP): each row
    names the distributed type both runs recorded."""
    from benchmarks.multi_gpu import parity_section
    log = [{"step": 1, "loss": 0.5, "grad_norm": 0.25}]
    for folder, kind in (("fsdp_parity/grpo-ddp", "MULTI_GPU"), ("zero2_parity/grpo-zero2", "DEEPSPEED")):
        (tmp_path / folder).mkdir(parents=True)
        for rank in (0, 1):
            (tmp_path / folder / f"costs.rank{rank}.json").write_text(json.dumps(
                {"log_history": log, "distributed_type": f"DistributedType.{kind}", "peak_memory_gib": 1.0}))
    lines = parity_section(tmp_path, "zero2_parity", "zero2")
    row = next(line for line in lines if line.startswith("| grpo | 1 |"))
    assert row.rstrip(" |").endswith("MULTI_GPU ; DEEPSPEED") and "ran as: DDP ; ZeRO-2" in lines[2]
    # a sharded run without its DDP reference: the row still fills every column of the header
    (tmp_path / "zero2_parity/dapo-zero2").mkdir()
    (tmp_path / "zero2_parity/dapo-zero2/costs.rank0.json").write_text(json.dumps(
        {"log_history": log, "distributed_type": "DistributedType.DEEPSPEED"}))
    lines = parity_section(tmp_path, "zero2_parity", "zero2")
    alone = next(line for line in lines if line.startswith("| dapo |"))
    assert alone.count("|") == lines[2].count("|") and alone.rstrip(" |").endswith("DEEPSPEED")


def test_parity_parts_take_a_subset_of_the_losses(tmp_path):
    runs = plan(["fsdp_parity", "zero3_parity"], tmp_path, False, ["cispo"])
    assert [(run.part, run.name) for run in runs] == [
        ("fsdp_parity", "cispo-ddp"), ("fsdp_parity", "cispo-fsdp2"), ("zero3_parity", "cispo-zero3")]
    result = subprocess.run([sys.executable, "benchmarks/multi_gpu.py", "--list", "--losses", "grpo,ppo"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "unknown --losses ['ppo']" in result.stderr


def test_a_launch_whose_port_was_taken_starts_again_on_a_new_port(tmp_path, monkeypatch):
    """Between `free_port` and the launcher's bind another launch may take the port (EADDRINUSE in torch's
    rendezvous, seen on a GPU host): the driver starts the run again on a new port, other failures it keeps."""
    from benchmarks import multi_gpu
    from benchmarks.multi_gpu import Run, run_one
    ports = iter([41001, 41002, 41003])
    monkeypatch.setattr(multi_gpu, "free_port", lambda: next(ports))
    script = tmp_path / "launch.py"
    script.write_text(
        "import sys, pathlib\n"
        "marker = pathlib.Path(sys.argv[2])\n"
        "if not marker.exists():\n"
        "    marker.write_text('1'); print('port:', sys.argv[1], 'EADDRINUSE address already in use'); sys.exit(1)\n"
        "print('trained on port', sys.argv[1])\n")
    run = Run("ddp_speed", "zoo-1", [sys.executable, str(script), "PORT", str(tmp_path / "marker")],
              run_dir=tmp_path / "zoo-1")
    result = run_one(run, tmp_path, False, time.time() + 60)
    assert result["status"] == "ok" and result["port_retries"] == 1
    assert (tmp_path / "zoo-1" / "log.txt").read_text().strip() == "trained on port 41002"
    failing = Run("ddp_speed", "trl-1", [sys.executable, "-c", "import sys; sys.exit(3)", "PORT"],
                  run_dir=tmp_path / "trl-1")
    result = run_one(failing, tmp_path, False, time.time() + 60)
    assert (result["status"], result["rc"], result["port_retries"]) == ("failed", 3, 0)
