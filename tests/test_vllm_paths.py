"""trl_zoo's hooks on TRL's vLLM generation paths (`use_vllm=True`, colocate and server), with vLLM replaced by
the stand-in of tests/vllm_stand_in.py: it holds its own copy of the model, updated only by TRL's weight sync,
samples from it with plain torch and reports vLLM's per-token log-probs (optionally offset by a known amount).

Checked: loss parity with `trl.GRPOTrainer` through the same stand-in, dynamic sampling's extra rounds going
through vLLM, TRL's importance-sampling correction reaching the loss and surviving regrouping (each row keeps its
own ratio, a known number by construction), `skip_zero_advantage` leaving loss and gradients unchanged, and the
critic and MoE router hooks running. Truncated sampling (top_p, top_k, min_p): vLLM's log-probs are those of the
kept set renormalised, log π − log S_t (huggingface/trl#6789), so the config refuses it where they are read (the
importance-sampling correction, the off-policy mask), and training with the correction off still runs.
"""

import math
import tempfile

import pytest
import torch
import trl
from peft import LoraConfig
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

import trl_zoo
from tests import tiny, vllm_stand_in
from tests.scripts.resample_two_processes import half_constant_reward
from tests.test_rspo import NUM_LAYERS, TOP_K, _spy_on_loss, moe_model
from tests.tiny import make_trainer, model_dir, relative_error
from tests.trl_internals import generate_and_score, metric_values

MODES = ["colocate", "server"]
GROUP_SIZE = 4
SAMPLER_OFFSET = -0.1  # the stand-in reports log-probs 0.1 nat below the policy's: log ratio +0.1 per token


@pytest.fixture(autouse=True)
def single_process():
    """TRL's colocate setup writes launcher variables; the stand-in puts them back, so no process group starts."""
    yield
    assert not torch.distributed.is_initialized()


@pytest.fixture
def stand_in(monkeypatch):
    return vllm_stand_in.install(monkeypatch, server_model_path=model_dir(0))


def vllm_trainer(trainer_cls, config_cls, mode, **overrides):
    return make_trainer(trainer_cls, config_cls, use_vllm=True, vllm_mode=mode, **overrides)


def logged(trainer, name):
    return [row[name] for row in trainer.state.log_history if name in row]


def even_prompt_batch(trainer):
    """A first generation batch of two even prompts, whose groups have no reward spread under half_constant_reward:
    dynamic sampling must generate at least one more round."""
    rows = [{"prompt": prompt} for prompt in ("10+30=", "12+32=") for _ in range(GROUP_SIZE)]
    assert len(rows) == trainer.args.generation_batch_size
    return rows


# ---------------------------------------------------------------------------------------------- parity with TRL
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("loss_type", ["gspo", "dapo"])
def test_training_matches_trl_through_the_same_stand_in(stand_in, mode, loss_type):
    # Two optimizer steps per generation batch (half of it each): the step-1 loss is over half the groups' rows,
    # so their advantages do not cancel, and step 2 is off-policy (ratios ≠ 1). Steps 3-4 sample again.
    schedule = dict(per_device_train_batch_size=4, steps_per_generation=2, max_steps=4)
    trl_loss = dict(loss_type="dapo")
    if loss_type == "gspo":  # TRL's GSPO: grpo with sequence-level ratios
        trl_loss = dict(loss_type="grpo", importance_sampling_level="sequence")
    reference = vllm_trainer(trl.GRPOTrainer, trl.GRPOConfig, mode, **trl_loss, **schedule)
    reference.train()
    assert stand_in.generate_calls == 2 and stand_in.weight_syncs == 2

    candidate = vllm_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, mode, loss_type=loss_type, **schedule)
    initial = {name: parameter.detach().clone() for name, parameter in candidate.model.named_parameters()}
    candidate.train()
    assert stand_in.generate_calls == 4 and stand_in.weight_syncs == 4
    assert len(stand_in.engines) == 2

    losses, expected = logged(candidate, "loss"), logged(reference, "loss")
    assert abs(expected[0]) > 1e-3  # a loss that can tell the two apart
    assert losses[:2] == pytest.approx(expected[:2], rel=1e-4, abs=1e-6)
    # the sampler's log-probs are the trained policy's: steps 3-4 sampled from the synced step-2 weights
    differences = logged(candidate, "sampling/sampling_logp_difference/max")
    assert len(differences) == 2 and max(differences) < 1e-4  # logged once per generation batch
    engine = stand_in.engines[-1].model
    moved = [name for name, p in candidate.model.named_parameters() if not torch.equal(p, initial[name])]
    assert moved
    assert all(not torch.equal(engine.get_parameter(name), initial[name]) for name in moved)


# ---------------------------------------------------------------------------------------------- dynamic sampling
@pytest.mark.parametrize("mode", MODES)
def test_resample_generates_its_extra_rounds_through_vllm(stand_in, mode):
    trainer = vllm_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, mode, reward_funcs=half_constant_reward,
        dynamic_sampling="resample", dynamic_sampling_max_rounds=20, max_completion_length=6,
    )
    trainer.model.train()
    batch = generate_and_score(trainer, even_prompt_batch(trainer))

    rounds = metric_values(trainer)["dynamic_sampling/generation_rounds"][-1]
    assert rounds >= 2
    assert stand_in.generate_calls == rounds  # one vLLM call per round
    assert stand_in.weight_syncs == 1  # the weights did not change between rounds
    prompts = trainer.processing_class.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
    completions = trainer.processing_class.batch_decode(batch["completion_ids"], skip_special_tokens=True)
    assert len(prompts) == trainer.args.generation_batch_size
    rewards = half_constant_reward(prompts, completions)
    for start in range(0, len(prompts), GROUP_SIZE):
        group = slice(start, start + GROUP_SIZE)
        assert len(set(prompts[group])) == 1 and int(prompts[start].split("+")[0]) % 2 == 1
        assert max(rewards[group]) > min(rewards[group])
    assert batch["num_items_in_batch"].item() == batch["completion_mask"].sum().item()


# ---------------------------------------------------------------------------------------------- importance sampling
def token_offset(tokens: torch.Tensor) -> torch.Tensor:
    """The stand-in's log-probs minus the policy's, per token: −0.05 · (token id mod 4), so TRL's log ratio
    log π_old − log π_vLLM is 0.05 · (id mod 4) per token and differs from row to row."""
    return -0.05 * (tokens % 4).float()


def expected_sampling_ratio(batch, mode, clip_max):
    """TRL's vLLM importance ratio for the stand-in's offset: per token exp(0.05 · (id mod 4)) on completion tokens
    (1 elsewhere), per sequence exp(Σ_t 0.05 · (id_t mod 4)); truncated at clip_max (`*_truncate`) or set to 0 above
    it (`*_mask`)."""
    mask = batch["completion_mask"].float()
    log_ratio = -token_offset(batch["completion_ids"]) * mask
    ratio = torch.exp(log_ratio if mode.startswith("token") else log_ratio.sum(1, keepdim=True))
    if mode.endswith("truncate"):
        return ratio.clamp(max=clip_max)
    return torch.where(ratio > clip_max, 0.0, ratio)


@pytest.mark.parametrize(
    "is_mode,clip_max",
    [("token_truncate", 1.1), ("token_mask", 1.1), ("sequence_truncate", 1.8), ("sequence_mask", 1.8)],
)
def test_importance_sampling_ratio_reaches_the_loss_and_survives_regrouping(monkeypatch, is_mode, clip_max):
    stand_in = vllm_stand_in.install(monkeypatch, logprob_offset=token_offset)
    trainer = vllm_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, "colocate", loss_type="dapo", reward_funcs=half_constant_reward,
        dynamic_sampling="resample", dynamic_sampling_max_rounds=20, vllm_importance_sampling_correction=True,
        vllm_importance_sampling_mode=is_mode, vllm_importance_sampling_clip_max=clip_max,
    )
    trainer.model.train()
    batch = generate_and_score(trainer, even_prompt_batch(trainer))
    assert stand_in.generate_calls >= 2  # the batch was assembled from later rounds: rows moved

    # each row's sampling log-probs are its own: the policy's (a fresh forward of that row) + the row's offsets
    mask = batch["completion_mask"].bool()
    with torch.no_grad():
        logps = trainer._policy_forward(trainer.model, batch, compute_entropy=False).logps
    offsets = token_offset(batch["completion_ids"])
    assert (batch["sampling_per_token_logps"] - logps - offsets)[mask].abs().max() < 1e-4
    assert (batch["old_per_token_logps"] - logps)[mask].abs().max() < 1e-4
    ratio = batch["importance_sampling_ratio"]
    expected = expected_sampling_ratio(batch, is_mode, clip_max)
    assert ratio.shape == expected.shape
    assert (ratio - expected).abs().max() < 1e-3
    assert expected.unique().numel() > 2  # rows (or tokens) carry different ratios
    if is_mode.startswith("token"):
        assert (-offsets[mask] > math.log(clip_max)).any()  # the clip bit

    # on-policy dapo: term_{i,t} = −Â_i · r_{i,t}, summed over tokens and divided by the batch's token count
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer.compute_loss(trainer.model, batch)
    advantages = batch["advantages"].view(-1, 1)
    closed_form = -(advantages * expected * mask).sum() / batch["num_items_in_batch"]
    assert abs(closed_form.item()) > 1e-3
    assert loss.item() == pytest.approx(closed_form.item(), rel=1e-4, abs=1e-6)


# ---------------------------------------------------------------------------------------------- skip_zero_advantage
def test_skip_zero_advantage_keeps_loss_and_gradients_on_the_vllm_path(monkeypatch):
    vllm_stand_in.install(monkeypatch, logprob_offset=SAMPLER_OFFSET)  # IS ratios ≠ 1 on every row
    trainer = vllm_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, "colocate", reward_funcs=half_constant_reward,
        skip_zero_advantage=True, num_iterations=2, gradient_accumulation_steps=2, max_completion_length=6,
        vllm_importance_sampling_mode="token_truncate",
    )
    assert trainer.pipeline.get("skip_zero_advantage").active
    torch.manual_seed(0)
    trainer.model.train()
    batch = generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))
    zero_rows = (batch["advantages"] == 0).sum().item()
    assert 0 < zero_rows < batch["advantages"].numel()
    ratio = batch["importance_sampling_ratio"][batch["completion_mask"].bool()]
    assert (ratio - math.exp(-SAMPLER_OFFSET)).abs().max() < 1e-3
    torch.manual_seed(3)
    micro_batches = split_tensor_dict(shuffle_sequence_dict(batch), 2)
    tiny.perturb(trainer.model)  # off-policy: ratios ≠ 1 and the clips bite
    forwarded = []
    trainer.model.register_forward_pre_hook(
        lambda module, args, kwargs: forwarded.append(kwargs["input_ids"].size(0)), with_kwargs=True
    )

    results = {}
    for skip in (False, True):
        trainer.pipeline.get("skip_zero_advantage").active = skip
        trainer.model.zero_grad()
        forwarded.clear()
        loss = 0.0
        for micro_batch in micro_batches:
            trainer.current_gradient_accumulation_steps = len(micro_batches)
            step_loss = trainer.compute_loss(trainer.model, micro_batch)
            step_loss.backward()
            loss += step_loss.detach()
        gradients = {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.grad is not None}
        results[skip] = loss, gradients, forwarded[:]
    (loss, gradients, rows), (skip_loss, skip_gradients, skip_rows) = results[False], results[True]
    assert rows == [micro_batch["advantages"].numel() for micro_batch in micro_batches]
    assert skip_rows == [max(int((micro_batch["advantages"] != 0).sum()), 1) for micro_batch in micro_batches]
    assert relative_error(skip_loss, loss) <= 1e-5
    assert gradients.keys() == skip_gradients.keys() and gradients
    for name, gradient in gradients.items():
        assert relative_error(skip_gradients[name], gradient) <= 1e-5, name


# ---------------------------------------------------------------------------------------------- critic, MoE router
@pytest.mark.parametrize("critic_model", ["head", "adapter"])
def test_critic_trains_on_the_vllm_path(stand_in, critic_model):
    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear") if critic_model == "adapter" else None
    trainer = vllm_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, "colocate", advantage_estimator="gae", critic_model=critic_model,
        peft_config=peft_config,
    )
    head = {name: p.detach().clone() for name, p in trainer.critic.value_head.named_parameters()}
    trainer.train()
    assert stand_in.generate_calls == 2 and stand_in.weight_syncs == 2
    # vLLM receives the policy's parameters only, under the names of the served model (no value head, no adapter)
    served = len(list(stand_in.engines[0].model.parameters()))
    assert stand_in.loaded_tensors == 2 * served
    value_losses = logged(trainer, "critic/value_loss")
    assert len(value_losses) == 2 and all(math.isfinite(value) and value > 0 for value in value_losses)
    assert any(not torch.equal(p, head[name]) for name, p in trainer.critic.value_head.named_parameters())
    assert max(logged(trainer, "sampling/sampling_logp_difference/max")) < 1e-4


def test_moe_router_hook_on_the_vllm_path(monkeypatch):
    path = tempfile.mkdtemp(prefix="trl_zoo_tiny_moe_")
    moe_model().save_pretrained(path)
    tiny.tokenizer().save_pretrained(path)
    stand_in = vllm_stand_in.install(monkeypatch)
    torch.manual_seed(0)
    trainer = trl_zoo.GRPOTrainer(
        model=path,
        reward_funcs=tiny.digit_reward,
        args=trl_zoo.GRPOConfig(**tiny.config_kwargs(loss_type="rspo", use_vllm=True, vllm_mode="colocate")),
        train_dataset=tiny.prompts_dataset(),
        processing_class=tiny.tokenizer(),
    )
    seen = _spy_on_loss(trainer)
    trainer.train()
    assert stand_in.generate_calls == 2 and stand_in.loaded_tensors > 0
    # vLLM's IS correction makes TRL keep old log-probs, so the hook records the sampling policy's routers; every
    # micro-batch here is on-policy, so the current routers score the old experts exactly as the old ones did
    assert len(seen) == 2
    for statistics in seen:
        current, old = statistics["router_logps"], statistics["old_router_logps"]
        assert current.shape == old.shape and current.shape[2:] == (NUM_LAYERS, TOP_K)
        torch.testing.assert_close(current, old, rtol=0, atol=1e-5)
    assert logged(trainer, "rspo/gamma_mean") == pytest.approx([1.0, 1.0], abs=1e-5)


# ---------------------------------------------------------------------------------------------- truncated sampling
TRUNCATIONS = {  # each keeps part of the tiny model's mass at most steps (its next-token distribution is broad)
    "top_p": dict(top_p=0.7),
    "top_k": dict(top_k=3),
    "min_p in generation_kwargs": dict(generation_kwargs={"min_p": 0.5}),
}


def completion_logits(trainer, batch) -> torch.Tensor:
    """(B, C, V) the policy's tempered logits at the positions that predict the completion tokens."""
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    length = batch["completion_ids"].size(1)
    with torch.no_grad():
        logits = trainer.model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=length + 1).logits
    return logits[:, :-1].float() / trainer.args.temperature


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("truncation", list(TRUNCATIONS))
def test_vllms_log_probs_under_truncated_sampling_are_off_by_the_kept_mass(stand_in, mode, truncation):
    """What the refusal is about: with the correction off the batch still carries vLLM's log-probs, and they exceed
    the trainer's full-vocabulary ones by −log S_t, S_t the mass of the tokens the truncation kept."""
    settings = TRUNCATIONS[truncation]
    trainer = vllm_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, mode, vllm_importance_sampling_correction=False, **settings
    )
    trainer.model.train()
    batch = generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))
    mask = batch["completion_mask"].bool()
    logits = completion_logits(trainer, batch)
    effective = {name: value for name, value in settings.items() if name != "generation_kwargs"}
    effective.update(settings.get("generation_kwargs", {}))
    kept = vllm_stand_in.Truncation(**effective).kept(logits.flatten(0, 1)).view_as(logits)
    kept_mass = (torch.softmax(logits, dim=-1) * kept).sum(-1)
    with torch.no_grad():
        logps = trainer._policy_forward(trainer.model, batch, compute_entropy=False).logps
    chosen = batch["completion_ids"].unsqueeze(-1)
    full_logps = torch.log_softmax(logits, dim=-1).gather(-1, chosen).squeeze(-1)
    assert (full_logps - logps)[mask].abs().max() < 1e-4  # the same forward as the trainer's
    assert kept.gather(-1, chosen).squeeze(-1)[mask].all()  # every sampled token was in the kept set
    offset = batch["sampling_per_token_logps"] - logps
    assert (offset + kept_mass.log())[mask].abs().max() < 1e-4
    assert kept_mass[mask].min() < 0.9  # the truncation acted: TRL's ratio would have been ≤ 0.9 there


@pytest.mark.parametrize("mode", MODES)
def test_truncated_sampling_trains_with_the_correction_off(stand_in, mode):
    trainer = vllm_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, mode, vllm_importance_sampling_correction=False, top_p=0.8, top_k=4,
        generation_kwargs={"min_p": 0.05},
    )
    trainer.train()
    assert stand_in.generate_calls == 2 and stand_in.weight_syncs == 2
    losses = logged(trainer, "loss")
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)
    assert abs(losses[0]) > 0 or abs(losses[1]) > 0


def vllm_config(**overrides):
    return trl_zoo.GRPOConfig(**tiny.config_kwargs(**{"use_vllm": True, **overrides}))


@pytest.mark.parametrize(
    "overrides, named, fix",
    [
        (dict(top_p=0.9), "top_p=0.9", "vllm_importance_sampling_correction=False"),
        (dict(top_k=20), "top_k=20", "vllm_importance_sampling_correction=False"),
        (dict(min_p=0.05), "min_p=0.05", "vllm_importance_sampling_correction=False"),
        (dict(generation_kwargs={"top_k": 20}), "generation_kwargs['top_k']=20",
         "vllm_importance_sampling_correction=False"),
        (dict(top_p=1.0, generation_kwargs={"top_p": 0.5}), "generation_kwargs['top_p']=0.5",
         "vllm_importance_sampling_correction=False"),
        (dict(vllm_importance_sampling_correction=False, off_policy_mask_threshold=0.5, min_p=0.1), "min_p=0.1",
         "off_policy_mask_threshold=None"),
        (dict(off_policy_mask_threshold=0.5, top_k=8), "top_k=8",
         "vllm_importance_sampling_correction=False and off_policy_mask_threshold=None"),
    ],
)
def test_truncated_sampling_is_refused_where_vllms_log_probs_are_read(overrides, named, fix):
    with pytest.raises(ValueError) as error:
        vllm_config(**overrides)
    message = str(error.value)
    assert message.startswith(named) and f"set {fix}, or sample untruncated" in message
    assert "huggingface/trl#6789" in message and "\n" not in message


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),  # TRL's defaults: top_p 1.0, top_k 0, min_p None
        dict(top_k=-1, min_p=0.0, top_p=1.0),  # vLLM's own spellings of "off"
        dict(top_p=0.9, top_k=20, min_p=0.05, vllm_importance_sampling_correction=False),
        dict(top_p=0.9, generation_kwargs={"top_p": 1.0, "top_k": 0}),  # generation_kwargs override the fields
        dict(use_vllm=False, top_p=0.9, top_k=20, min_p=0.05),  # transformers' generation: no sampler log-probs
    ],
)
def test_untruncated_sampling_or_no_reader_of_vllms_log_probs_is_accepted(overrides):
    config = vllm_config(**overrides)
    assert config.vllm_importance_sampling_correction == overrides.get("vllm_importance_sampling_correction", True)
