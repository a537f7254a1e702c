"""NaN and ±inf from a reward function: an error naming the function (nan_rewards="raise"), or zero advantage for
those completions with a warning (nan_rewards="drop"); None keeps TRL's meaning ("unscorable") in both modes.
Real tiny trainers, one generation batch each (8 completions, groups of 4)."""

import math
import statistics

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForSequenceClassification

import trl_zoo
from tests import tiny
from tests.tiny import make_trainer
from tests.trl_internals import generate_and_score, metric_values

NAN_ROW, INF_ROW, NONE_ROW = 1, 6, 2  # groups: rows 0-3 and 4-7


def scripted_reward(special: dict[int, object]):
    """A reward function returning fixed distinct values, except `special` rows; it remembers what it returned."""

    def scripted(completions, **kwargs):
        values = [0.1 * (row + 1) ** 2 for row in range(len(completions))]
        for row, value in special.items():
            values[row] = value
        scripted.returned = values
        return values

    return scripted


def score_one_batch(trainer):
    torch.manual_seed(0)
    trainer.model.train()
    return generate_and_score(trainer, next(iter(trainer.get_train_dataloader())))


def expected_advantages(rewards: list, estimator: str | None) -> list[float]:
    """TRL's group advantages (mean/unbiased std + 1e-4) or RLOO's, over the scorable rewards; 0 for the others."""
    result = []
    for start in range(0, len(rewards), 4):
        group = rewards[start : start + 4]
        scored = [value for value in group if value is not None]
        for index, value in enumerate(group):
            if value is None:
                result.append(0.0)
            elif estimator == "rloo":
                others = [other for position, other in enumerate(group) if other is not None and position != index]
                result.append(value - sum(others) / len(others))
            else:
                result.append((value - statistics.mean(scored)) / (statistics.stdev(scored) + 1e-4))
    return result


@pytest.mark.parametrize(
    "bad_value, shown", [(float("nan"), "nan"), (float("inf"), "inf"), (-float("inf"), "-inf"), (1e39, "1e+39")]
)
def test_raise_names_the_function_and_the_fix(bad_value, shown):
    good = scripted_reward({})
    bad = scripted_reward({INF_ROW: bad_value})
    bad.__name__ = "flaky_judge"
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=[good, bad])
    with pytest.raises(ValueError) as error:
        score_one_batch(trainer)
    message = str(error.value)
    assert message.startswith("nan_rewards: reward functions returned NaN or ±inf: 'flaky_judge' (1 of 8, e.g. ")
    assert f"completion {INF_ROW} got {shown}" in message
    assert "nan_rewards='drop'" in message and "scripted" not in message and "\n" not in message


@pytest.mark.parametrize("estimator", [None, "rloo"], ids=["trl_advantages", "rloo_estimator"])
def test_drop_gives_zero_advantage_and_leaves_the_baselines_alone(estimator):
    reward = scripted_reward({NAN_ROW: float("nan"), INF_ROW: float("inf"), NONE_ROW: None})
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=reward, nan_rewards="drop", advantage_estimator=estimator
    )
    with pytest.warns(UserWarning, match=r"nan_rewards='drop': .*'scripted' \(2 of 8"):
        output = score_one_batch(trainer)
    kept = [None if row in (NAN_ROW, INF_ROW, NONE_ROW) else value for row, value in enumerate(reward.returned)]
    torch.testing.assert_close(output["advantages"], torch.tensor(expected_advantages(kept, estimator)))
    assert metric_values(trainer)["rewards/nonfinite_dropped"] == [2.0]
    assert math.isfinite(metric_values(trainer)["reward"][-1])


def test_drop_removes_the_whole_completion_even_when_other_functions_scored_it():
    steady = scripted_reward({})
    broken = scripted_reward({NAN_ROW: float("nan")})
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=[steady, broken], nan_rewards="drop")
    with pytest.warns(UserWarning, match="nan_rewards='drop'"):
        output = score_one_batch(trainer)
    summed = [2 * value for value in steady.returned]
    summed[NAN_ROW] = None
    torch.testing.assert_close(output["advantages"], torch.tensor(expected_advantages(summed, None)))


def test_none_keeps_trl_meaning_without_error():
    reward = scripted_reward({row: None for row in range(4)} | {5: None})  # group 0 entirely unscorable
    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=reward)
    output = score_one_batch(trainer)
    kept = [None if value is None else value for value in reward.returned]
    torch.testing.assert_close(output["advantages"], torch.tensor(expected_advantages(kept, None)))
    assert (output["advantages"][:4] == 0).all()


def test_async_reward_functions_are_checked():
    async def remote_judge(completions, **kwargs):
        return [float("nan")] + [0.5] * (len(completions) - 1)

    trainer = make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=remote_judge)
    with pytest.raises(ValueError, match=r"^nan_rewards: .*'remote_judge' \(1 of 8, e.g. completion 0 got nan\)"):
        score_one_batch(trainer)


def test_reward_model_with_nan_output_is_caught():
    """A reward model cannot return None: a NaN in its column is always an error."""
    config = Qwen2Config(
        vocab_size=len(tiny.tokenizer()), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, num_labels=1, pad_token_id=tiny.tokenizer().pad_token_id,
    )
    torch.manual_seed(0)
    reward_model = Qwen2ForSequenceClassification(config)
    with torch.no_grad():
        reward_model.score.weight.fill_(float("nan"))
    torch.manual_seed(0)
    trainer = trl_zoo.GRPOTrainer(
        model=tiny.model(0),
        reward_funcs=reward_model,
        args=trl_zoo.GRPOConfig(**tiny.config_kwargs(nan_rewards="raise")),
        train_dataset=tiny.prompts_dataset(),
        processing_class=tiny.tokenizer(),
        reward_processing_classes=tiny.tokenizer(),
    )
    with pytest.raises(ValueError, match=r"^nan_rewards: .*\(8 of 8\)"):
        score_one_batch(trainer)


def test_training_with_drop_stays_finite():
    reward = scripted_reward({NAN_ROW: float("nan")})
    trainer = make_trainer(
        trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=reward, nan_rewards="drop", max_steps=3
    )
    with pytest.warns(UserWarning, match="nan_rewards='drop'"):
        trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert all(log["rewards/nonfinite_dropped"] == 1.0 for log in trainer.state.log_history if "loss" in log)
