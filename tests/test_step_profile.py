"""benchmarks/step_profile.py: a record's seams become seconds per optimizer step that add up to the step, each floor
is the bytes or FLOPs it names at the card's rates, and on a CPU trainer the seams see every generate call, decode
step and log-prob pass of training (counts only; no wall-clock asserts)."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig

from benchmarks import step_profile
from benchmarks.step_profile import LOGPS, PREPARE, REWARDS
from tests import tiny
from trl_zoo import GRPOConfig, GRPOTrainer

FACTS = {"matmul_params": 100_000_000, "head_params": 20_000_000, "params": 110_000_000,
         "trainable_params": 1_000_000, "kv_elements_per_token": 11520}


def record():
    """Two cycles of two optimizer steps; the second cycle (steps 2, 3) is measured."""
    return {
        "config": "lora_graphed", "exit_code": 0, "optimizer_steps_per_generation": 2,
        "step_seconds": [5.0, 1.0, 3.0, 1.0],
        "block_seconds": {
            PREPARE: {"0": 4.0, "2": 2.0},
            f"{PREPARE} > transformers.generate": {"0": 3.0, "2": 1.5},
            f"{PREPARE} > {LOGPS}": {"2": 0.2},
            "old_logps": {"2": 0.1},  # skip_on_policy_old_logps's pass, its `extra_pass` name
            f"old_logps > {LOGPS}": {"2": 0.09},  # inside it: not counted twice
            f"{PREPARE} > {REWARDS}": {"2": 0.01},
            "compute_loss": {"0": 0.3, "1": 0.3, "2": 0.3, "3": 0.3},
        },
        "seam_seconds": {"decode": {"0": 2.0, "2": 1.0}, "prefill": {"2": 0.1}, "merge_or_copy": {"2": 0.05},
                         "backward": {"2": 0.4, "3": 0.4}, "optimizer": {"2": 0.05, "3": 0.05}},
        "seam_counts": {"decode": {"0": 2, "2": 2}},
        "generations": [
            {"step": 0, "training": False, "rows": 500, "prompt_width": 40, "decode_steps": 2,
             "weight_bytes": 270_000_000, "weight_dtype": "torch.bfloat16"},
            {"step": 2, "training": True, "rows": 256, "prompt_width": 40, "decode_steps": 2,
             "weight_bytes": 270_000_000, "weight_dtype": "torch.bfloat16"},
        ],
        "passes": [{"step": 2, "grad": False, "rows": 128, "width": 100, "logits_to_keep": 60},
                   {"step": 2, "grad": True, "rows": 32, "width": 100, "logits_to_keep": 60},
                   {"step": 3, "grad": True, "rows": 32, "width": 100, "logits_to_keep": 60}],
        "model": FACTS, "training_peak_gib": 3.75,
    }


def test_the_rows_are_per_optimizer_step_over_the_measured_cycle_and_add_up_to_the_step():
    steps, rows = step_profile.per_step(record())
    assert steps == [2, 3]
    expected = {"decode": 0.5, "prefill": 0.05, "generate_rest": 0.2, "merge_or_copy": 0.025, "old_logps": 0.15,
                "reward": 0.005, "prepare_rest": 0.12, "loss_forward": 0.3, "backward": 0.4, "optimizer": 0.05,
                "python_between": 0.2, "step": 2.0}
    assert rows == pytest.approx(expected)
    assert sum(rows[name] for name in step_profile.ROWS) == pytest.approx(rows["step"])


def test_each_floor_is_its_bytes_or_flops_at_the_cards_rate():
    floors = step_profile.floors(record(), [2, 3])
    # decode: 2 steps of 270 MB of weights + 256 rows × (40 + t) tokens × 11520 elements × 2 bytes, at 4.3 TB/s
    decode_bytes = 2 * 270_000_000 + 256 * (41 + 42) * 11520 * 2
    assert floors["decode"] == pytest.approx(decode_bytes / 4.3e12 / 2)
    # the training forward: 2 · (80 M body · 3200 tokens + 20 M head · 1920 kept positions) FLOPs a micro-batch
    forward = 2 * (80_000_000 * 32 * 100 + 20_000_000 * 32 * 60)
    assert floors["loss_forward"] == pytest.approx(forward / 790e12)
    assert floors["backward"] == pytest.approx(2 * forward / 790e12)
    assert floors["old_logps"] == pytest.approx(4 * forward / 790e12 / 2)  # 128 rows once, over two steps
    assert floors["optimizer"] == pytest.approx(28 * 1_000_000 / 4.3e12)
    assert floors["prefill"] == pytest.approx(max(2 * (80e6 * 256 * 40 + 20e6 * 256) / 790e12, 270e6 / 4.3e12) / 2)
    assert step_profile.decode_step_ms(record(), [2, 3]) == pytest.approx(500.0)


def test_the_tables_name_every_row_and_the_step_against_its_floor():
    second = {**record(), "step_seconds": [5.0, 1.0, 3.4, 1.0]}
    text = step_profile.summary_tables([record(), second])
    for label in step_profile.LABELS.values():
        assert f"| {label} |" in text
    line = next(row for row in text.splitlines() if row.startswith("| lora_graphed |"))
    assert "| 2 | 256 | 500.00 (211.86×) |" in line  # 2 repeats; 256 rows against the unfused 2.36 ms
    assert "| 2.100 (" in line and line.endswith("| 3.75 |")  # median of 2.0 and 2.2 s a step


def test_the_seams_see_every_generation_decode_step_and_pass_of_training_on_a_cpu(monkeypatch):
    from trl_zoo.components import decode_graph, decode_precision, generation_speed

    for owner, name in ((generation_speed, "merged_adapter"), (decode_precision, "decoding_copy"),
                        (decode_graph.GraphedDecodeStep, "__call__")):
        monkeypatch.setattr(owner, name, getattr(owner, name))  # what `install` wraps comes back after the test
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    trainer = tiny.make_trainer(GRPOTrainer, GRPOConfig, peft_config=lora, speed_recipe="lora_graphed",
                                generation_bf16_copy=True, bf16=True, max_steps=4, gradient_accumulation_steps=1)
    seams = step_profile.Seams()
    seams.install(trainer)
    trainer.train()
    generations = [g for g in seams.generations if g["training"]]
    assert [g["step"] for g in generations] == [0, 2]  # one generation batch per two optimizer steps
    assert all(g["rows"] == 16 and g["weight_dtype"] == "torch.bfloat16" for g in generations)
    # merged: the adapter is off while decoding, so only the bf16 copy's bytes are read
    base = trainer.accelerator.unwrap_model(trainer.model).get_base_model()
    assert generations[0]["weight_bytes"] == 2 * sum(p.numel() for n, p in base.named_parameters() if "lora_" not in n)
    decode_counts = seams.counts["decode"]
    assert sum(decode_counts.values()) == sum(g["decode_steps"] for g in seams.generations) > 0
    assert sum(seams.counts["prefill"].values()) == len(seams.generations)
    grad_passes = [p for p in seams.passes if p["grad"]]
    assert len(grad_passes) == 4 and all(p["rows"] == 8 for p in grad_passes)
    assert {p["step"] for p in seams.passes if not p["grad"]} == {0, 2}  # the second step's old log-probs
    assert set(seams.seconds["backward"]) == set(seams.seconds["optimizer"]) == {0, 1, 2, 3}
    assert set(seams.seconds["merge_or_copy"]) == {0, 2}
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
