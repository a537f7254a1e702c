"""Building blocks for the GPU benchmarks: model shapes built from a config (random weights), a tokenizer made in
code with the model's vocabulary size, a prompt dataset, and a trainer of either implementation (TRL or trl_zoo)
on the same settings.
"""

from __future__ import annotations

import random

import torch
from datasets import Dataset
from datasets.fingerprint import Hasher, generate_random_fingerprint
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

# datasets fingerprints every table by pickling its state with dill; on some images (pandas 3.0 with pyarrow 26)
# that recurses without end on pyarrow's MonthDayNano type. Benchmarks need no dataset cache: hash randomly.
Hasher.hash = classmethod(lambda cls, value: generate_random_fingerprint())

# Architecture shapes of public checkpoints; weights are random (speed and memory do not depend on them).
SHAPES = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1000, tie_word_embeddings=True),
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                       num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True, head_dim=64),
    "llama3.2-3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
                        num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True, head_dim=128),
}
LLAMA_SHAPES = {"llama3.2-1b", "llama3.2-3b"}


def numbered_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """Token i is the word "<i>"; 0 pads, 1 ends a sequence. Any id the model emits decodes."""
    vocab = {f"<{i}>": i for i in range(vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<2>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<0>", eos_token="<1>", unk_token="<2>")
    wrapped.padding_side = "left"
    return wrapped


def random_model(shape: str, dtype=torch.bfloat16, device=None, seed: int = 0) -> Qwen2ForCausalLM | LlamaForCausalLM:
    llama = shape in LLAMA_SHAPES
    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if llama else (Qwen2Config, Qwen2ForCausalLM)
    config = config_cls(**SHAPES[shape], max_position_embeddings=4096, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = model_cls(config)
    finally:
        torch.set_default_dtype(previous)
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = 1
    return model


def load_4bit(shape: str, folder):
    """The random model of `shape` saved once in bf16 under `folder`, loaded back quantised to 4-bit NF4 with
    bitsandbytes (QLoRA's load; needs a GPU)."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    path = Path(folder) / f"random-{shape}"
    if not (path / "config.json").exists():
        model = random_model(shape)
        model.save_pretrained(path)
        del model
        torch.cuda.empty_cache()
    quantization = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
        bnb_4bit_use_double_quant=True,
    )
    return AutoModelForCausalLM.from_pretrained(
        path, quantization_config=quantization, dtype=torch.bfloat16, device_map={"": 0}
    )


def prompt_dataset(num_prompts: int, prompt_length: int, vocab_size: int, seed: int = 0) -> Dataset:
    rng = random.Random(seed)
    prompts = [" ".join(f"<{rng.randrange(3, vocab_size)}>" for _ in range(prompt_length)) for _ in range(num_prompts)]
    return Dataset.from_dict({"prompt": prompts})


def length_parity_reward(completion_ids, **kwargs):
    """A reward with spread and no meaning: the parity of the completion's token-id sum."""
    return [float(sum(ids) % 2) for ids in completion_ids]


def short_run_args() -> dict:
    """The config fields every benchmark run shares: a small learning rate, bf16 on a GPU, a log line a step,
    nothing saved or reported, no progress bar."""
    cuda = torch.cuda.is_available()
    return dict(learning_rate=1e-5, bf16=cuda, use_cpu=not cuda, logging_steps=1, report_to="none",
                save_strategy="no", disable_tqdm=True)


def all_linear_lora(r: int):
    """LoRA of rank r (alpha 2r) on every linear layer."""
    from peft import LoraConfig

    return LoraConfig(r=r, lora_alpha=2 * r, target_modules="all-linear", task_type="CAUSAL_LM")


def trainer_classes(implementation: str):
    if implementation == "trl":
        import trl

        return trl.GRPOTrainer, trl.GRPOConfig
    import trl_zoo

    return trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig


BANDWIDTH = 4.3e12  # bytes/s: device-to-device copy on an H200, as benchmarks/step_profile.py


def decode_floor_s(shape: str, rows: int, prompt_length: int, completion_length: int) -> float:
    """Seconds to read the bf16 weights once per decode step and each row's KV cache (bytes / BANDWIDTH)."""
    s = SHAPES[shape]
    head_dim = s.get("head_dim", s["hidden_size"] // s["num_attention_heads"])
    layers, hidden, inter, vocab = s["num_hidden_layers"], s["hidden_size"], s["intermediate_size"], s["vocab_size"]
    kv = 2 * s["num_key_value_heads"] * head_dim
    per_layer = hidden * (s["num_attention_heads"] * head_dim) * 2 + hidden * kv + 3 * hidden * inter
    weights = 2 * (layers * per_layer + vocab * hidden)  # bytes (bf16), the LM head read once
    kv_bytes_per_token = 2 * layers * kv
    mean_context = prompt_length + completion_length / 2
    per_step = weights + rows * mean_context * kv_bytes_per_token
    return completion_length * per_step / BANDWIDTH
