"""TRL 1.16's environments (`environment_factory`) under trl_zoo's trainer, as under TRL's: a training set of an
`environment` column alone (the environments' `reset()` supply the prompts), an environment's `get_reward` as the only
reward, and TRL's own error when there is no reward source at all."""

import pytest
import torch
import trl
from datasets import Dataset

import trl_zoo
from tests import tiny

# The smallest chat template that renders a tool-calling conversation, which TRL asks of any environment run.
TOOL_TEMPLATE = (
    "{%- for m in messages %}{{ m.role[0] }}:{{ m.content }}{%- if m.tool_calls is defined %}"
    "{%- for c in m.tool_calls %}{{ c.function.name }}{{ c.function.arguments | tojson }}{%- endfor %}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}a:{%- endif %}"
)


class AdditionEnvironment:
    """An environment that owns its prompt and its reward (TRL's `reset` / `get_reward` contract)."""

    def reset(self, **kwargs):
        self.turns = 0
        return "12+30="

    def get_reward(self):
        return 0.5


def chat_digit_reward(completions, **kwargs):
    return [tiny.digit_reward([completion[-1]["content"]])[0] + 0.1 * i for i, completion in enumerate(completions)]


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


def _train(trainer_cls, config_cls, **kwargs):
    tokenizer = tiny.tokenizer()
    # transformers shares a chat template set on one of these tokenizers with every later one (checked with 5.24):
    # take it off again, or later tests' tiny tokenizers would save it and their prompts turn conversational
    tokenizer.chat_template = TOOL_TEMPLATE
    try:
        torch.manual_seed(0)
        args = config_cls(**tiny.config_kwargs(max_steps=1))
        trainer = trainer_cls(model=tiny.model(), args=args, processing_class=tokenizer, **kwargs)
        trainer.train()
        return trainer.state.log_history[0]
    finally:
        tokenizer.chat_template = None


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param(
            dict(
                reward_funcs=chat_digit_reward,
                train_dataset=Dataset.from_dict({"environment": ["addition"] * 8}),
                environment_factory={"addition": AdditionEnvironment},
            ),
            id="dataset-of-environment-column-only",
        ),
        pytest.param(dict(train_dataset=None, environment_factory=AdditionEnvironment), id="get_reward-only"),
    ],
)
def test_environment_runs_train_as_under_trl(kwargs):
    zoo = _train(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, **kwargs)
    reference = _train(trl.GRPOTrainer, trl.GRPOConfig, **kwargs)
    assert zoo["rewards/AdditionEnvironment/mean"] == 0.5
    assert zoo["reward"] == pytest.approx(reference["reward"], rel=1e-6)
    assert zoo["loss"] == pytest.approx(reference["loss"], rel=1e-5, abs=1e-7)


def test_no_reward_source_is_trls_error():
    with pytest.raises(ValueError, match="^No reward source provided"):
        trl_zoo.GRPOTrainer(model=tiny.model(), args=trl_zoo.GRPOConfig(**tiny.config_kwargs()),
                            train_dataset=tiny.prompts_dataset(), processing_class=tiny.tokenizer())


def test_prompt_column_still_required_without_environment():
    with pytest.raises(ValueError, match=r"train_dataset: no 'prompt' column \(its columns: environment\)"):
        trl_zoo.GRPOTrainer(model=tiny.model(), reward_funcs=tiny.digit_reward,
                            args=trl_zoo.GRPOConfig(**tiny.config_kwargs()),
                            train_dataset=Dataset.from_dict({"environment": ["addition"] * 8}),
                            processing_class=tiny.tokenizer())
