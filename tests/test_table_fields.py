"""The built-in losses', estimators' and samplers' own hyperparameters are declared where the entry is
(`PluginField`s in its spec, with their ranges and choices written once there) and are still ordinary `GRPOConfig`
fields: the same keyword, attribute, CLI flag and YAML key as before, a range checked when the entry is chosen, the
message naming the entry."""

import dataclasses
import inspect
import re
import warnings
from pathlib import Path

import pytest

import trl_zoo
from tests import tiny
from trl_zoo import config as config_module
from trl_zoo.config import FIELD_GROUPS, TABLE_FIELDS, GRPOConfig, plugin_fields
from trl_zoo.registry import ADVANTAGES, LOSSES, SAMPLERS, Entry

# field -> the built-in losses that declare it (gmpo's clip is also rspo's)
DECLARED_BY = {
    "cispo_epsilon_low": ["cispo"],
    "clip_cov_ratio": ["clip_cov"], "clip_cov_lower": ["clip_cov"], "clip_cov_upper": ["clip_cov"],
    "dppo_divergence": ["dppo"], "dppo_mask_low": ["dppo"], "dppo_mask_high": ["dppo"], "dppo_kl_coef": ["dppo"],
    "gmpo_epsilon": ["gmpo", "rspo"],
    "ipo_eps": ["ipo"], "ipo_kl_coef": ["ipo"],
    "luffy_gamma": ["luffy"], "luffy_off_policy_rows": ["luffy"], "luffy_clip": ["luffy"],
    "kl_cov_ratio": ["kl_cov"], "kl_cov_coef": ["kl_cov"],
    "m2po_threshold": ["m2po"],
    "ppo_kl_beta": ["ppo_kl"], "ppo_kl_target": ["ppo_kl"],
    "rspo_gamma_min": ["rspo"],
}
# the estimators' (gae's, VAPO's options among them) and the samplers' (resample's round cap is also greso's)
ESTIMATOR_FIELDS = {
    **{name: ["gae"] for name in ("gae_gamma", "gae_lambda", "gae_lambda_critic", "gae_whiten",
                                  "vapo_value_warmup_steps", "vapo_length_alpha", "vapo_positive_nll_coef",
                                  "vapo_positive_reward_threshold")},
    "passk_k": ["passk"],
    "a2po_beta1": ["a2po"],
    **{name: ["gigpo"] for name in ("gigpo_step_weight", "gigpo_gamma", "gigpo_mode")},
    "mt_grpo_turn_advantage_coef": ["mt_grpo"],
}
SAMPLER_FIELDS = {
    "dynamic_sampling_max_rounds": ["adaptive_budget", "greso", "resample"],
    "dynamic_sampling_on_exhausted": ["adaptive_budget", "greso", "resample"],
    **{name: ["adaptive_budget"] for name in ("adaptive_budget_first_size", "adaptive_budget_max_size",
                                              "adaptive_budget_min_size", "adaptive_budget_give_up_size")},
    **{name: ["greso"] for name in ("greso_target_zero_spread", "greso_step", "greso_initial_explore",
                                    "greso_min_explore")},
}
# fields of several entries' or of the trainer's, which stay written in trl_zoo/config/
SHARED = ("advantage_std_unbiased", "advantage_epsilon", "critic_model", "value_coef", "value_clip",
          "value_learning_rate", "dynamic_sampling", "epsilon", "beta")


def build(**overrides):
    return trl_zoo.GRPOConfig(**tiny.config_kwargs(**overrides))


def rejection(**overrides) -> str:
    with pytest.raises(ValueError) as error:
        build(**overrides)
    return str(error.value)


def declared_by(table) -> dict[str, list[str]]:
    declared = {}
    for entry in table.entries():
        for plugin_field in entry.spec.fields:
            declared.setdefault(plugin_field.name, []).append(entry.name)
    return {name: sorted(entries) for name, entries in declared.items()}


def test_each_builtin_loss_estimator_and_sampler_declares_its_own_fields():
    assert declared_by(LOSSES) == DECLARED_BY
    assert declared_by(ADVANTAGES) == ESTIMATOR_FIELDS
    assert declared_by(SAMPLERS) == SAMPLER_FIELDS
    assert set(TABLE_FIELDS) == set(DECLARED_BY) | set(ESTIMATOR_FIELDS) | set(SAMPLER_FIELDS)
    assert not set(SHARED) & set(TABLE_FIELDS)
    # a field shared by two entries is one declaration (the same object), as rspo shares gmpo's
    for table in (LOSSES, SAMPLERS):
        for name, owners in declared_by(table).items():
            objects = {id(f) for owner in owners for f in table.get(owner).spec.fields if f.name == name}
            assert len(objects) == 1, name


CONFIG_FOLDER = Path(config_module.__file__).parent
REPOSITORY = CONFIG_FOLDER.parents[1]


def test_the_declarations_are_written_once_and_become_config_fields():
    source = "\n".join(path.read_text() for path in sorted(CONFIG_FOLDER.glob("*.py")))
    config_fields = {item.name: item for item in dataclasses.fields(GRPOConfig)}
    for name, (plugin_field, _) in TABLE_FIELDS.items():
        assert not re.search(rf"^\s+{name}\s*:", source, re.M), f"{name} is declared again in trl_zoo/config/"
        item = config_fields[name]
        assert item.default == plugin_field.default and item.metadata["help"] == plugin_field.description
        assert item.metadata.get("choices") == (list(plugin_field.choices) if plugin_field.choices else None)
    assert config_fields["dppo_divergence"].metadata["choices"] == ["tv", "kl"]  # the choice list of the declaration
    assert "In (0, 1]." in config_fields["rspo_gamma_min"].metadata["help"]  # the range, in the help
    assert config_fields["dynamic_sampling_on_exhausted"].metadata["choices"] == ["fill", "raise"]
    assert config_fields["vapo_length_alpha"].default is None and config_fields["gae_whiten"].default is True
    assert "In (0, 0.95]." in config_fields["greso_min_explore"].metadata["help"]
    assert not set(TABLE_FIELDS) & set(plugin_fields())  # not plugin_args: no second route to the same value



def test_every_field_is_written_in_the_config_folder_or_in_a_file_of_a_table():
    """Found by grep: a field of trl_zoo's GRPOConfig is declared (`name: type = ...`) in trl_zoo/config/ or named
    (`"name"`) in a file of the tables' folders (losses/, advantages/, samplers/), where its entry declares it."""
    plugin_sources = {
        path: path.read_text() for folder in ("losses", "advantages", "samplers")
        for path in sorted((REPOSITORY / "trl_zoo" / folder).glob("*.py"))
    }
    config_source = "\n".join(path.read_text() for path in sorted(CONFIG_FOLDER.glob("*.py")))
    for name in ["loss_type", *config_module.zoo_field_names()]:
        in_plugins = [path for path, text in plugin_sources.items() if f'"{name}"' in text]
        assert re.search(rf"^    {name}: ", config_source, re.M) or in_plugins, name


def test_the_config_is_one_dataclass_a_concern_composed_flat():
    assert max(len(path.read_text().splitlines()) for path in CONFIG_FOLDER.glob("*.py")) <= 250
    assert all(dataclasses.is_dataclass(group) and issubclass(GRPOConfig, group) for group in FIELD_GROUPS)
    own = [item.name for group in FIELD_GROUPS for item in dataclasses.fields(group)]
    assert own == ["loss_type", *config_module.zoo_field_names()]  # each field in one group, in the config's order
    assert not hasattr(GRPOConfig.__init__, "__wrapped__")  # the dataclass's own __init__, not replaced
    fields_in_init = [item.name for item in dataclasses.fields(GRPOConfig) if item.init]
    assert list(inspect.signature(GRPOConfig).parameters) == fields_in_init  # as the dataclass's, not the metaclass's

def test_a_builtin_loss_field_is_a_keyword_an_attribute_and_a_saved_field_as_before():
    args = build(loss_type="dppo", dppo_divergence="kl", dppo_mask_low=2, dppo_kl_coef=0.0)
    assert args.dppo_mask_low == 2.0 and isinstance(args.dppo_mask_low, float)  # an int is taken for a float
    assert args.plugin_args is None and args.to_dict()["dppo_divergence"] == "kl"
    args.m2po_threshold = 0.5
    assert dataclasses.asdict(args)["m2po_threshold"] == 0.5
    assert build(loss_type="gmpo").gmpo_epsilon == 0.4


def test_a_builtin_loss_field_is_a_yaml_key_and_a_flag_of_train(tmp_path):
    from trl_zoo.cli.arguments.train_arguments import parse_train_args
    from trl_zoo.cli.errors import ConfigError

    config = tmp_path / "m2po.yaml"
    config.write_text("loss_type: m2po\nm2po_threshold: 0.5\n")
    output = ["--output_dir", str(tmp_path / "run")]
    assert parse_train_args(["--config", str(config), *output]).training.m2po_threshold == 0.5
    parsed = parse_train_args(["--config", str(config), "--m2po_threshold", "0.25", *output]).training
    assert parsed.m2po_threshold == 0.25 and parsed.plugin_args is None  # the flag wins
    with pytest.raises(ConfigError, match=r"^m2po_threshold: must be > 0, got 0\.0 \(loss 'm2po'\)\.$"):
        parse_train_args(["--loss_type", "m2po", "--m2po_threshold", "0", *output])
    with pytest.raises(ConfigError, match=r"dppo_divergence.*'js'"):  # the declaration's choices, as argparse's
        parse_train_args(["--dppo_divergence", "js", *output])


def test_a_range_is_the_declarations_and_checked_when_its_loss_is_chosen():
    assert rejection(loss_type="m2po", m2po_threshold=0.0) == "m2po_threshold: must be > 0, got 0.0 (loss 'm2po')."
    assert rejection(loss_type="rspo", rspo_gamma_min=1.5) == (
        "rspo_gamma_min: must be in (0, 1], got 1.5 (loss 'rspo')."
    )
    assert rejection(loss_type="rspo", gmpo_epsilon=0.0) == "gmpo_epsilon: must be > 0, got 0.0 (loss 'rspo')."
    assert rejection(loss_type="cispo", cispo_epsilon_low=1.0, epsilon_high=5.0) == (
        "cispo_epsilon_low: must be in [0, 1), got 1.0 (loss 'cispo')."
    )
    build(m2po_threshold=0.0, rspo_gamma_min=0.0)  # grpo reads neither
    # a value of the wrong type or outside the choices is refused whichever loss is chosen
    assert rejection(m2po_threshold="big") == (
        "m2po_threshold: expected float, got 'big' (str); give a float (loss 'm2po')."
    )
    assert rejection(dppo_divergence="js") == "dppo_divergence: got 'js'; use one of tv, kl."


def test_a_plugin_may_share_a_builtin_field_only_as_the_same_declaration(monkeypatch):
    from trl_zoo.losses.gmpo import EPSILON

    same = Entry("my_gmpo", lambda batch, args: None, "x", spec=trl_zoo.LossSpec(fields=(EPSILON,)))
    monkeypatch.setitem(LOSSES._entries, "my_gmpo", same)
    assert build(loss_type="my_gmpo", gmpo_epsilon=0.3).gmpo_epsilon == 0.3
    other = trl_zoo.PluginField("gmpo_epsilon", float, 0.2)
    differing = Entry("my_gmpo", same.fn, "x", spec=trl_zoo.LossSpec(fields=(other,)))
    monkeypatch.setitem(LOSSES._entries, "my_gmpo", differing)
    assert rejection() == "loss 'my_gmpo': its field 'gmpo_epsilon' is already a GRPOConfig field; rename it."


def test_estimator_and_sampler_fields_are_keywords_attributes_and_saved_fields_as_before():
    args = build(advantage_estimator="gae", gae_gamma=1, vapo_length_alpha=0.05, dynamic_sampling="greso",
                 greso_step=0.02, dynamic_sampling_max_rounds=3)
    assert args.gae_gamma == 1.0 and isinstance(args.gae_gamma, float) and args.vapo_length_alpha == 0.05
    assert args.plugin_args is None and args.to_dict()["greso_step"] == 0.02
    assert args.dynamic_sampling_max_rounds == 3 and args.gae_whiten is True
    args.greso_min_explore = 0.05
    assert dataclasses.asdict(args)["greso_min_explore"] == 0.05


def test_estimator_and_sampler_fields_are_yaml_keys_flags_and_grouped_in_help(tmp_path, capsys):
    from trl_zoo.cli.arguments.train_arguments import parse_train_args
    from trl_zoo.cli.arguments.train_help import field_groups
    from trl_zoo.cli.errors import ConfigError

    config = tmp_path / "gae.yaml"
    config.write_text("advantage_estimator: gae\ngae_lambda: 0.5\ndynamic_sampling: resample\n")
    output = ["--output_dir", str(tmp_path / "run")]
    parsed = parse_train_args(["--config", str(config), "--dynamic_sampling_max_rounds", "2", "--no_gae_whiten",
                               *output]).training
    assert (parsed.gae_lambda, parsed.dynamic_sampling_max_rounds, parsed.gae_whiten) == (0.5, 2, False)
    with pytest.raises(ConfigError, match=r"^greso_step: must be in \(0, 1\), got 1\.5 \(sampler 'greso'\)\.$"):
        parse_train_args(["--dynamic_sampling", "greso", "--greso_step", "1.5", *output])
    with pytest.raises(ConfigError, match=r"dynamic_sampling_on_exhausted.*'skip'"):
        parse_train_args(["--dynamic_sampling_on_exhausted", "skip", *output])
    from trl import ModelConfig

    from trl_zoo.cli.arguments.train_arguments import TaskArguments

    groups = field_groups(TaskArguments, GRPOConfig, ModelConfig)
    for name in ESTIMATOR_FIELDS:
        assert groups[name] == "trl_zoo: advantages and KL", name
    for name in SAMPLER_FIELDS:
        assert groups[name] == "trl_zoo: sampling and reward shaping", name


def test_estimator_and_sampler_ranges_are_checked_when_chosen_naming_the_entry():
    assert rejection(advantage_estimator="gae", gae_lambda=1.5) == (
        "gae_lambda: must be in [0, 1], got 1.5 (advantage estimator 'gae')."
    )
    assert rejection(advantage_estimator="gae", vapo_value_warmup_steps=-1) == (
        "vapo_value_warmup_steps: must be ≥ 0, got -1 (advantage estimator 'gae')."
    )
    assert rejection(dynamic_sampling="resample", dynamic_sampling_max_rounds=0) == (
        "dynamic_sampling_max_rounds: must be ≥ 1, got 0 (sampler 'resample')."
    )
    assert rejection(dynamic_sampling="greso", greso_min_explore=0.2, greso_initial_explore=0.1).startswith(
        "greso_initial_explore: must be in [greso_min_explore, 0.95]"
    )
    build(gae_lambda=1.5, greso_step=0.0, dynamic_sampling_max_rounds=0)  # chosen by no entry: not read
    assert rejection(gae_gamma="big") == (
        "gae_gamma: expected float, got 'big' (str); give a float (advantage estimator 'gae')."
    )
    # the critic's own fields (config/critic.py's) keep their checks when an estimator with a critic is chosen
    assert rejection(advantage_estimator="gae", value_coef=-1.0) == "value_coef: must be ≥ 0, got -1.0."


def unread_field_warnings(**overrides) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build(**overrides)
    return [str(w.message) for w in caught if "has no effect: only the " in str(w.message)]


@pytest.mark.parametrize("sampler", [None, "resample", "greso"])
def test_a_sampler_field_the_chosen_sampler_does_not_read_warns_naming_it(sampler):
    assert unread_field_warnings(dynamic_sampling=sampler, adaptive_budget_max_size=4) == [
        f"adaptive_budget_max_size: 4 has no effect: only the sampler 'adaptive_budget' reads it, and "
        f"dynamic_sampling is {sampler!r}; set dynamic_sampling to 'adaptive_budget', or leave "
        f"adaptive_budget_max_size unset."
    ]
    assert unread_field_warnings(dynamic_sampling="adaptive_budget", adaptive_budget_max_size=4) == []
    assert unread_field_warnings(dynamic_sampling=sampler, adaptive_budget_first_size=2) == []  # its default


def test_every_sampler_field_warns_alike_and_a_shared_one_names_every_reader():
    assert len(unread_field_warnings(greso_step=0.02, greso_min_explore=0.05)) == 2
    assert unread_field_warnings(dynamic_sampling="reweight", dynamic_sampling_max_rounds=3) == [
        "dynamic_sampling_max_rounds: 3 has no effect: only the samplers 'adaptive_budget', 'greso', 'resample' "
        "read it, and dynamic_sampling is 'reweight'; set dynamic_sampling to one of them, or leave "
        "dynamic_sampling_max_rounds unset."
    ]
    assert unread_field_warnings(dynamic_sampling="greso", dynamic_sampling_max_rounds=3) == []


@pytest.mark.parametrize(
    "overrides, warned",
    [
        (dict(passk_k=3), "passk_k: 3 has no effect: only the advantage estimator 'passk' reads it, and "
                          "advantage_estimator is None; set advantage_estimator to 'passk', or leave passk_k unset."),
        (dict(advantage_estimator="grpo", gigpo_gamma=0.5), "gigpo_gamma: 0.5 has no effect: only the advantage "
         "estimator 'gigpo' reads it, and advantage_estimator is 'grpo'; set advantage_estimator to 'gigpo', or "
         "leave gigpo_gamma unset."),
        (dict(advantage_estimator="rloo", a2po_beta1=0.25), "a2po_beta1: 0.25 has no effect: only the advantage "
         "estimator 'a2po' reads it, and advantage_estimator is 'rloo'"),
        (dict(advantage_estimator="gigpo", mt_grpo_turn_advantage_coef=0.5), "mt_grpo_turn_advantage_coef: 0.5 has "
         "no effect: only the advantage estimator 'mt_grpo' reads it, and advantage_estimator is 'gigpo'"),
        (dict(loss_type="dapo", ipo_eps=0.2), "ipo_eps: 0.2 has no effect: only the loss 'ipo' reads it, and "
                                              "loss_type is 'dapo'; set loss_type to 'ipo', or leave ipo_eps unset."),
        (dict(loss_type="grpo", luffy_gamma=0.2), "luffy_gamma: 0.2 has no effect: only the loss 'luffy' reads it, "
                                                  "and loss_type is 'grpo'"),
        (dict(loss_type="grpo", luffy_off_policy_rows=2), "luffy_off_policy_rows: 2 has no effect: only the loss "
                                                          "'luffy' reads it, and loss_type is 'grpo'"),
        (dict(loss_type="grpo", gmpo_epsilon=0.3), "gmpo_epsilon: 0.3 has no effect: only the losses 'gmpo', 'rspo' "
         "read it, and loss_type is 'grpo'; set loss_type to one of them, or leave gmpo_epsilon unset."),
    ],
    ids=["passk_trl", "gigpo_grpo", "a2po_rloo", "mt_grpo_gigpo", "ipo_dapo", "luffy_gamma", "luffy_rows", "gmpo"],
)
def test_every_table_field_the_chosen_entry_does_not_read_warns_once_naming_its_readers(overrides, warned):
    got = unread_field_warnings(**overrides)
    assert len(got) == 1 and got[0].startswith(warned), got
    name = next(key for key in overrides if key not in ("loss_type", "advantage_estimator"))
    chooser = "loss_type" if name in DECLARED_BY else "advantage_estimator"
    reader = (DECLARED_BY.get(name) or ESTIMATOR_FIELDS[name])[0]
    settings = tiny.required_settings(reader) if chooser == "loss_type" else {}
    assert unread_field_warnings(**{**overrides, chooser: reader, **settings}) == []  # read by the chosen entry
    default = TABLE_FIELDS[name][0].default
    assert unread_field_warnings(**{**overrides, name: default}) == []  # at its default: nothing set, no warning


def test_an_unread_field_warns_once_when_the_trainer_validates_the_config_again():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own: once per place it is issued
        tiny.make_trainer(trl_zoo.GRPOTrainer, GRPOConfig, passk_k=3)
    assert sum("passk_k: 3 has no effect" in str(warning.message) for warning in caught) == 1


def test_a_plugin_field_the_chosen_entry_does_not_read_warns_alike(monkeypatch):
    spec = trl_zoo.LossSpec(fields=(trl_zoo.PluginField("pg_scale", float, 1.0, "Scale.", low=0.0),))
    monkeypatch.setitem(LOSSES._entries, "scaled_pg", Entry("scaled_pg", LOSSES.get("grpo").fn, "x", spec=spec))
    assert unread_field_warnings(loss_type="grpo", pg_scale=2.0) == [
        "pg_scale: 2.0 has no effect: only the loss 'scaled_pg' reads it, and loss_type is 'grpo'; set loss_type to "
        "'scaled_pg', or leave pg_scale unset."
    ]
    assert unread_field_warnings(loss_type="scaled_pg", pg_scale=2.0) == []
