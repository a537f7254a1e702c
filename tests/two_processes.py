"""Run a worker script on two CPU processes (gloo) with `accelerate launch` — or on one distributed process, or
plainly — and read back the JSON it writes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKER_TIMEOUT_S = 120  # a run takes ~15 s on 2 CPU cores; the workers dump their stacks and exit after this


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_two_processes(script: str, output: Path, *script_args: str, config_file: str | None = None) -> dict:
    """`tests/scripts/<script>` on 2 processes, writing its JSON to `output` (its first argument); the parsed JSON.
    DDP (`--multi_gpu`), or the setup of an accelerate `config_file` (a path from the repository root)."""
    setup = ["--multi_gpu"] if config_file is None else ["--config_file", str(REPO / config_file)]
    command = [
        sys.executable, "-m", "accelerate.commands.launch", *setup, "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", "PORT",
        str(REPO / "tests" / "scripts" / script), str(output), *script_args,
    ]
    return _run_worker(command, output)


def launch_one_distributed_process(script: str, output: Path, *script_args: str) -> dict:
    """The same worker on a one-process distributed launch (torchrun, gloo): accelerate still wraps the model in
    DDP there (`accelerate launch --multi_gpu` refuses one process)."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port", "PORT",
        str(REPO / "tests" / "scripts" / script), str(output), *script_args,
    ]
    return _run_worker(command, output)


def run_without_launcher(script: str, output: Path, *script_args: str) -> dict:
    """The same worker as a plain process, without any process group."""
    return _run_worker([sys.executable, str(REPO / "tests" / "scripts" / script), str(output), *script_args], output)


def _run_worker(command: list[str], output: Path) -> dict:
    """Run a worker command (a "PORT" argument gets a free port) and return the JSON it wrote to `output`.

    A run that writes nothing is retried once: once in about twenty local runs a launch stalled before writing
    anything, and the stall was not reproduced since. The workers dump every thread's stack before they give up
    (`faulthandler`) and the warning keeps that dump, so a real deadlock still shows, and fails when it recurs."""
    environment = {**os.environ, "ACCELERATE_USE_CPU": "true", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    port_slot = command.index("PORT") if "PORT" in command else None
    for attempt in (1, 2):
        if port_slot is not None:
            command[port_slot] = str(_free_port())
        try:
            result = subprocess.run(
                command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S + 60
            )
            report = (
                f"exit code {result.returncode}\nstdout:\n{result.stdout[-2000:]}\nstderr:\n{result.stderr[-4000:]}"
            )
        except subprocess.TimeoutExpired as stalled:
            result, report = None, f"stalled; stderr:\n{_text(stalled.stderr)[-4000:]}"
        if output.exists():
            break
        if attempt == 1:
            warnings.warn(f"the worker run wrote nothing; retrying once. {report[-3000:]}")
    # The workers write their file after the last collective, so a complete file means every rank finished its
    # work; a non-zero exit after that can only come from process teardown, which is not what the tests check.
    assert output.exists(), report
    if result is None or result.returncode != 0:
        warnings.warn(f"the worker run finished its work but did not exit cleanly: {report[-600:]}")
    return json.loads(output.read_text())


def _text(stream) -> str:
    return stream.decode(errors="replace") if isinstance(stream, bytes) else (stream or "")


def write_result(path: str, result: dict):
    """Write the worker's JSON whole or not at all (the launcher takes an existing file as finished work)."""
    partial = f"{path}.partial"
    with open(partial, "w") as handle:
        json.dump(result, handle)
    os.replace(partial, path)


def force_fsdp_on_cpu_processes():
    """accelerate turns FSDP on only over accelerator devices (its CPU processes stay DDP, MULTI_CPU, whatever the
    config says); set the FSDP plugin the launcher's config describes on the CPU processes, as accelerate does on
    GPUs, so accelerate's FSDP preparation (torch's fully_shard over gloo) runs."""
    import os

    from accelerate import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    from transformers import Trainer

    create = Trainer.create_accelerator_and_postprocess

    def create_with_fsdp(self):
        create(self)
        state = self.accelerator.state
        if os.environ.get("ACCELERATE_USE_FSDP") == "true" and state.distributed_type == DistributedType.MULTI_CPU:
            state.fsdp_plugin = FullyShardedDataParallelPlugin()
            state.distributed_type = PartialState().distributed_type = DistributedType.FSDP
            self.is_fsdp_enabled = True

    Trainer.create_accelerator_and_postprocess = create_with_fsdp
