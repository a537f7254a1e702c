"""The compiled-decoding benchmark: its dealing of configurations to devices and one tiny run on the CPU (every call
generates exactly the tokens asked for; torch's counters are read). No wall-clock asserts."""

from __future__ import annotations

import json

import pytest

from benchmarks import compiled_decoding as cd


def test_configurations_are_dealt_to_the_shortest_queue_warm_after_cold():
    names = ["eager", "static", "inductor", "inductor_warm", "cudagraphs", "cudagraphs_mutation"]
    assert cd.queues_for(names, 2) == [["eager", "inductor", "inductor_warm"],
                                       ["static", "cudagraphs", "cudagraphs_mutation"]]
    assert cd.queues_for(["inductor_peft", "eager", "inductor_peft_warm", "static"], 2) == [
        ["inductor_peft", "inductor_peft_warm"], ["eager", "static"]]
    assert cd.queues_for(["inductor_warm", "static"], 2) == [["inductor_warm"], ["static"]]  # no cold one: alone


def test_tiny_run_on_the_cpu(tmp_path):
    assert cd.main(["--out", str(tmp_path), "--tiny", "--batch", "3", "--new_tokens", "5", "--calls", "2"]) == 0
    for name in cd.TINY_CONFIGS.split(","):
        record = json.loads((tmp_path / f"{name}.json").read_text())
        assert record["new_tokens"] == 5 and len(record["call_seconds"]) == 2
        assert record["tokens_per_second"] == 3 * 5 / record["steady_call_seconds"]
        assert record["unique_graphs"] == 0 and record["cudagraph_skips"] == 0  # nothing compiled
    summary = (tmp_path / "summary.md").read_text().splitlines()
    assert [row.split("|")[1].strip() for row in summary[2:]] == ["eager", "static", "cuda_graph"]
    assert summary[2].split("|")[4].strip() == "1.00"  # eager against itself
    graphed = json.loads((tmp_path / "cuda_graph.json").read_text())  # on a CPU the step runs eagerly: 4 per call
    assert (graphed["graph_eager_steps"], graphed["graph_captures"], graphed["graph_replays"]) == (2 * 4, 0, 0)


def test_the_trainers_generation_model_merged_adapter_in_train_mode(tmp_path):
    """eager_peft generates through the PEFT wrapper with the adapter merged (the trainer's state while generating
    with merge_adapter_for_generation)."""
    assert cd.main(["--out", str(tmp_path), "--tiny", "--configs", "eager_peft,eager_peft_fp32_autocast", "--batch",
                    "2", "--new_tokens", "3", "--calls", "1"]) == 0
    from trl_zoo.tasks.tiny import build_char_tokenizer, build_tiny_causal_lm

    model = cd.merged_adapter_model(build_tiny_causal_lm(build_char_tokenizer()))
    lora_layers = [m for m in model.modules() if hasattr(m, "merged") and hasattr(m, "lora_A")]
    assert model.training and lora_layers and all(m.merged for m in lora_layers)


def test_unknown_configuration_is_named(tmp_path):
    with pytest.raises(SystemExit, match="--configs: unknown \\['fast'\\]"):
        cd.main(["--out", str(tmp_path), "--configs", "eager,fast"])
