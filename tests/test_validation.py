"""Config validation: every impossible setting fails when the config is built, with a one-line ValueError that starts
with the field's name and says the fix; unknown plugin names get the closest known name; settings that contradict
each other fail there too, before any model is loaded; a plugin's declarations are checked when it registers.
(Checks that need the model — RSPO on a dense model, a MoE auxiliary loss with skip_zero_advantage — are tested next
to their features: test_rspo.py, test_skip_zero_advantage.py.)"""

import json
import math
import re
import warnings

import pytest
import trl
from datasets import Dataset

import trl_zoo
from tests import tiny
from tests.trl_internals import replace_model_loading
from trl_zoo.registry import TABLES
from trl_zoo.specs import ADVANTAGE_NEEDS


def build(**overrides):
    return trl_zoo.GRPOConfig(**tiny.config_kwargs(**overrides))


def rejection(**overrides) -> str:
    with pytest.raises(ValueError) as error:
        build(**overrides)
    message = str(error.value)
    assert "\n" not in message, message
    return message


# -------------------------------------------------------------------------------------------------- plugin tables
UNKNOWN_NAMES = {  # table -> (config field, misspelled name, closest match)
    "losses": ("loss_type", "gpso", "gspo"),
    "aggregations": ("loss_aggregation", "sequence_means", "sequence_mean"),
    "advantages": ("advantage_estimator", "rlo", "rloo"),
    "kl_estimators": ("kl_estimator", "k33", "k3"),
    "samplers": ("dynamic_sampling", "resampel", "resample"),
}


def test_every_plugin_table_has_a_validated_field():
    assert set(UNKNOWN_NAMES) == set(TABLES)


@pytest.mark.parametrize("table", list(UNKNOWN_NAMES))
def test_unknown_plugin_name_lists_the_closest_and_the_known_names(table):
    field, name, closest = UNKNOWN_NAMES[table]
    message = rejection(**{field: name})
    assert message.startswith(f"{field}: unknown {TABLES[table].kind} {name!r}. Did you mean {closest!r}? Known: ")
    assert message.endswith(", ".join(TABLES[table].names()) + ".")


@pytest.mark.parametrize("name, meant", [("gpro", "grpo"), ("dapo_", "dapo"), ("rpso", "rspo"), ("spao", "sapo")])
def test_two_swapped_letters_are_one_edit_in_the_closest_name(name, meant):
    """'gpro' is one swap from 'grpo' and two edits from 'gspo' and 'gmpo', which difflib ranks alike."""
    assert f"Did you mean {meant!r}?" in rejection(loss_type=name)


@pytest.mark.parametrize("field, name, meant", [
    ("loss_type", "GRPO ", "grpo"), ("loss_type", " Dapo", "dapo"), ("advantage_estimator", "RLOO", "rloo"),
    ("loss_aggregation", "Constant", "constant"), ("kl_estimator", "K3", "k3"),
])
def test_a_name_that_differs_only_in_case_or_spaces_is_refused_with_the_name_it_means(field, name, meant):
    message = rejection(**{field: name})
    assert message.startswith(f"{field}: unknown ") and f"Did you mean {meant!r}?" in message, message


def test_a_name_with_no_close_match_still_lists_the_known_names():
    assert rejection(loss_type="zzzz") == (
        f"loss_type: unknown loss 'zzzz'. Known: {', '.join(TABLES['losses'].names())}."
    )


# -------------------------------------------------------------------------------------------------- impossible values
IMPOSSIBLE = [
    # (field the message must start with, overrides, a phrase of the fix)
    ("num_generations", dict(num_generations=1), "num_generations ≥ 2"),
    ("num_generations", dict(num_generations=0, per_device_train_batch_size=8), "num_generations ≥ 2"),
    ("epsilon / epsilon_high", dict(epsilon=-0.1), "must be ≥ 0"),
    ("epsilon / epsilon_high", dict(epsilon_high=-0.2), "must be ≥ 0"),
    ("epsilon", dict(epsilon=1.0), "use ε in [0, 1)"),
    ("delta", dict(delta=1.1, epsilon=0.2), "use δ ≥ 1 + epsilon_high"),
    ("delta", dict(delta=1.25, epsilon=0.2, epsilon_high=0.28), "use δ ≥ 1 + epsilon_high"),
    ("epsilon_high", dict(loss_type="cispo", epsilon_high=0.0), "use a cap > 0"),
    ("cispo_epsilon_low", dict(loss_type="cispo", cispo_epsilon_low=0.2), "raise epsilon_high to ≥ 0.8"),
    ("cispo_epsilon_low", dict(loss_type="cispo", cispo_epsilon_low=1.5, epsilon_high=5.0), "[0, 1)"),
    ("dual_clip", dict(dual_clip=1.0), "> 1"),
    ("gmpo_epsilon", dict(loss_type="gmpo", gmpo_epsilon=0.0), "> 0"),
    ("sapo_temperature_pos / sapo_temperature_neg", dict(loss_type="sapo", sapo_temperature_pos=0.0), "> 0"),
    ("sapo_temperature_pos / sapo_temperature_neg", dict(loss_type="sapo", sapo_temperature_neg=-1.0), "> 0"),
    # a loss's own fields are checked against their declarations (and by its `validate`) when that loss is chosen
    ("ppo_kl_beta", dict(loss_type="ppo_kl", ppo_kl_beta=-1.0), "must be ≥ 0"),
    ("ppo_kl_target", dict(loss_type="ppo_kl", ppo_kl_target=0.0), "must be > 0"),
    ("clip_cov_ratio", dict(loss_type="clip_cov", clip_cov_ratio=0.0), "(0, 1]"),
    ("kl_cov_ratio", dict(loss_type="kl_cov", kl_cov_ratio=1.5), "(0, 1]"),
    ("clip_cov_lower", dict(loss_type="clip_cov", clip_cov_lower=5.0, clip_cov_upper=1.0), "< clip_cov_upper"),
    ("kl_cov_coef", dict(loss_type="kl_cov", kl_cov_coef=-1.0), "≥ 0"),
    ("dppo_divergence", dict(loss_type="dppo", dppo_divergence="js"), "use one of tv, kl"),
    ("dppo_mask_low", dict(loss_type="dppo", dppo_mask_low=0.0), "must be > 0"),
    ("dppo_mask_high", dict(loss_type="dppo", dppo_mask_high=1.0), "a value in (0, 1)"),
    ("dppo_kl_coef", dict(loss_type="dppo", dppo_kl_coef=-1e-3), "must be ≥ 0"),
    ("m2po_threshold", dict(loss_type="m2po", m2po_threshold=0.0), "must be > 0"),
    ("rspo_gamma_min", dict(loss_type="rspo", rspo_gamma_min=0.0), "(0, 1]"),
    ("rspo_gamma_min", dict(loss_type="rspo", rspo_gamma_min=1.5), "(0, 1]"),
    ("beta", dict(beta=-0.1), "≥ 0"),
    ("advantage_epsilon", dict(advantage_epsilon=-1e-4), "≥ 0"),
    ("kl_target", dict(beta=0.1, kl_target=0.0), "> 0"),
    ("ref_reset_steps", dict(beta=0.1, ref_reset_steps=0), "≥ 1"),
    ("dynamic_sampling_max_rounds", dict(dynamic_sampling="resample", dynamic_sampling_max_rounds=0), "≥ 1"),
    ("overlong_buffer_length", dict(overlong_buffer_length=9), "(0, 8]"),  # max_completion_length = 8
    ("overlong_buffer_length", dict(overlong_buffer_length=0), "(0, 8]"),
    ("overlong_buffer_length", dict(overlong_buffer_length=5, overlong_max_length=4), "(0, 4]"),
    ("overlong_max_length", dict(overlong_max_length=0), "≥ 1"),
    ("overlong_penalty_factor", dict(overlong_penalty_factor=-1.0), "≥ 0"),
    ("kl_placement", dict(kl_placement="both"), "use one of loss, reward"),
    # an estimator of pass rates (maxrl) gets no negative reward term; GDPO has no per-function KL penalty or critic
    ("kl_placement", dict(advantage_estimator="maxrl", kl_placement="reward", beta=0.05), "use kl_placement='loss'"),
    ("overlong_buffer_length", dict(advantage_estimator="maxrl", overlong_buffer_length=4), "buffer_length=None"),
    ("multi_objective_aggregation", dict(multi_objective_aggregation="normalize_then_sum", kl_placement="reward",
                                         beta=0.05), "use kl_placement='loss'"),
    ("multi_objective_aggregation", dict(multi_objective_aggregation="normalize_then_sum", advantage_estimator="gae"),
     "needs a critic"),
    ("dynamic_sampling_on_exhausted", dict(dynamic_sampling_on_exhausted="skip"), "use one of fill, raise"),
    ("nan_rewards", dict(nan_rewards="ignore"), "use one of raise, drop"),
    ("nonfinite_policy", dict(nonfinite_policy="ignore"), "use one of raise, skip"),
    # impossible but computable: a zero clip range off-policy, fp16 on a CPU
    ("epsilon", dict(epsilon=0.0, num_iterations=2), "use epsilon > 0"),
    ("epsilon_high", dict(loss_type="dapo", epsilon_high=0.0, steps_per_generation=2), "use epsilon_high > 0"),
    ("epsilon", dict(loss_type="gspo", epsilon=0.0, num_iterations=2), "use epsilon > 0"),
    ("fp16", dict(fp16=True), "set fp16=False"),
    # a sequence-level loss under a token-sum normaliser weights each sequence by its length
    (
        "loss_aggregation", dict(loss_type="gspo", loss_aggregation="token_mean_global"),
        "allow_sequence_loss_token_sum",
    ),
    ("loss_aggregation", dict(loss_type="gmpo", loss_aggregation="constant"), "use 'sequence_mean'"),
    # TRL builds these but fails at train() (torch's sampler), or trains something other than TRL's GDPO
    ("gradient_accumulation_steps", dict(gradient_accumulation_steps=0), "use an integer ≥ 1"),
    ("gradient_accumulation_steps", dict(gradient_accumulation_steps=-2), "use an integer ≥ 1"),
    ("max_steps", dict(max_steps=0), "≥ 1 optimizer steps, or -1 to train for num_train_epochs"),  # not 1 step
    ("max_steps", dict(max_steps=-2), "≥ 1 optimizer steps, or -1"),
    ("scale_rewards", dict(multi_objective_aggregation="normalize_then_sum", advantage_estimator="grpo",
                           scale_rewards="batch"), "set scale_rewards='group'"),
    ("scale_rewards", dict(multi_objective_aggregation="normalize_then_sum", advantage_estimator="grpo",
                           scale_rewards="none"), "set scale_rewards='group'"),
]


@pytest.mark.parametrize(
    "field, overrides, fix", IMPOSSIBLE, ids=[f"{case[0]}-{i}" for i, case in enumerate(IMPOSSIBLE)]
)
def test_impossible_value_names_the_field_and_the_fix(field, overrides, fix):
    message = rejection(**overrides)
    assert message.startswith(f"{field}:"), message
    assert fix in message, message


BOUNDARIES = [  # the closest allowed settings: each must build
    dict(num_generations=2),
    dict(epsilon=0.0, epsilon_high=0.0),  # on-policy (r = 1 exactly) the clip changes nothing
    dict(loss_type="reinforce", epsilon=0.0, num_iterations=2),  # no clip to close
    dict(delta=1.2, epsilon=0.2),
    dict(loss_type="cispo", cispo_epsilon_low=0.2, epsilon_high=0.8),
    dict(loss_type="cispo", epsilon=3.0),  # CISPO's cap is absolute: ε ≥ 1 is allowed there
    dict(loss_type="rspo", rspo_gamma_min=1.0),
    dict(rspo_gamma_min=0.0),  # a loss's own field is checked only when that loss is chosen
    dict(loss_type="dppo", dppo_divergence="kl", dppo_mask_low=2.0),  # a binary KL can exceed 1
    dict(loss_type="dppo", dppo_kl_coef=0.0),  # the paper's loss
    dict(advantage_estimator="maxrl", multi_objective_aggregation="normalize_then_sum"),
    dict(advantage_estimator="grpo", multi_objective_aggregation="normalize_then_sum", scale_rewards="group"),
    dict(multi_objective_aggregation="normalize_then_sum", scale_rewards="batch"),  # TRL's path: group std always
    dict(advantage_estimator="rloo", multi_objective_aggregation="normalize_then_sum", scale_rewards="batch"),
    dict(gradient_accumulation_steps=1),
    dict(max_steps=1),
    dict(max_steps=-1),
    dict(advantage_epsilon=0.0),
    dict(overlong_buffer_length=8),
    dict(overlong_penalty_factor=0.0),
    dict(loss_type="gspo", loss_aggregation="token_mean_global", allow_sequence_loss_token_sum=True),
    dict(loss_type="gspo", loss_aggregation="sequence_sum"),
]


@pytest.mark.parametrize("overrides", BOUNDARIES, ids=[str(i) for i in range(len(BOUNDARIES))])
def test_boundary_values_are_accepted(overrides):
    config = build(**overrides)
    for name, value in overrides.items():
        assert getattr(config, name) == value


# -------------------------------------------------------------------------------------------------- contradictions
CONTRADICTIONS = [
    # (overrides, the fields the one-line message must name, one side changed: a config that builds)
    (dict(beta=0.0, kl_placement="reward"), ("kl_placement", "beta"), dict(beta=0.04)),
    (dict(beta=0.04, skip_zero_advantage=True), ("skip_zero_advantage", "beta"), dict(beta=0.0)),
    (dict(loss_type="bnpo", length_bucketing=True), ("length_bucketing", "'bnpo'"), dict(loss_type="dapo")),
    (dict(loss_type="rspo", skip_zero_advantage=True), ("skip_zero_advantage", "'rspo'"), dict(loss_type="gmpo")),
    (
        dict(beta=0.1, ref_reset_steps=2, sync_ref_model=True),
        ("ref_reset_steps", "sync_ref_model"),
        dict(sync_ref_model=False),
    ),
    (
        dict(advantage_estimator="gae", multi_objective_aggregation="normalize_then_sum"),
        ("multi_objective_aggregation", "'gae'"),
        dict(multi_objective_aggregation="sum_then_normalize"),
    ),
]


@pytest.mark.parametrize(
    "overrides, named, resolved", CONTRADICTIONS, ids=[str(i) for i in range(len(CONTRADICTIONS))]
)
def test_contradictions_fail_when_the_config_is_built_before_any_model_loads(
    monkeypatch, tmp_path, capsys, overrides, named, resolved
):
    message = rejection(**overrides)
    assert message.startswith(f"{named[0]}:"), message
    for name in named[1:]:
        assert name in message, message
    assert "set " in message or "use " in message, message  # the fix
    build(**{**overrides, **resolved})

    # `trl-zoo train` stops on it with the same line, before TRL loads the policy or the reference
    from tests.test_cli import local_sums
    from trl_zoo.cli import main

    loaded = []
    replace_model_loading(monkeypatch, lambda *a, **k: loaded.append(a))
    flags = [item for key, value in overrides.items() for item in (f"--{key}", str(value).lower())]
    argv = ["train", *local_sums(tmp_path), *flags, "--output_dir", str(tmp_path / "run")]
    assert main(argv) == 2
    assert message in " ".join(capsys.readouterr().err.split())
    assert loaded == []


# -------------------------------------------------------------------------------------------------- other entry points
def test_misspelled_field_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="lose_type"):
        trl_zoo.GRPOConfig(**tiny.config_kwargs(lose_type="gspo"))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(epsilon="0.2"), "epsilon: expected float, got '0.2' (str); write it as epsilon=0.2."),
        (dict(max_steps="10"), "max_steps: expected int, got '10' (str); write it as max_steps=10."),
        (dict(max_steps=10.0), "max_steps: expected int, got 10.0 (float); write it as max_steps=10."),
        (dict(num_generations=True), "num_generations: expected int, got True (bool); give an int."),
        (dict(learning_rate="fast"), "learning_rate: expected float, got 'fast' (str); give a float."),
        (dict(use_cpu="yes"), "use_cpu: expected bool, got 'yes' (str); give True or False."),
        (dict(epsilon=None), "epsilon: expected float, got None (NoneType); give a float."),
        (dict(kl_target="0.1"), "kl_target: expected float, got '0.1' (str); write it as kl_target=0.1."),
    ],
    ids=["trl_float", "trl_int", "float_for_int", "bool_for_int", "no_number", "bool", "none", "zoo_float"],
)
def test_a_value_of_the_wrong_type_for_a_typed_field_names_it_before_trl_reads_it(overrides, message):
    assert rejection(**overrides) == message


def test_typed_fields_take_their_type_and_fields_of_several_types_keep_what_trl_accepts():
    config = build(epsilon=1 / 4, epsilon_high=None, max_steps=3, learning_rate=1, kl_target=None)
    assert (config.epsilon, config.epsilon_high, config.max_steps, config.learning_rate) == (0.25, None, 3, 1)
    assert build(scale_rewards="none", report_to="none", include_num_input_tokens_seen="all").scale_rewards == "none"
    config.epsilon = "0.2"  # changed after it was built: checked again (by the trainer too)
    with pytest.raises(ValueError, match=r"^epsilon: expected float, got '0.2' \(str\)"):
        config.validate()


def test_a_config_changed_after_it_was_built_is_checked_again_by_the_trainer():
    args = build()
    args.epsilon = -0.5
    with pytest.raises(ValueError, match=r"^epsilon / epsilon_high: clip ranges must be ≥ 0, got epsilon=-0.5"):
        trl_zoo.GRPOTrainer(model=tiny.model(0), reward_funcs=tiny.digit_reward, args=args,
                            train_dataset=tiny.prompts_dataset(), processing_class=tiny.tokenizer())


def test_a_plain_trl_config_gets_the_same_checks():
    args = trl.GRPOConfig(**tiny.config_kwargs(loss_type="grpo", delta=1.05))
    with pytest.raises(ValueError, match=r"^delta: the two-sided cap δ=1.05"):
        trl_zoo.GRPOTrainer(model=tiny.model(0), reward_funcs=tiny.digit_reward, args=args,
                            train_dataset=tiny.prompts_dataset(), processing_class=tiny.tokenizer())


@pytest.mark.parametrize(
    "overrides, warned, fine",
    [
        (dict(loss_type="dapo", epsilon_high=0.1), "opposite of DAPO's clip-higher", dict(epsilon_high=0.28)),
        (
            dict(loss_type="sapo", sapo_temperature_pos=2.0, sapo_temperature_neg=1.0),
            "SAPO uses τ_neg > τ_pos",
            dict(sapo_temperature_pos=1.0, sapo_temperature_neg=1.05),
        ),
    ],
    ids=["dapo_epsilon_high_below_epsilon", "sapo_tau_neg_below_tau_pos"],
)
def test_settings_against_the_paper_warn(overrides, warned, fine):
    with pytest.warns(UserWarning, match=warned) as record:
        build(**overrides)
    assert all("\n" not in str(warning.message) for warning in record)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        build(**{**overrides, **fine})


def test_cispo_cap_below_one_warns_and_a_cap_above_one_does_not():
    with pytest.warns(UserWarning, match="epsilon_high=0.2"):
        build(loss_type="cispo")  # TRL's default: the cap falls back to epsilon = 0.2
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        build(loss_type="cispo", epsilon_high=5.0)


def test_cispo_cap_warning_shows_once_when_the_trainer_validates_the_config_again():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own: once per place it is issued
        trainer = trl_zoo.GRPOTrainer(model=tiny.model(0), reward_funcs=tiny.digit_reward,
                                      args=build(loss_type="cispo"), train_dataset=tiny.prompts_dataset(),
                                      processing_class=tiny.tokenizer())
    assert trainer.args.loss_type == "cispo"
    assert sum("epsilon_high=0.2" in str(warning.message) for warning in caught) == 1


# -------------------------------------------------------------------------------------------------- training set
def dataset_rejection(dataset, **overrides) -> str:
    with pytest.raises(ValueError) as error:
        tiny.make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, dataset=dataset, **overrides)
    message = str(error.value)
    assert "\n" not in message, message
    return message


def test_an_empty_training_set_is_an_error_not_zero_steps():
    message = dataset_rejection(Dataset.from_dict({"prompt": []}))
    assert message.startswith("train_dataset: 0 rows"), message


def test_a_training_set_without_a_prompt_column_names_the_columns_it_has():
    message = dataset_rejection(Dataset.from_dict({"question": ["1+1="] * 8, "answer": ["2"] * 8}))
    assert message.startswith("train_dataset: no 'prompt' column"), message
    assert "question, answer" in message and "rename_column" in message, message


def test_a_training_set_smaller_than_one_generation_batch_is_an_error():
    # generation batch 8 rows / 4 generations = 2 prompts per batch
    message = dataset_rejection(tiny.prompts_dataset(1))
    assert message.startswith("train_dataset: the training set holds 1 prompts, fewer than the 2"), message


def test_resample_with_fewer_prompts_than_one_generation_batch_says_so():
    message = dataset_rejection(tiny.prompts_dataset(3), dynamic_sampling="resample", per_device_train_batch_size=16)
    expected = "dynamic_sampling='resample': the training set holds 3 prompts, fewer than the 4"
    assert message.startswith(expected), message
    assert "per_device_train_batch_size" in message, message


def test_one_generation_batch_of_prompts_is_enough():
    tiny.make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, dataset=tiny.prompts_dataset(2))


def test_max_completion_length_below_one_is_an_error():
    message = rejection(max_completion_length=0)
    assert message.startswith("max_completion_length: must be ≥ 1"), message


# -------------------------------------------------------------------------------------------------- declarations
def test_declarations_are_checked_at_registration_naming_the_entry():
    losses = trl_zoo.Registry("loss", spec_type=trl_zoo.LossSpec)
    with pytest.raises(ValueError, match=r"^loss 'typo_loss': aggregation: unknown aggregation 'token_mean_globl'\. "
                                         r"Did you mean 'token_mean_global'\?"):
        losses.add("typo_loss", lambda batch, args: None, description="x", aggregation="token_mean_globl")
    estimators = trl_zoo.Registry("advantage estimator", spec_type=trl_zoo.AdvantageSpec)
    known = re.escape(", ".join(ADVANTAGE_NEEDS))
    with pytest.raises(ValueError, match=r"^advantage estimator 'needy': needs: unknown estimator input "
                                         r"\['sequence_logp'\]; known: " + known + r"\."):
        estimators.add("needy", lambda inputs, args: None, description="x", needs=("sequence_logp",))
    assert "typo_loss" not in losses and "needy" not in estimators
    losses.add("fine", lambda batch, args: None, description="x", aggregation="constant")  # an alias is a name too
    assert losses.get("fine").spec.aggregation == "constant"


# -------------------------------------------------------------------------------------------------- plugin fields
@pytest.fixture
def scaled_loss(monkeypatch):
    """A loss with a hyperparameter of its own, in the loss table for one test."""
    from trl_zoo.registry import LOSSES, Entry

    scale = trl_zoo.PluginField("pg_scale", float, 1.0, "Scale of the term.", low=0.0, high=10.0)
    spec = trl_zoo.LossSpec(fields=(scale,))
    entry = Entry("scaled_pg", lambda batch, args: trl_zoo.PolicyTerm(-args.pg_scale * batch.logps), "x", spec=spec)
    monkeypatch.setitem(LOSSES._entries, "scaled_pg", entry)
    return entry


def test_a_plugin_field_is_a_config_keyword_with_its_default_and_range(scaled_loss):
    config = build(loss_type="scaled_pg", pg_scale=3)
    assert config.pg_scale == 3.0 and isinstance(config.pg_scale, float) and config.plugin_args == {"pg_scale": 3.0}
    assert build(loss_type="scaled_pg").pg_scale == 1.0  # the declared default
    assert build(loss_type="scaled_pg", plugin_args='{"pg_scale": 0.5}').pg_scale == 0.5  # JSON, as on a command line
    assert rejection(pg_scale=10.5) == "pg_scale: must be in [0.0, 10.0], got 10.5 (loss 'scaled_pg')."
    assert rejection(pg_scale="big") == "pg_scale: expected float, got 'big' (str); give a float (loss 'scaled_pg')."
    assert rejection(plugin_args={"pg_scael": 2.0}) == (
        "plugin_args: no plugin declares a field 'pg_scael'; declared fields: pg_scale."
    )
    with pytest.raises(AttributeError):
        build().pg_scael


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_plugin_field_is_refused_naming_it(scaled_loss, value, tmp_path):
    """NaN passes every range check (each comparison is False): refused as a keyword, in plugin_args (JSON's NaN,
    Infinity) and as a flag, naming the field, its range and its plugin; a NaN default where it is declared."""
    expected = f"pg_scale: must be a finite number in [0.0, 10.0], got {value} (loss 'scaled_pg')."
    assert rejection(loss_type="scaled_pg", pg_scale=value) == expected
    assert rejection(loss_type="scaled_pg", plugin_args=json.dumps({"pg_scale": value})) == expected
    assert rejection(pg_scale=value) == expected  # whichever loss is chosen, as a wrong type is
    from trl_zoo.cli.arguments.train_arguments import parse_train_args
    from trl_zoo.cli.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        parse_train_args(["--loss_type", "scaled_pg", f"--pg_scale={value}", "--output_dir", str(tmp_path / "r")])
    assert str(error.value) == expected
    with pytest.raises(ValueError, match=r"^shift: must be a finite number, got nan\.$"):
        trl_zoo.PluginField("shift", float, math.nan)


def test_a_plugin_field_may_not_shadow_a_config_field(monkeypatch, scaled_loss):
    from trl_zoo.registry import ADVANTAGES, Entry

    shadowing = trl_zoo.AdvantageSpec(fields=(trl_zoo.PluginField("beta", float, 0.0),))
    entry = Entry("shadowing", lambda inputs, args: None, "x", spec=shadowing)
    monkeypatch.setitem(ADVANTAGES._entries, "shadowing", entry)
    assert rejection() == "advantage estimator 'shadowing': its field 'beta' is already a GRPOConfig field; rename it."


def test_a_malformed_plugin_field_is_refused_where_it_is_declared():
    with pytest.raises(ValueError, match=r"^scale: must be in \[0.0, 1.0\], got 2.0\.$"):  # its default
        trl_zoo.PluginField("scale", float, 2.0, low=0.0, high=1.0)
    with pytest.raises(ValueError, match=r"^field 'two words': a field name must be a Python identifier"):
        trl_zoo.PluginField("two words")
    losses = trl_zoo.Registry("loss", spec_type=trl_zoo.LossSpec)
    twice = (trl_zoo.PluginField("scale"), trl_zoo.PluginField("scale", int, 1))
    with pytest.raises(ValueError, match=r"^loss 'bad': fields: a name is declared twice in \['scale', 'scale'\]\.$"):
        losses.add("bad", lambda batch, args: None, description="x", fields=twice)


def test_a_plugin_field_is_a_yaml_key_and_a_flag_of_train(scaled_loss, tmp_path):
    from trl_zoo.cli.arguments.train_arguments import parse_train_args
    from trl_zoo.cli.errors import ConfigError

    config = tmp_path / "scaled.yaml"
    config.write_text("loss_type: scaled_pg\npg_scale: 4\n")
    output = ["--output_dir", str(tmp_path / "run")]
    assert parse_train_args(["--config", str(config), *output]).training.pg_scale == 4.0
    parsed = parse_train_args(["--config", str(config), "--pg_scale", "2.5", *output])  # the flag wins
    assert parsed.training.pg_scale == 2.5 and parsed.training.plugin_args == {"pg_scale": 2.5}
    with pytest.raises(ConfigError, match=r"^pg_scale: must be in \[0.0, 10.0\], got 12.0 \(loss 'scaled_pg'\)\.$"):
        parse_train_args(["--loss_type", "scaled_pg", "--pg_scale", "12", *output])
    with pytest.raises(ConfigError, match=r"--pg_scale.*invalid float value: 'big'"):  # as any typed flag
        parse_train_args(["--loss_type", "scaled_pg", "--pg_scale", "big", *output])
