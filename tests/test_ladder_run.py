"""benchmarks/lib/ladder_run.py on the CPU, tiny shape: a run of TRL at its best prints its RESULT, and `--kernels N`
profiles exactly optimizer step N of the training."""

import json

from benchmarks.lib import ladder_run


def test_kernels_profiles_the_one_step_asked_for(capsys):
    ladder_run.main(["--contender", "trl_best", "--shape", "tiny", "--prompts", "2", "--num_generations", "4",
                     "--micro_batch", "4", "--prompt_length", "8", "--completion_length", "8", "--steps", "4",
                     "--kernels", "2"])
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert result["steps"] == 4 and len(result["step_times"]) == 4
    kernels = result["kernels"]
    assert kernels["step"] == 2 and kernels["seconds"] > 0 and kernels["launches"] > 0 and len(kernels["top"]) == 12
