"""`--reward_funcs package.module.NAME` naming anything but a reward function stops with one line naming the path:
a string (TRL would load it as a reward model, from the hub), a number, None, a list, a module, a class, a reward
factory, a module that fails on import, an empty module name. Before, a string ended in "Unrecognized model" or a
network error, and a class or a factory in a complaint about a dataset column."""

import pytest

from trl_zoo.cli.errors import ConfigError
from trl_zoo.cli.rewards.reward_names import resolve_reward

NAME = "exact_match"
NUMBER = 3
NOTHING = None
LISTED = [len]


class RewardClass:
    def __init__(self, scale):
        self.scale = scale


def make_reward(scale):
    return lambda completions, **kwargs: [scale] * len(completions)


def keyword_reward(**kwargs):
    return [1.0] * len(kwargs["completions"])


def plain_reward(completions, **kwargs):
    return [1.0] * len(completions)


HERE = __name__
FIX = "give the path of a function fn(completions, **kwargs) -> list[float | None]"


@pytest.mark.parametrize(
    "path, message",
    [
        (f"{HERE}.NAME", f"reward_funcs: '{HERE}.NAME' is str 'exact_match', not callable; {FIX}."),
        (f"{HERE}.NUMBER", f"reward_funcs: '{HERE}.NUMBER' is int 3, not callable; {FIX}."),
        (f"{HERE}.NOTHING", f"reward_funcs: '{HERE}.NOTHING' is None, not callable; {FIX}."),
        (f"{HERE}.LISTED", f"reward_funcs: '{HERE}.LISTED' is list [<built-in function len>], not callable; {FIX}."),
        ("os.sys", f"reward_funcs: 'os.sys' is module <module 'sys' (built-in)>, not callable; {FIX}."),
        (f"{HERE}.RewardClass", f"reward_funcs: '{HERE}.RewardClass' is a class; {FIX}, or build the reward in your "
                                f"module (reward = RewardClass(...)) and give that path."),
        (f"{HERE}.make_reward", f"reward_funcs: '{HERE}.make_reward' looks like a reward factory(scale) (it takes no "
                                f"completions); build the reward in your module (reward = make_reward(...)) and give "
                                f"that path."),
        (".reward", "reward_funcs: cannot import '.reward' (ValueError: Empty module name)."),
        (f"{HERE}.missing", f"reward_funcs: cannot import '{HERE}.missing' (AttributeError: module '{HERE}' has no "
                            f"attribute 'missing')."),
    ],
    ids=["string", "number", "None", "list", "module", "class", "factory", "empty module", "missing attribute"],
)
def test_a_dotted_path_to_anything_but_a_reward_function_is_one_line(path, message):
    with pytest.raises(ConfigError) as error:
        resolve_reward(path)
    assert str(error.value) == message


def test_a_module_that_fails_on_import_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "failing_rewards.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"^reward_funcs: cannot import 'failing_rewards.reward' \(RuntimeError: no "
                                          r"GPU here\)\.$"):
        resolve_reward("failing_rewards.reward")


@pytest.mark.parametrize("name", ["keyword_reward", "plain_reward"])
def test_reward_functions_resolve(name):
    assert resolve_reward(f"{HERE}.{name}") is globals()[name]
