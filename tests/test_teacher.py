"""The teacher's per-token signal in the advantages (components/teacher.py): its formula by hand, its relation to the
k1 KL in the reward, its refusals, and a short LoRA training run."""

import math

import pytest
import torch

import trl_zoo
from tests import tiny
from tests.test_advantages import full_logit_policy, generate, one_thread  # noqa: F401  (autouse fixture)
from tests.test_kl import lora, perturb_adapter
from tests.tiny import make_trainer


def teacher_trainer(**overrides):
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), **overrides)
    perturb_adapter(trainer.model)
    return trainer


def teacher_term_by_hand(trainer, batch, teacher, beta):
    """λ·(log π_T − log π_old) per completion token from full logits: π_old is the (perturbed) adapter, on-policy."""
    policy_logps, _ = full_logit_policy(trainer.model, batch)
    teacher_logps, _ = full_logit_policy(teacher, batch)
    return beta * (teacher_logps - policy_logps) * batch["completion_mask"]


@pytest.mark.parametrize("estimator", ["reinforce", "dr_grpo"])
def test_self_teacher_and_k1_reward_kl_are_one_linear_estimator_apart(estimator):
    """teacher "self" (the base weights = the PEFT reference) with λ = β against kl_placement="reward", k1, β.
    For an estimator linear in R (reinforce: Â = R; dr_grpo: Â = R − group mean), the reward placement's advantage
    is est(R − β Σ_t k1_t) = est(R) + est(Σ_t teacher term_t), while the teacher places λ(log π_T − log π_old)
    on each token after est(R). So: reward advantage − est(R) = est(per-sequence sum of the teacher's added term)."""
    beta = 0.5
    with_teacher = teacher_trainer(advantage_estimator=estimator, teacher_model="self", teacher_coef=beta)
    with_reward_kl = teacher_trainer(
        advantage_estimator=estimator, beta=beta, kl_placement="reward", kl_estimator="k1"
    )
    plain = teacher_trainer(advantage_estimator=estimator)
    batch_teacher, batch_reward, batch_plain = generate(with_teacher), generate(with_reward_kl), generate(plain)
    torch.testing.assert_close(batch_teacher["completion_ids"], batch_reward["completion_ids"])
    torch.testing.assert_close(batch_teacher["completion_ids"], batch_plain["completion_ids"])
    mask = batch_teacher["completion_mask"].double()

    token_advantages = batch_teacher["advantages"].double()
    assert token_advantages.shape == mask.shape
    added = (token_advantages - batch_plain["advantages"].double().unsqueeze(1) * mask).sum(-1)  # Σ_t λ·log-ratio
    assert added.abs().min() > 1e-3  # the adapter moved the policy away from its base
    if estimator == "reinforce":
        expected_shift = added
    else:
        grouped = added.view(-1, 4)
        expected_shift = (grouped - grouped.mean(1, keepdim=True)).view(-1)
    shift = batch_reward["advantages"].double() - batch_plain["advantages"].double()
    torch.testing.assert_close(shift, expected_shift, rtol=1e-4, atol=1e-5)


def test_token_advantage_is_estimator_advantage_plus_teacher_log_ratio():
    """A separately built teacher (another tiny model of the same tokenizer):
    Â_{i,t} = Â_i + λ(log π_T − log π_old)."""
    coef = 0.3
    teacher_path = tiny.model_dir(seed=5)
    trainer = teacher_trainer(advantage_estimator="grpo", teacher_model=teacher_path, teacher_coef=coef)
    plain = teacher_trainer(advantage_estimator="grpo")
    batch, batch_plain = generate(trainer), generate(plain)
    torch.testing.assert_close(batch["completion_ids"], batch_plain["completion_ids"])
    mask = batch["completion_mask"].double()
    teacher = tiny.model(seed=5)
    term = teacher_term_by_hand(trainer, batch, teacher, coef)
    assert term.abs().max() > 1e-2
    expected = batch_plain["advantages"].double().unsqueeze(1) * mask + term
    torch.testing.assert_close(batch["advantages"].double(), expected, rtol=1e-4, atol=1e-5)

    only = teacher_trainer(
        advantage_estimator="grpo", teacher_model=teacher_path, teacher_coef=coef, teacher_only=True
    )
    batch_only = generate(only)
    torch.testing.assert_close(batch_only["advantages"].double(), term, rtol=1e-4, atol=1e-5)


def test_refusals_at_config_time():
    base = tiny.config_kwargs()
    for coef in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="teacher_coef"):
            trl_zoo.GRPOConfig(**base, teacher_model="self", teacher_coef=coef)
    with pytest.raises(ValueError, match="teacher_only: True needs a teacher"):
        trl_zoo.GRPOConfig(**base, teacher_only=True)
    with pytest.raises(ValueError, match="teacher_only: with teacher_coef=0"):
        trl_zoo.GRPOConfig(**base, teacher_model="self", teacher_only=True, teacher_coef=0.0)


def test_self_teacher_without_peft_or_reference_is_refused():
    with pytest.raises(ValueError, match="teacher_model: 'self'"):
        make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, teacher_model="self")


def test_teacher_with_another_tokenizer_is_refused(tmp_path):
    from transformers import PreTrainedTokenizerFast

    path = tiny.model_dir(seed=5)
    other = tmp_path / "other"
    import shutil

    shutil.copytree(path, other)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(other))
    tokenizer.add_tokens(["<extra_token>"])
    tokenizer.save_pretrained(str(other))
    with pytest.raises(ValueError, match="teacher_model: .* different tokenizer"):
        make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), teacher_model=str(other))


def test_lora_training_with_a_teacher_changes_the_adapter_and_stays_finite():
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), teacher_model=tiny.model_dir(seed=5),
        teacher_coef=0.5, max_steps=3,
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    after = {n: p.detach() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    assert max((after[n] - before[n]).abs().max().item() for n in before) > 1e-4
    assert all(torch.isfinite(p).all() for p in after.values())
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 3 and all(math.isfinite(log["loss"]) for log in logs)
    assert all(math.isfinite(log["teacher/log_ratio"]) and log["teacher/log_ratio"] != 0 for log in logs)


def answers_dataset(n: int = 16):
    from datasets import Dataset

    a, b = range(10, 10 + n), range(30, 30 + n)
    return Dataset.from_dict(
        {"prompt": [f"{x}+{y}=" for x, y in zip(a, b)], "answer": [str(x + y) for x, y in zip(a, b)]}
    )


def base_logps_after(trainer, prompt_texts, batch):
    """log π_base(y_t) of the batch's completion tokens after each row's own prompt text, row by row (no padding)."""
    tokenizer = trainer.processing_class
    rows = []
    model = trainer.model
    with torch.no_grad(), model.disable_adapter():
        for text, completion, mask in zip(prompt_texts, batch["completion_ids"], batch["completion_mask"]):
            length = int(mask.sum())
            prompt_ids = torch.tensor(tokenizer(text=[text])["input_ids"][0])
            ids = torch.cat([prompt_ids, completion[:length]]).unsqueeze(0)
            logits = model(input_ids=ids).logits[0, prompt_ids.numel() - 1 : -1].double()
            logps = torch.log_softmax(logits, -1).gather(-1, completion[:length, None]).squeeze(-1)
            rows.append(torch.nn.functional.pad(logps, (0, completion.numel() - length)))
    return torch.stack(rows)


def test_privileged_template_changes_the_teacher_log_probs_and_nothing_else():
    coef, dataset = 0.5, answers_dataset()
    common = dict(advantage_estimator="reinforce", teacher_model="self", teacher_coef=coef, teacher_only=True,
                  dataset=dataset)
    plain = teacher_trainer(**common)
    identity = teacher_trainer(**common, teacher_prompt_template="{prompt}")
    privileged = teacher_trainer(**common, teacher_prompt_template="{prompt}{answer}=")
    batches = {name: generate(t) for name, t in (("plain", plain), ("identity", identity), ("privileged", privileged))}
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"):
        for name in ("identity", "privileged"):
            torch.testing.assert_close(batches[name][key], batches["plain"][key])
    # "{prompt}" re-tokenises the policy's own prompt: the same teacher term
    torch.testing.assert_close(batches["identity"]["advantages"], batches["plain"]["advantages"], rtol=1e-4, atol=1e-5)
    # the answer in the prompt: the teacher's log-probs are those after "a+b=<answer>=", checked row by row
    batch = batches["privileged"]
    mask = batch["completion_mask"].double()
    policy_logps, _ = full_logit_policy(privileged.model, batch)
    prompts = privileged.processing_class.batch_decode(
        [ids[m.bool()] for ids, m in zip(batch["prompt_ids"], batch["prompt_mask"])]
    )
    answer_of = dict(zip(dataset["prompt"], dataset["answer"]))
    teacher_logps = base_logps_after(privileged, [p + answer_of[p] + "=" for p in prompts], batch)
    expected = coef * (teacher_logps - policy_logps) * mask
    torch.testing.assert_close(batch["advantages"].double(), expected, rtol=1e-4, atol=1e-5)
    assert (batch["advantages"] - batches["plain"]["advantages"]).abs().max() > 1e-3


def test_template_refusals():
    base = tiny.config_kwargs()
    with pytest.raises(ValueError, match="teacher_prompt_template: needs a teacher"):
        trl_zoo.GRPOConfig(**base, teacher_prompt_template="{prompt}")
    with pytest.raises(ValueError, match="teacher_prompt_template: .* is not a column name"):
        trl_zoo.GRPOConfig(**base, teacher_model="self", teacher_prompt_template="{prompt}{0}")
    with pytest.raises(ValueError, match="teacher_prompt_template: not a str.format template"):
        trl_zoo.GRPOConfig(**base, teacher_model="self", teacher_prompt_template="{prompt")
    with pytest.raises(ValueError, match="teacher_prompt_template: names column.* answer"):
        make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), teacher_model="self",
                     teacher_prompt_template="{prompt} {answer}")


def test_chat_prompt_template_goes_into_the_last_user_message():
    from trl_zoo.components.teacher import teacher_prompt

    row = {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}], "answer": "5"}
    templated = teacher_prompt("{prompt} (The answer is {answer}.)", row)
    assert templated == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3? (The answer is 5.)"}
    ]
    assert row["prompt"][1]["content"] == "2+3?"  # the policy's prompt is untouched
    assert teacher_prompt("{prompt}{answer}", {"prompt": "1+1=", "answer": "2"}) == "1+1=2"


@pytest.mark.parametrize("loss_type", ["gspo", "gmpo", "cispo", "sapo", "reinforce"])
def test_teacher_composes_with_losses(loss_type):
    """Token advantages reach every loss (a sequence-level loss takes their masked mean per sequence)."""
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), teacher_model="self", teacher_coef=0.5,
        loss_type=loss_type, advantage_estimator="rloo", max_steps=1,
    )
    perturb_adapter(trainer.model)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_A" in n}
    trainer.train()
    log = next(log for log in trainer.state.log_history if "loss" in log)
    assert math.isfinite(log["loss"]) and abs(log["teacher/log_ratio"]) > 1e-4  # the adapter moved off its base
    moved = max(
        (p.detach() - before[n]).abs().max().item() for n, p in trainer.model.named_parameters() if n in before
    )
    assert moved > 1e-5


def test_self_teacher_without_peft_is_the_reference_model():
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, teacher_model="self", beta=0.1)
    teacher = trainer.pipeline.get("teacher").teacher
    assert teacher is trainer.ref_model and teacher is not None


@pytest.mark.parametrize("option", [dict(length_bucketing=True), dict(skip_zero_advantage=True),
                                    dict(dynamic_sampling="resample", advantage_estimator="grpo")])
def test_teacher_trains_with_batch_options(option):
    """Per-token advantages pass length bucketing, the zero-advantage skip and dynamic sampling's regrouping."""
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, peft_config=lora(), teacher_model=tiny.model_dir(seed=5),
        teacher_coef=0.5, max_steps=2, gradient_accumulation_steps=2, **option,
    )
    trainer.train()
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 2 and all(math.isfinite(log["loss"]) and abs(log["teacher/log_ratio"]) > 1e-4 for log in logs)
