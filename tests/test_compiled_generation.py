"""compile_generation: the generation config TRL built with compile off is switched to transformers' compiled
decoding (static cache), the decoding really runs compiled, its logits equal the eager ones up to float rounding, a
training step runs, and the option is refused with one line where it cannot work."""

from __future__ import annotations

import copy
import shutil

import pytest
import torch
from peft import LoraConfig

from tests import tiny
from tests.trl_internals import compiles_on_all_devices
from trl_zoo import GRPOConfig, GRPOTrainer


def trainer(compile_generation: bool, **overrides):
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    return tiny.make_trainer(GRPOTrainer, GRPOConfig, peft_config=lora, compile_generation=compile_generation,
                             max_steps=1, **overrides)


def test_the_generation_config_is_switched_to_compiled_decoding():
    off, on = trainer(False), trainer(True)
    assert off.generation_config.disable_compile and off.generation_config.cache_implementation is None
    assert not on.generation_config.disable_compile
    assert on.generation_config.cache_implementation == "static"
    assert compiles_on_all_devices(on.generation_config.compile_config)  # a CPU: transformers compiles only if told
    assert on.generation_config.max_new_tokens == off.generation_config.max_new_tokens
    default = on.generation_config.compile_config
    assert (default.backend, default.mode) == ("inductor", "reduce-overhead")  # transformers' CompileConfig()
    graphs = trainer(True, compile_generation_backend="cudagraphs").generation_config.compile_config
    assert (graphs.backend, graphs.mode, graphs.fullgraph) == ("cudagraphs", None, default.fullgraph)


def greedy(model, config, ids):
    config = copy.deepcopy(config)
    config.update(do_sample=False, return_dict_in_generate=True, output_logits=True, max_new_tokens=5,
                  eos_token_id=None)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)


NO_COMPILER = not (shutil.which("c++") or shutil.which("g++"))


@pytest.mark.parametrize("backend", [
    pytest.param("inductor", marks=pytest.mark.skipif(NO_COMPILER, reason="inductor compiles C++ on a CPU")),
    "cudagraphs",  # on a CPU the traced graph runs eagerly (no CUDA graphs): the trace and the plumbing are tested
])
def test_decoding_runs_compiled_with_the_eager_logits_and_a_step_trains(backend):
    from torch._dynamo.utils import counters

    on = trainer(True, compile_generation_backend=backend)
    model = on.accelerator.unwrap_model(on.model)
    ids = torch.tensor([[5, 9, 12, 7, 3, 11], [4, 8, 8, 2, 6, 10]])
    eager_config = copy.deepcopy(on.generation_config)
    eager_config.update(disable_compile=True, cache_implementation=None)
    graphs = counters["stats"]["unique_graphs"]
    compiled, eager = greedy(model, on.generation_config, ids), greedy(model, eager_config, ids)
    assert counters["stats"]["unique_graphs"] > graphs, "generate did not compile its decoding"
    # a row's decode step k (k ≥ 1: step 0 is the eager prefill) is comparable while the row's tokens before it are
    # the same token ids in both (a near-tie may flip one on some CPU; the other row still counts)
    compared = 0
    for row in range(ids.size(0)):
        for k in range(1, len(compiled.logits)):
            prefix = ids.size(1) + k
            if (compiled.sequences[row, :prefix] != eager.sequences[row, :prefix]).any():
                break
            torch.testing.assert_close(compiled.logits[k][row], eager.logits[k][row], atol=1e-4, rtol=1e-4)
            compared += 1
    assert compared >= 3, f"only {compared} compiled decode steps had the eager tokens before them"
    on.train()
    assert on.state.global_step == 1


@pytest.mark.parametrize("overrides, fragment", [
    ({"use_vllm": True}, "use_vllm"),
    ({"use_transformers_continuous_batching": True}, "use_transformers_continuous_batching"),
    ({"cache_implementation": "dynamic"}, "cache_implementation ('dynamic' is not a compileable cache"),
])
def test_refused_where_it_cannot_work_when_the_config_is_built(overrides, fragment):
    with pytest.raises(ValueError, match=r"^compile_generation: not with ") as error:
        GRPOConfig(**tiny.config_kwargs(compile_generation=True, **overrides))
    assert fragment in str(error.value) and str(error.value).endswith("set compile_generation=False.")


@pytest.mark.parametrize("overrides, message", [
    ({"compile_generation_backend": "cudagraphs"},
     "compile_generation_backend='cudagraphs' has no effect without compile_generation=True; set both or neither."),
    ({"compile_generation": True, "compile_generation_backend": "aot_eager"}, "compile_generation_backend"),
])
def test_the_backend_is_checked_when_the_config_is_built(overrides, message):
    with pytest.raises(ValueError) as error:
        GRPOConfig(**tiny.config_kwargs(**overrides))
    assert message in str(error.value) and "\n" not in str(error.value)
