"""Every trl_zoo table entry and every option that touches generation or the weights, under real vLLM (TRL's colocate
mode) on the packaged SmolLM2-135M-Instruct with LoRA: two optimizer steps each, finite, the documented outcome;
TRL's own losses equal to TRL's on the same vLLM-generated batch, its importance-sampling modes giving trl_zoo's
losses TRL's ratios; the #6789 refusal where vLLM's log-probs are read under truncated sampling and nowhere else;
the LoRA adapter reaching vLLM at each weight sync. tests/gpu/conftest.py says how the engine is shared."""

from __future__ import annotations

import copy
import functools
import importlib.util
import math
import os
import tempfile

import pytest
import torch
import trl
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoTokenizer
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

import trl_zoo
from tests import tiny
from tests.gpu.conftest import STAND_IN
from tests.tiny import relative_error
from tests.trl_internals import generate_and_score, mark_vllm_weights, metric_values
from trl_zoo.registry import ADVANTAGES, LOSSES, SAMPLERS
from trl_zoo.tasks.calculator import Calculator, use_tool_template

GROUP = 4
LORA = dict(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM")
# TRL's loss_type for each trl_zoo loss that TRL ships (gspo: TRL's grpo at sequence level)
TRL_LOSSES = {
    "grpo": dict(loss_type="grpo"),
    "bnpo": dict(loss_type="bnpo"),
    "dr_grpo": dict(loss_type="dr_grpo"),
    "dapo": dict(loss_type="dapo"),
    "cispo": dict(loss_type="cispo"),
    "sapo": dict(loss_type="sapo"),
    "luspo": dict(loss_type="luspo"),
    "vespo": dict(loss_type="vespo", vllm_importance_sampling_mode="token_truncate"),  # TRL: token modes only
    "gspo": dict(loss_type="grpo", importance_sampling_level="sequence"),
}
IS_MODES = ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


@functools.cache
def tokenizer(path: str):
    if STAND_IN:
        return tiny.tokenizer()
    return AutoTokenizer.from_pretrained(path)


def prompts(n: int = 16, answers: bool = False, reference_rewards: bool = False) -> Dataset:
    dataset = tiny.prompts_dataset(n, answers=answers)
    return tiny.with_reference_rewards(dataset) if reference_rewards else dataset


def config_kwargs(**overrides) -> dict:
    kwargs = dict(
        output_dir=tempfile.mkdtemp(prefix="trl_zoo_gpu_"),
        per_device_train_batch_size=8,
        num_generations=GROUP,
        max_completion_length=16,
        learning_rate=1e-4,
        max_steps=2,
        logging_steps=1,
        report_to="none",
        bf16=False,
        use_cpu=STAND_IN,
        save_strategy="no",
        seed=0,
        temperature=1.0,
        disable_tqdm=True,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        model_init_kwargs={"dtype": "float32"},
    )
    kwargs.update(overrides)
    return kwargs


def make(
    path,
    trainer_cls=trl_zoo.GRPOTrainer,
    config_cls=trl_zoo.GRPOConfig,
    lora=True,
    dataset=None,
    reward_funcs=None,
    processing_class=None,
    environment_factory=None,
    **overrides,
):
    torch.manual_seed(0)
    return trainer_cls(
        model=path,
        reward_funcs=reward_funcs or tiny.digit_reward,
        args=config_cls(**config_kwargs(**overrides)),
        train_dataset=dataset if dataset is not None else prompts(answers="expert_column" in overrides),
        processing_class=processing_class or tokenizer(path),
        peft_config=LoraConfig(**LORA) if lora else None,
        environment_factory=environment_factory,
    )


def logged(trainer, name):
    return [row[name] for row in trainer.state.log_history if name in row]


def adapter(trainer) -> dict:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def trains(trainer, steps: int = 2, sampled_by_policy: bool = True) -> list[float]:
    """Train; assert `steps` finite losses, the trainable weights moved, and (`sampled_by_policy`) vLLM's log-probs
    close to the policy's."""
    before = adapter(trainer)
    trainer.train()
    losses = logged(trainer, "loss")
    assert len(losses) == steps and all(math.isfinite(loss) for loss in losses), losses
    after = adapter(trainer)
    assert any(not torch.equal(after[name], before[name]) for name in before), "no trainable weight moved"
    if not sampled_by_policy:
        return losses
    differences = logged(trainer, "sampling/sampling_logp_difference/mean")
    assert differences and all(0 <= d < 0.1 for d in differences), differences  # vLLM samples the trained policy
    return losses


# ---------------------------------------------------------------------------------------------- every table entry
def loss_settings(name: str) -> dict:
    settings = tiny.required_settings(name)
    if name == "a2po":
        settings["advantage_estimator"] = "a2po"
    if name == "vespo":
        settings["vllm_importance_sampling_mode"] = "token_truncate"
    return settings


@pytest.mark.parametrize("name", LOSSES.names())
def test_every_loss_trains_under_vllm(policy_path, name):
    if LOSSES.get(name).spec.requires_moe:
        pytest.skip(f"{name} needs a mixture-of-experts model: test_the_moe_losses_train_under_vllm")
    settings = loss_settings(name)
    if name in REFUSED_UNDER_VLLM:
        with pytest.raises(ValueError, match=REFUSED_UNDER_VLLM[name]):
            make(policy_path, loss_type=name, **settings)
        return
    dataset = prompts(answers="expert_column" in settings, reference_rewards=name == "a2po")
    trains(make(policy_path, loss_type=name, dataset=dataset, steps_per_generation=2, **settings))


@functools.cache
def moe_policy_path(policy_path: str) -> str:
    """A random Qwen3-MoE (2 layers, 4 experts, top-2) with the policy's tokenizer, saved for vLLM to load."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    tokens = tokenizer(policy_path)
    hidden, heads = (32, 2) if STAND_IN else (256, 4)
    config = Qwen3MoeConfig(
        vocab_size=len(tokens), hidden_size=hidden, intermediate_size=2 * hidden, moe_intermediate_size=hidden,
        num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=heads // 2, head_dim=hidden // heads,
        num_experts=4, num_experts_per_tok=2, max_position_embeddings=128 if STAND_IN else 2048,
        tie_word_embeddings=True, pad_token_id=tokens.pad_token_id, eos_token_id=tokens.eos_token_id,
        bos_token_id=tokens.bos_token_id,
    )
    torch.manual_seed(0)
    path = tempfile.mkdtemp(prefix="trl_zoo_gpu_moe_")
    Qwen3MoeForCausalLM(config).save_pretrained(path)
    tokens.save_pretrained(path)
    return path


@pytest.mark.parametrize("name", [n for n in LOSSES.names() if LOSSES.get(n).spec.requires_moe])
def test_the_moe_losses_train_under_vllm(policy_path, name):
    """RSPO's router statistics on a mixture-of-experts policy that vLLM samples: the old routers recorded once per
    generation batch, the current ones in the loss forward."""
    trainer = make(moe_policy_path(policy_path), loss_type=name, steps_per_generation=2, **loss_settings(name))
    trains(trainer)
    assert len(trainer.pipeline.get("router").routers) == 2  # both layers' routers hooked


REFUSED_UNDER_VLLM = {"luffy": r"^use_vllm: not with loss_type='luffy'"}  # traces without vLLM log-probs
MULTI_TURN = ("gigpo", "mt_grpo")  # tool environments: test_multi_turn_estimators_under_vllm
# vLLM's structured outputs make every turn a call of the calculator on two numbers (TRL's
# `vllm_structured_outputs_regex`), so each rollout has two turns whatever the model would have written
CALL = (
    r'<tool_call>\n\{"name": "calculate", "arguments": \{"expression": "[1-9][0-9]? \+ [1-9][0-9]?"\}\}\n'
    r"</tool_call>"
)


class ScriptedCalculator(Calculator):
    """The calculator whose call earns a scripted turn reward, 1 on every other rollout (the environments are made
    in row order), so every group has spread in its first turn whatever the model computes."""

    made = 0

    def reset(self, **row) -> None:
        super().reset(**row)
        self.scripted = float(ScriptedCalculator.made % 2)
        ScriptedCalculator.made += 1

    def calculate(self, expression: str) -> str:
        reply = super().calculate(expression)
        self.turn_rewards[-1] = self.scripted
        return reply


def reply_is_the_answer(completions, answer, **kwargs):
    """1 when the calculator's reply in the rollout is the row's answer."""
    return [float(any(m["role"] == "tool" and m["content"] == a for m in c)) for c, a in zip(completions, answer)]


@pytest.mark.parametrize("name", MULTI_TURN)
def test_multi_turn_estimators_under_vllm(policy_path, name):
    """TRL's tool loop with vLLM generating both turns: the calculator called by every rollout, its reply rendered
    into the second turn's prompt, the turn rewards read by the estimator, two optimizer steps."""
    if STAND_IN:
        pytest.skip("the tool template's prompt (≈ 950 characters) exceeds the tiny model's 128 positions")
    pairs = [(a, b) for a, b in zip(range(11, 27), range(30, 46))]
    dataset = Dataset.from_dict({
        "prompt": [[{"role": "user", "content": f"What is {a} + {b}? Use the calculator."}] for a, b in pairs],
        "answer": [str(a + b) for a, b in pairs],
    })
    trainer = make(
        policy_path,
        advantage_estimator=name,
        dataset=dataset,
        reward_funcs=reply_is_the_answer,
        processing_class=use_tool_template(copy.deepcopy(tokenizer(policy_path))),
        environment_factory=ScriptedCalculator,
        max_tool_calling_iterations=1,
        max_completion_length=96,
        vllm_structured_outputs_regex=CALL,
    )
    losses = trains(trainer, sampled_by_policy=False)  # vLLM's log-probs are those of the constrained sampler
    assert logged(trainer, "tools/call_frequency") == [1.0, 1.0], logged(trainer, "tools/call_frequency")
    assert logged(trainer, "tools/failure_frequency") == [0.0, 0.0]
    assert all(math.isfinite(x) for x in losses)


def test_the_value_head_critic_trains_under_vllm(policy_path):
    trainer = make(policy_path, advantage_estimator="gae", critic_model="head")
    trains(trainer)


def test_qlora_trains_under_vllm(policy_path):
    """A 4-bit base (bitsandbytes NF4) with LoRA: TRL has vLLM quantize its own copy in flight."""
    if STAND_IN or importlib.util.find_spec("bitsandbytes") is None:
        pytest.skip("QLoRA under vLLM needs bitsandbytes and a GPU")
    from transformers import BitsAndBytesConfig

    quantization = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32
    )
    trains(make(policy_path, model_init_kwargs={"dtype": "float32", "quantization_config": quantization}))


@pytest.mark.parametrize("name", [n for n in ADVANTAGES.names() if n not in MULTI_TURN])
def test_every_advantage_estimator_trains_under_vllm(policy_path, name):
    settings = dict(advantage_estimator=name)
    if name == "gae":
        settings.update(critic_model="adapter")
    if name == "passk":
        settings.update(passk_k=2)
    if name == "a2po":
        settings.update(loss_type="a2po", beta=1e-3)
    trains(make(policy_path, dataset=prompts(reference_rewards=name == "a2po"), **settings))


@pytest.mark.parametrize("name", SAMPLERS.names())
def test_every_sampler_trains_under_vllm(policy_path, name):
    settings = dict(dynamic_sampling=name)
    if name == "adaptive_budget":
        settings.update(advantage_estimator="grpo")
    trains(make(policy_path, **settings))


def test_dynamic_samplings_extra_rounds_go_through_vllm(policy_path, shared_engines):
    from tests.scripts.resample_two_processes import half_constant_reward

    trainer = make(
        policy_path, reward_funcs=half_constant_reward, dynamic_sampling="resample", dynamic_sampling_max_rounds=20
    )
    trainer.model.train()
    rows = [{"prompt": p} for p in ("10+30=", "12+32=") for _ in range(GROUP)]
    trainer.args.generation_batch_size = len(rows)
    batch = generate_and_score(trainer, rows)
    rounds = metric_values(trainer)["dynamic_sampling/generation_rounds"][-1]
    assert rounds >= 2
    assert torch.isfinite(batch["advantages"]).all()


# ---------------------------------------------------------------------------------------------- parity with TRL
def same_batch_losses(reference, candidate, moved: bool):
    """TRL's and trl_zoo's loss and gradients on the same vLLM-generated generation batch, per micro-batch."""
    reference.model.train()
    candidate.model.train()
    torch.manual_seed(0)
    batch = generate_and_score(reference, next(iter(reference.get_train_dataloader())))
    micro_batches = split_tensor_dict(shuffle_sequence_dict(batch), reference.args.steps_per_generation)
    if moved:  # off-policy: both adapters moved by the same noise, so ratios ≠ 1 and the clips act
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for (_, a), (_, b) in zip(reference.model.named_parameters(), candidate.model.named_parameters()):
                if a.requires_grad:
                    noise = 0.02 * torch.randn(a.shape, generator=generator).to(a.device)
                    a.add_(noise)
                    b.add_(noise)
    for micro_batch in micro_batches:
        losses = []
        for trainer in (reference, candidate):
            trainer.current_gradient_accumulation_steps = 1
            trainer.model.zero_grad()
            loss = trainer.compute_loss(trainer.model, micro_batch)
            loss.backward()
            losses.append(loss.detach().float())
        assert torch.isfinite(losses[0]) and abs(losses[0].item()) > 1e-6
        assert relative_error(losses[1], losses[0]) <= 1e-6, losses
        named = dict(reference.model.named_parameters())
        for name, parameter in candidate.model.named_parameters():
            if parameter.grad is not None:
                assert relative_error(parameter.grad, named[name].grad) <= 1e-6, name
    return batch


@pytest.mark.parametrize("name", sorted(TRL_LOSSES))
def test_trls_losses_equal_trls_on_the_same_vllm_batch(policy_path, name):
    schedule = dict(steps_per_generation=2, num_iterations=2)
    reference = make(policy_path, trl.GRPOTrainer, trl.GRPOConfig, **TRL_LOSSES[name], **schedule)
    candidate = make(policy_path, loss_type=name, **schedule, **loss_settings(name))
    batch = same_batch_losses(reference, candidate, moved=True)
    assert "importance_sampling_ratio" in batch  # TRL's correction (on by default) reached the batch


@pytest.mark.parametrize("mode", IS_MODES)
@pytest.mark.parametrize("name", ["grpo", "dapo", "gspo"])
def test_trls_importance_sampling_modes_give_trl_zoos_losses_trls_ratios(policy_path, mode, name):
    settings = dict(
        vllm_importance_sampling_mode=mode,
        vllm_importance_sampling_correction=True,
        steps_per_generation=2,
        num_iterations=2,
    )
    reference = make(policy_path, trl.GRPOTrainer, trl.GRPOConfig, **TRL_LOSSES[name], **settings)
    candidate = make(policy_path, loss_type=name, **settings)
    batch = same_batch_losses(reference, candidate, moved=False)
    ratio = batch["importance_sampling_ratio"]
    assert torch.isfinite(ratio).all()
    if not STAND_IN:  # the stand-in samples from the trainer's own weights: its ratios are exactly 1
        assert (ratio - 1).abs().max() > 0  # a real engine/trainer mismatch for the modes to act on


# ---------------------------------------------------------------------------------------------- huggingface/trl#6789
@pytest.mark.parametrize("overrides", [dict(top_p=0.9), dict(top_k=20), dict(generation_kwargs={"min_p": 0.05})])
def test_truncated_sampling_is_refused_where_vllms_log_probs_are_read(policy_path, overrides):
    with pytest.raises(ValueError, match="huggingface/trl#6789"):
        make(policy_path, **overrides)


def test_truncated_sampling_trains_with_the_correction_off(policy_path):
    trainer = make(policy_path, top_p=0.9, top_k=20, vllm_importance_sampling_correction=False)
    before = adapter(trainer)
    trainer.train()
    assert all(math.isfinite(x) for x in logged(trainer, "loss"))
    assert any(not torch.equal(v, before[k]) for k, v in adapter(trainer).items())


# ---------------------------------------------------------------------------------------------- the weight sync
def test_a_changed_adapter_reaches_vllm_at_the_next_sync(policy_path):
    """TRL merges the adapter and loads the merged weights into vLLM at each sync: after a large change of the
    adapter alone, vLLM's log-probs are far from the policy's until the next sync, and close again after it."""
    trainer = make(policy_path)
    trainer.model.train()
    rows = next(iter(trainer.get_train_dataloader()))

    def gap(sync: bool) -> float:
        mark_vllm_weights(trainer, synced=not sync)
        generate_and_score(trainer, rows)
        return metric_values(trainer)["sampling/sampling_logp_difference/mean"][-1]

    synced = gap(sync=True)
    with torch.no_grad():  # lora_B from 0 to noise: the adapter alone changes
        generator = torch.Generator().manual_seed(3)
        for name, parameter in trainer.model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.2 * torch.randn(parameter.shape, generator=generator).to(parameter.device))
    stale = gap(sync=False)
    resynced = gap(sync=True)
    assert synced < 0.1 and resynced < 0.1 and stale > 5 * max(synced, resynced), (synced, stale, resynced)


# ---------------------------------------------------------------------------------------------- options
def test_the_teacher_signal_trains_under_vllm(policy_path):
    trains(make(policy_path, teacher_model="self", teacher_coef=0.1))


def test_chord_expert_sft_trains_under_vllm(policy_path):
    trainer = make(policy_path, expert_column="answer")
    trains(trainer)
    assert logged(trainer, "expert/mu")


def test_skip_zero_advantage_and_length_bucketing_under_vllm(policy_path):
    trains(make(policy_path, skip_zero_advantage=True, length_bucketing=True))


def test_ref_reset_steps_under_vllm(policy_path):
    trainer = make(policy_path, beta=0.04, ref_reset_steps=1, max_steps=3)
    trains(trainer, steps=3)


def test_off_policy_mask_under_vllm(policy_path):
    trains(make(policy_path, off_policy_mask_threshold=0.5, steps_per_generation=2))


def test_speed_recipes_say_they_do_not_apply_under_vllm(policy_path):
    with pytest.raises(ValueError, match="vllm"):
        make(policy_path, speed_recipe="lora_graphed")


def test_the_vllm_recipe_trains_with_half_the_old_logps_under_vllm(policy_path):
    trainer = make(policy_path, speed_recipe="vllm")
    assert trainer.args.generation_kwargs == {"detokenize": False} and trainer.args.steps_per_generation == 2
    trains(trainer)  # TRL's correction still logged: the first step's computed in its loss forward
    generation_batch = trainer.args.generation_batch_size
    assert logged(trainer, "old_logps/rows") == [generation_batch / 2]


def test_resume_from_a_checkpoint_under_vllm(policy_path):
    output_dir = tempfile.mkdtemp(prefix="trl_zoo_gpu_resume_")
    first = make(
        policy_path,
        output_dir=output_dir,
        max_steps=2,
        save_strategy="steps",
        save_steps=1,
        loss_type="gspo",
        advantage_estimator="rloo",
    )
    first.train()
    checkpoint = os.path.join(output_dir, "checkpoint-1")
    assert os.path.isdir(checkpoint)
    second = make(
        policy_path,
        output_dir=output_dir,
        max_steps=2,
        save_strategy="no",
        loss_type="gspo",
        advantage_estimator="rloo",
    )
    second.train(resume_from_checkpoint=checkpoint)
    assert second.state.global_step == 2
    assert all(math.isfinite(x) for x in logged(second, "loss"))
