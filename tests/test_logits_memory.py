"""No trl_zoo pass materialises full-vocabulary logits where TRL's own passes do not.

With Gemma's 262,144-token vocabulary, logits of shape [B, T, V] are the memory peak of a log-prob pass: 8 rows of
512 tokens in float32 are 4.3 GB. TRL 1.16 never builds them outside generation: `_get_per_token_logps_and_entropies`
calls the model with `fused_lm_head=True` (TRL's `add_fused_lm_head`), which projects the hidden states through the
LM head in tiles of at most 32,768 vocabulary columns and keeps per-token log-probs (and entropy, Σ π²) only. The
extra passes trl_zoo adds over a generation batch — the policy's log-probs for the reward KL, ‖s‖² for the
optimal baseline, the teacher's log-probs, the critic's values, the old and current MoE router statistics — must
do the same. Generation itself computes [rows, V] logits per decoding step (TRL's and transformers' own).

The check: a `TorchDispatchMode` sees every tensor any operator returns during a training step of a tiny model
whose vocabulary (V = 65,536) is wider than TRL's tile, and records the largest with V as its last dimension, in
rows (numel / V). A full-logits pass over the micro-batch would reach rows = B · T (a positive control shows the
recorder catches one); TRL's tiles never have V columns, and generation's per-step logits have at most the
generation batch's rows. Each pass is run on, and the largest is asserted to stay at generation's size.
"""

import functools
import tempfile

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

import trl_zoo
from tests import tiny
from trl_zoo.tasks.tiny import build_char_tokenizer

VOCAB = 65536  # wider than TRL's LM-head tile (32,768 columns): a tensor with V columns is a full-vocabulary one
ROWS = 8  # per_device_train_batch_size: the generation batch's rows (steps_per_generation = 1)


@functools.lru_cache(maxsize=1)
def wide_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny tests' character tokenizer with the vocabulary padded to VOCAB tokens."""
    return build_char_tokenizer(VOCAB)


def _ids(config_cls, **extra):
    tokenizer = wide_tokenizer()
    return config_cls(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, max_position_embeddings=64, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
        **extra,
    )


def dense_model(seed: int = 0):
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(_ids(Qwen2Config))


def moe_model(seed: int = 0):
    torch.manual_seed(seed)
    return Qwen3MoeForCausalLM(_ids(Qwen3MoeConfig, moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2))


@functools.lru_cache(maxsize=1)
def teacher_dir() -> str:
    path = tempfile.mkdtemp(prefix="trl_zoo_wide_teacher_")
    dense_model(seed=3).save_pretrained(path)
    wide_tokenizer().save_pretrained(path)
    return path


class LargestVocabularyTensor(TorchDispatchMode):
    """Records the largest tensor any operator returns whose last dimension is the vocabulary, in rows; views
    (e.g. the LM head's weight transposed to [H, V] for its matmul) allocate nothing and are left out."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab
        self.rows = 0
        self.shape = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view:
            return out
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.dim() >= 1 and tensor.shape[-1] == self.vocab:
                rows = tensor.numel() // self.vocab
                if rows > self.rows:
                    self.rows, self.shape = rows, tuple(tensor.shape)
        return out


def largest_in_one_step(model, **overrides) -> LargestVocabularyTensor:
    peft_config = overrides.pop("peft_config", None)
    args = trl_zoo.GRPOConfig(**tiny.config_kwargs(max_steps=1, per_device_train_batch_size=ROWS, **overrides))
    trainer = trl_zoo.GRPOTrainer(
        model=model, reward_funcs=tiny.digit_reward, args=args, train_dataset=tiny.prompts_dataset(),
        processing_class=wide_tokenizer(), peft_config=peft_config,
    )
    recorder = LargestVocabularyTensor(VOCAB)
    with recorder:
        trainer.train()
    assert trainer.state.global_step == 1
    return recorder


def test_the_recorder_sees_a_full_logits_forward():
    """Positive control: an ordinary forward of 8 rows of 12 tokens builds 96 rows of V logits."""
    recorder = LargestVocabularyTensor(VOCAB)
    model = dense_model()
    with recorder, torch.no_grad():
        model(input_ids=torch.ones(ROWS, 12, dtype=torch.long))
    assert recorder.rows == ROWS * 12  # the projection returns [8 · 12, V], then viewed as [8, 12, V]


def test_trls_own_passes_keep_to_generations_logits():
    """TRL's policy forward, old log-probs (num_iterations 2) and reference (β > 0, a frozen copy): only generation's
    per-step [rows, V] logits have V columns."""
    recorder = largest_in_one_step(dense_model(), num_iterations=2, beta=0.04)
    assert 0 < recorder.rows <= ROWS, recorder.shape


@pytest.mark.parametrize("name, overrides", [
    ("reward KL (policy log-probs)", dict(beta=0.04, kl_placement="reward")),
    ("‖s‖² (optimal baseline)", dict(advantage_estimator="optimal_baseline")),
    ("teacher log-probs", dict(teacher_coef=0.1)),
    ("critic values (gae)", dict(advantage_estimator="gae")),
])
def test_trl_zoo_passes_keep_to_generations_logits(name, overrides):
    if "teacher_coef" in overrides:
        overrides = {**overrides, "teacher_model": teacher_dir()}
    recorder = largest_in_one_step(dense_model(), **overrides)
    assert 0 < recorder.rows <= ROWS, f"{name}: a tensor of shape {recorder.shape}"


def test_router_statistics_keep_to_generations_logits():
    """rspo with num_iterations 2: the old routers' pass over the generation batch and the current routers in the
    loss forward."""
    recorder = largest_in_one_step(moe_model(), loss_type="rspo", num_iterations=2)
    assert 0 < recorder.rows <= ROWS, recorder.shape


def test_a_trl_zoo_pass_with_full_logits_would_be_caught(monkeypatch):
    """Negative control: the reward-KL pass rewritten naively (an ordinary forward, then log-softmax) builds
    [rows · T, V] logits inside the training step, and the check above would fail on it."""
    from trl_zoo.components.advantages import Advantages
    from trl_zoo.hooks.model_inputs import forward_inputs

    def naive_policy_logps(self, output):
        input_ids, attention_mask, length, _ = forward_inputs(output)
        with torch.no_grad():
            logits = self.trainer.model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -length - 1 : -1]
        return logits.log_softmax(-1).gather(-1, input_ids[:, -length:, None]).squeeze(-1)

    monkeypatch.setattr(Advantages, "_policy_logps", naive_policy_logps)
    recorder = largest_in_one_step(dense_model(), beta=0.04, kl_placement="reward")
    assert recorder.rows >= ROWS * (5 + 8)  # 8 rows of a ≥ 5-token prompt and 8 completion tokens
