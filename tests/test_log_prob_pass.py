"""benchmarks/log_prob_pass.py on the CPU, tiny shape: every configuration runs a step of several micro-batches, and
`prompt_once`'s forwarded positions are U·(P − 1) + R·(C + 1) per micro-batch against TRL's R·(P + C)."""

import json

from benchmarks import log_prob_pass


def test_every_configuration_runs_several_micro_batches_and_counts_its_positions(capsys):
    # 2 prompts × 4 completions, prompts of 12 tokens, completions of 8; micro-batches of 4 rows: one prompt each
    log_prob_pass.main(["--shape", "tiny", "--prompts", "2", "--num_generations", "4", "--prompt_length", "12",
                        "--completion_length", "8", "--micro_batches", "4", "--repeats", "1", "--kernels",
                        "--top", "2"])
    results = [json.loads(line[len("RESULT "):]) for line in capsys.readouterr().out.splitlines()
               if line.startswith("RESULT ")]
    assert [r["configuration"] for r in results] == list(log_prob_pass.CONFIGURATIONS)
    positions = {r["configuration"]: r["positions"] for r in results}
    assert positions.pop("prompt_once") == 2 * (1 * (12 - 1) + 4 * (8 + 1))
    assert set(positions.values()) == {8 * (12 + 8)}
    for r in results:
        assert r["rows"] == 8 and r["seconds"] > 0 and r["launches"] > 0 and len(r["kernels"]) == 2
