"""A character tokenizer and tiny causal LMs built from a config: no hub, no download.

Used by the offline quickstart, the tests and the benchmarks. The tokenizer knows digits, lowercase letters,
a few symbols and three special tokens; every character is one token, so arithmetic tasks are easy to read.

Tests: tests/test_testbed_task.py and tests/test_bad_input_more.py build them directly; every trainer test through
tests/tiny.py.
"""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>"]
CHARACTERS = list(string.digits + string.ascii_lowercase + " +-*=?.,:;()<>/'!")


def build_char_tokenizer(vocab_size: int | None = None) -> PreTrainedTokenizerFast:
    """One token per character; `<eos>` ends a completion, `<pad>` pads. With `vocab_size`, the vocabulary is padded
    to that many tokens with `<x0>`, `<x1>`, … (never produced by encoding; decoded when sampled)."""
    base = SPECIAL_TOKENS + CHARACTERS
    padding = [f"<x{i}>" for i in range((vocab_size or len(base)) - len(base))]
    vocab = {token: i for i, token in enumerate(base + padding)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="?"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="?"
    )
    wrapped.padding_side = "left"
    return wrapped


def build_tiny_causal_lm(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    max_positions: int = 128,
    seed: int = 0,
) -> Qwen2ForCausalLM:
    """A small Qwen2-architecture causal LM with random weights (deterministic for a given seed)."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model
