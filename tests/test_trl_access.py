"""TRL behind one door (`trl_zoo/hooks/trl_access.py`): no other module of the package touches a private name of TRL's
or transformers' (a walk over every file's syntax tree, with the names taken from the installed classes); what the door
relies on is checked against the installed TRL, and a drifted TRL stops the trainer's construction with one line; every
swap the door makes for the duration of a call of TRL's is undone however that call ends."""

import ast
import inspect
import pathlib
import re
import subprocess
import sys
import textwrap
import types
import warnings

import pytest
import torch
import trl
import trl.trainer.grpo_trainer as trl_grpo_trainer
from trl import GRPOTrainer as TRLGRPOTrainer

import trl_zoo
from tests import tiny
from trl_zoo.hooks import trl_access
from trl_zoo.hooks.trl_access import (
    RELIED_ELSEWHERE,
    RELIED_METHODS,
    RELIED_WITH_VLLM,
    TRLDriftError,
    TRLSeams,
    check_trainer_state,
    parameters,
    reference_loaded_from,
    replace_logged_advantages,
    restored,
    swapped,
    trl_drift,
    untested_trl_warned,
)

PACKAGE = pathlib.Path(trl_zoo.__file__).parent
DOOR = PACKAGE / "hooks" / "trl_access.py"
TESTS = pathlib.Path(__file__).parent
# the test files that touch TRL's private names (`test_no_test_file_but_the_route_to_trl_touches_trls_private_names`)
TESTS_TOUCHING_TRL = {"trl_internals.py", "test_trl_access.py", "test_block_times.py"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _names_of_class(cls) -> set[str]:
    """The private names a class defines or sets on its instances (`self._x` anywhere in its source)."""
    names = {name for name in vars(cls) if _private(name)}
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return names
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            if _private(node.attr):
                names.add(node.attr)
    return names


def trl_private_names() -> frozenset[str]:
    """TRL's and transformers' private names as the installed libraries define them: those of every class in TRL's
    trainer's method resolution order (transformers' `Trainer` among them) and of the other classes the door relies
    on, the private globals of TRL's trainer module, and the module globals the door swaps."""
    classes = [cls for cls in TRLGRPOTrainer.__mro__ if cls is not object]
    modules = [trl_grpo_trainer]
    swapped_globals = set()
    for owner, name, _ in (*RELIED_ELSEWHERE, *RELIED_WITH_VLLM):
        owner = trl_access._resolve(owner)
        if inspect.isclass(owner):
            classes.append(owner)
        else:
            modules.append(owner)
            swapped_globals.add(name)
    names = set().union(*(_names_of_class(cls) for cls in classes))
    names |= {name for module in modules for name in vars(module) if _private(name)}
    return frozenset(names | swapped_globals)


PRIVATE = trl_private_names()


def private_touches(source: str) -> list[str]:
    """Where `source` touches one of TRL's private names: an attribute (read, written or called), a method or class
    attribute of the same name (an override), the name as a string (getattr, setattr, a swap) or a keyword (a
    stand-in's attribute), or an import of a private name from TRL or transformers."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in PRIVATE:
            found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.keyword) and node.arg in PRIVATE:
            found.append(f"{node.lineno}: {node.arg}=")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("trl", "transformers"):
            found += [f"{node.lineno}: import {alias.name}" for alias in node.names if _private(alias.name)]
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    defined = [statement.name]
                elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
                    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                    defined = [target.id for target in targets if isinstance(target, ast.Name)]
                else:
                    defined = []
                found += [f"{statement.lineno}: def {name}" for name in defined if name in PRIVATE]
    return found


def test_the_private_names_come_from_the_installed_trl():
    assert {"_metrics", "_logs", "_buffered_inputs", "_step", "_compute_loss", "_generate_single_turn"} <= PRIVATE
    assert {"_save_checkpoint", "_get_grad_norm", "_compile_all_devices", "_iter_named_params"} <= PRIVATE
    assert "_policy_forward" not in PRIVATE  # trl_zoo's own seam


def touches_under(root: pathlib.Path) -> dict[str, list[str]]:
    """`private_touches` of every file under `root` that has any, by path relative to `root`; a file none of whose
    words is such a name is not parsed."""
    touching = {}
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        if PRIVATE.isdisjoint(re.findall(r"\w+", source)):
            continue
        found = private_touches(source)
        if found:
            touching[path.relative_to(root).as_posix()] = found
    return touching


def test_no_module_but_the_door_touches_trls_private_names():
    touching = touches_under(PACKAGE)
    touching.pop(DOOR.relative_to(PACKAGE).as_posix(), None)
    assert touching == {}


@pytest.mark.parametrize(
    "source, touch",
    [
        ('self._metrics["train"]["x"].append(1.0)', "1: ._metrics"),
        ("trainer._step = 0", "1: ._step"),
        ("class Layer:\n    def _compute_loss(self, model, inputs):\n        pass", "2: def _compute_loss"),
        ("class Layer:\n    _tag_names = ['x']", "2: def _tag_names"),
        ('setattr(trainer, "_buffered_inputs", [])', "1: '_buffered_inputs'"),
        ("SimpleNamespace(_metrics={})", "1: _metrics="),
        ("config.compile_config._compile_all_devices = True", "1: ._compile_all_devices"),
        ("module.create_model_from_path = load", "1: .create_model_from_path"),
    ],
)
def test_the_walk_flags_a_touch(source, touch):
    assert private_touches(source) == [touch]


def test_no_test_file_but_the_route_to_trl_touches_trls_private_names():
    """Tests reach TRL's private names through tests/trl_internals.py only, so the next TRL's renames are a change of
    that file (and of the door); the door's own test names what the door relies on and simulates drifted TRLs, and
    tests/test_block_times.py's stand-in names its profiled methods as TRL's."""
    touching = touches_under(TESTS)
    differing = set(touching) ^ TESTS_TOUCHING_TRL
    assert not differing, {name: touching.get(name, "touches none") for name in sorted(differing)}


def test_the_walk_leaves_trl_zoos_own_names_alone():
    source = "class Layer:\n    def _zoo_compute_loss(self, model, x):\n        return self._policy_forward(x)"
    assert private_touches(source) == []


# ---------------------------------------------------------------------- what the door relies on
def test_the_installed_trl_has_everything_the_door_relies_on():
    assert trl_drift() is None


def test_each_override_of_the_door_takes_trls_parameters():
    overridden = [name for name in RELIED_METHODS if name in vars(TRLSeams)]
    assert len(overridden) == 11
    for name in overridden:
        assert parameters(getattr(TRLSeams, name)) == RELIED_METHODS[name], name


class _Hidden(type):
    """A metaclass under which a class lacks `_compute_loss`, as a TRL that renamed it would."""

    def __getattribute__(cls, name):
        if name == "_compute_loss":
            raise AttributeError(name)
        return super().__getattribute__(name)


class RenamedTRL(TRLGRPOTrainer, metaclass=_Hidden):
    def _compute_policy_loss(self, model, inputs):
        return TRLGRPOTrainer._compute_loss(self, model, inputs)


class ChangedTRL(TRLGRPOTrainer):
    def _prepare_inputs(self, generation_batch, mode):
        return TRLGRPOTrainer._prepare_inputs(self, generation_batch)


class _NoPaper(type):
    """A metaclass under which a class lacks `_paper`, as a TRL that removed the class attribute would."""

    def __getattribute__(cls, name):
        if name == "_paper":
            raise AttributeError(name)
        return super().__getattribute__(name)


class RemovedTRL(TRLGRPOTrainer, metaclass=_NoPaper):
    pass


@pytest.mark.parametrize(
    "drifted, line",
    [
        (
            RenamedTRL,
            "trl_zoo relies on TRL's RenamedTRL._compute_loss(self, model, inputs), which the installed TRL lacks",
        ),
        (
            ChangedTRL,
            "trl_zoo relies on TRL's ChangedTRL._prepare_inputs(self, generation_batch), which the installed TRL has "
            "as _prepare_inputs(self, generation_batch, mode)",
        ),
        (RemovedTRL, "trl_zoo relies on TRL's RemovedTRL._paper, which the installed TRL lacks"),
    ],
)
def test_a_drifted_newer_trl_gets_one_line(drifted, line, monkeypatch):
    monkeypatch.setattr(trl, "__version__", "1.19.0")
    assert trl_drift(drifted) == f"{line} (installed TRL 1.19.0; trl_zoo is tested with TRL 1.16.x)."


def test_a_trl_whose_old_logps_pass_is_not_first_gets_one_line():
    class ReorderedTRL(TRLGRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            ref_per_token_logps, _, _ = self._get_per_token_logps_and_entropies(self.ref_model, inputs, None, 1)
            old_per_token_logps, _, _ = self._get_per_token_logps_and_entropies(self.model, inputs, None, 1)
            return old_per_token_logps, ref_per_token_logps

    line = trl_drift(ReorderedTRL)
    assert line.startswith("trl_zoo relies on TRL's ")
    assert "_generate_and_score_completions calling old_per_token_logps" in line and "\n" not in line


def test_a_newer_trl_that_no_longer_sets_an_attribute_stops_in_one_line(monkeypatch):
    monkeypatch.setattr(trl, "__version__", "1.19.0")
    state = dict.fromkeys(trl_access.RELIED_STATE)
    del state["_buffered_inputs"]
    with pytest.raises(TRLDriftError) as raised:
        check_trainer_state(types.SimpleNamespace(**state))
    assert str(raised.value) == (
        "trl_zoo relies on TRL's GRPOTrainer setting self._buffered_inputs in its constructor, which the installed "
        "TRL does not (installed TRL 1.19.0; trl_zoo is tested with TRL 1.16.x)."
    )


@pytest.fixture
def fresh_warning():
    """The untested-TRL warning as if no trainer had been built yet in this process."""
    untested_trl_warned.cache_clear()
    yield
    untested_trl_warned.cache_clear()


def test_a_trl_outside_the_tested_minor_warns_once_in_one_line(monkeypatch, fresh_warning):
    monkeypatch.setattr(trl, "__version__", "1.19.0")
    with pytest.warns(UserWarning) as caught:
        untested_trl_warned()
        untested_trl_warned()
    assert [str(warning.message) for warning in caught] == [
        "TRL 1.19.0 is installed and trl_zoo is tested with TRL 1.16.x: the TRL names trl_zoo relies on are "
        "checked, TRL's behaviour on this version is not; if something breaks or differs, report it as an issue of "
        "trl_zoo."
    ]


@pytest.mark.parametrize("version", ["1.16.0", "1.16.3", "1.16.1.dev0"])
def test_the_tested_minor_does_not_warn(version, monkeypatch, fresh_warning):
    monkeypatch.setattr(trl, "__version__", version)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        untested_trl_warned()


def test_the_construction_check_warns_on_a_newer_trl(monkeypatch, fresh_warning):
    """`check_installed_trl` is what the trainer's construction calls (the test below)."""
    monkeypatch.setattr(trl, "__version__", "1.19.0")
    trl_access.check_installed_trl.cache_clear()
    try:
        with pytest.warns(UserWarning, match=r"^TRL 1\.19\.0 is installed and trl_zoo is tested with TRL 1\.16\.x:"):
            trl_access.check_installed_trl()
    finally:
        trl_access.check_installed_trl.cache_clear()


def test_a_moved_vllm_module_matters_only_to_a_run_that_uses_vllm(monkeypatch):
    """TRL's vLLM module is imported only for a vLLM run, and then its absence is the drift line, not a bare
    ModuleNotFoundError."""
    monkeypatch.setitem(sys.modules, "trl.generation.vllm_generation", None)  # importing it raises
    assert trl_drift() is None
    assert trl_drift(use_vllm=True) == (
        "trl_zoo relies on TRL's trl.generation.vllm_generation.VLLMGeneration._iter_named_params(self), which the "
        f"installed TRL lacks (installed TRL {trl.__version__}; trl_zoo is tested with TRL 1.16.x)."
    )


def test_a_drifted_newer_trl_stops_the_trainers_construction_in_one_line(monkeypatch, fresh_warning):
    """The stop is the one line: no untested-version warning beside it."""
    monkeypatch.setattr(trl, "__version__", "1.19.0")
    monkeypatch.setattr(TRLGRPOTrainer, "_generate", lambda self, prompts, sampling_params: None)
    trl_access.check_installed_trl.cache_clear()
    try:
        with pytest.raises(TRLDriftError) as raised, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tiny.make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, max_steps=1)
    finally:
        trl_access.check_installed_trl.cache_clear()
    message = str(raised.value)
    assert "\n" not in message and message.startswith("trl_zoo relies on TRL's GRPOTrainer._generate(self, prompts)")
    assert "installed TRL 1.19.0" in message and "tested with TRL 1.16.x" in message
    assert not [warning for warning in caught if "is installed and trl_zoo is tested" in str(warning.message)]


# ---------------------------------------------------------------------- a trl.GRPOTrainer not TRL's own
# What `import unsloth` does to TRL (unsloth/models/rl.py): a module of its own compiled cache, named after the class,
# defines UnslothGRPOTrainer, and trl.GRPOTrainer, trl.trainer.GRPOTrainer and trl.trainer.grpo_trainer.GRPOTrainer are
# rebound to it; its compute_loss is Unsloth's own and never calls TRL's _compute_loss.
UNSLOTH_STAND_IN = """
import sys, types
import trl, trl.trainer, trl.trainer.grpo_trainer
sys.modules["unsloth"] = types.ModuleType("unsloth")
compiled = types.ModuleType("UnslothGRPOTrainer")
sys.modules["UnslothGRPOTrainer"] = compiled
class UnslothGRPOTrainer(trl.trainer.grpo_trainer.GRPOTrainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        raise AssertionError("Unsloth's loss")
UnslothGRPOTrainer.__module__ = compiled.__name__
compiled.UnslothGRPOTrainer = UnslothGRPOTrainer
trl.GRPOTrainer = trl.trainer.GRPOTrainer = trl.trainer.grpo_trainer.GRPOTrainer = UnslothGRPOTrainer
"""


def test_trl_zoo_imported_after_unsloth_refuses_its_trainer_in_one_line():
    """In a subprocess: the rebinding would stay in this one. The refusal comes at import, where the base is bound."""
    code = UNSLOTH_STAND_IN + textwrap.dedent("""
        try:
            from trl_zoo import GRPOTrainer
        except Exception as error:
            print(type(error).__name__, str(error))
        else:
            print("imported", [cls.__module__ + "." + cls.__qualname__ for cls in GRPOTrainer.__mro__])
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent,
                            check=True)
    assert result.stdout.strip() == (
        "TRLDriftError trl.GRPOTrainer is not TRL's own class but UnslothGRPOTrainer.UnslothGRPOTrainer (unsloth, "
        "imported before trl_zoo, rebinds it): trl_zoo's GRPOTrainer subclasses TRL's and runs its losses in TRL's "
        "_compute_loss, which that class's compute_loss never calls, so trl_zoo's loss_type would be ignored; import "
        "trl_zoo before unsloth, or do not import unsloth in a trl_zoo run."
    )


def test_trls_own_trainer_passes_and_another_class_is_named_by_module_and_name():
    assert trl_access.replaced_trainer(TRLGRPOTrainer) is None
    assert TRLSeams.__mro__[1] is TRLGRPOTrainer  # trl_zoo imported first: its layers stand on TRL's own class

    class GRPOTrainer(TRLGRPOTrainer):  # TRL's name, another module: still not TRL's own class
        pass

    line = trl_access.replaced_trainer(GRPOTrainer)
    assert line.startswith(
        f"trl.GRPOTrainer is not TRL's own class but {__name__}.{GRPOTrainer.__qualname__} (another library rebound "
        f"it): trl_zoo's GRPOTrainer subclasses TRL's"
    )
    with pytest.raises(TRLDriftError, match=r"^trl\.GRPOTrainer is not TRL's own class"):
        trl_access.check_trainer_class(GRPOTrainer)


# ---------------------------------------------------------------------- swaps
class Owner:
    def method(self):
        return "class"


@pytest.mark.parametrize("kind", ["instance attribute", "method of the class", "module's forward", "module attribute"])
def test_a_swap_is_undone_when_the_call_raises(kind):
    owner, name = {
        "instance attribute": (Owner(), "value"),
        "method of the class": (Owner(), "method"),
        "module's forward": (torch.nn.Linear(2, 2), "forward"),
        "module attribute": (trl_grpo_trainer, "create_model_from_path"),
    }[kind]
    if kind == "instance attribute":
        owner.value = [1]
    before, had = getattr(owner, name), name in vars(owner)
    with pytest.raises(RuntimeError, match="in the call"):
        with swapped(owner, name, lambda: "swapped"):
            assert getattr(owner, name)() == "swapped"
            raise RuntimeError("in the call")
    assert getattr(owner, name) == before and (name in vars(owner)) == had  # a class's method is not shadowed


def test_restored_undoes_what_the_block_set():
    layer = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError):
        with restored(layer, "forward"):
            layer.forward = lambda x: x
            raise RuntimeError
    assert "forward" not in vars(layer) and layer(torch.ones(1, 2)).shape == (1, 2)


def test_the_reference_swap_is_undone_when_trls_constructor_raises():
    load = trl_grpo_trainer.create_model_from_path
    reference = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError):
        with reference_loaded_from("in-memory", reference):
            assert trl_grpo_trainer.create_model_from_path("in-memory") is reference
            raise RuntimeError
    assert trl_grpo_trainer.create_model_from_path is load


def test_the_reward_functions_are_trls_again_after_a_reward_call_raises():
    def failing_reward(completions, **kwargs):
        raise RuntimeError("reward server down")

    trainer = tiny.make_trainer(trl_zoo.GRPOTrainer, trl_zoo.GRPOConfig, reward_funcs=[failing_reward], max_steps=1)
    reward_funcs = trainer.reward_funcs
    with pytest.raises(RuntimeError, match="reward server down"):
        trainer.train()
    assert trainer.reward_funcs is reward_funcs and trainer.reward_funcs[0] is failing_reward


def test_the_logged_advantages_of_the_last_rows_are_replaced():
    class Trainer:
        _logs = {"advantages": [9.0, 1.0, 2.0]}

    replace_logged_advantages(Trainer, [0.5, -0.5])
    assert Trainer._logs["advantages"] == [9.0, 0.5, -0.5]


def test_trls_generate_result_is_read_by_name_and_a_changed_layout_is_one_drift_line():
    fields = {name: index for index, name in enumerate(trl_access.GENERATE_RESULT)}
    assert trl_access.generate_result(trl_access.as_generate_result(fields)) == fields
    with pytest.raises(trl_access.TRLDriftError, match=r"^trl_zoo reads TRL's GRPOTrainer\._generate as returning"):
        trl_access.generate_result(tuple(range(len(trl_access.GENERATE_RESULT) - 1)))
