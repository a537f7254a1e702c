"""The command line is reachable as the console script and as `python -m trl_zoo.cli`; a new loss, estimator or
sampler is one new file of its table's folder, in the table with no other edit; every module's tests are findable
from its path: tests/test_<module stem>.py exists, or the module's docstring has a line starting "Tests:" that names
the test files exercising it, each of which exists. (The layers and the import graph: tests/test_import_layers.py.)"""

import ast
import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as the tomli package
    tomllib = pytest.importorskip("tomli")

import trl_zoo

ROOT = Path(__file__).resolve().parents[1]


def test_each_sampler_lives_in_its_own_file_of_the_samplers_folder():
    for name in ("resample", "reweight", "greso"):
        assert trl_zoo.SAMPLERS.get(name).fn.__module__ == f"trl_zoo.samplers.{name}"


# A table's folder -> its registry and a new entry written as one file of the folder.
NEW_ENTRIES = {
    "losses": ("LOSSES", "def fn(batch, args):\n    return None\n"),
    "advantages": ("ADVANTAGES", "def fn(inputs, args):\n    return inputs.rewards\n"),
    "samplers": ("SAMPLERS", "def fn(session, args):\n    return None\n"),
}


def test_a_new_loss_estimator_or_sampler_is_one_new_file_found_by_its_table(tmp_path):
    """In a copy of the package, one new file in each table's folder and no other edit: each table lists it."""
    copy = tmp_path / "trl_zoo"
    shutil.copytree(ROOT / "trl_zoo", copy, ignore=shutil.ignore_patterns("__pycache__"))
    for folder, (table, body) in NEW_ENTRIES.items():
        (copy / folder / "zoo_example.py").write_text(
            f"from ..registry import {table}\n\n\n@{table}.register('zoo_example', description='one new file')\n{body}"
        )
    code = ("import trl_zoo, trl_zoo.registry as r\n"
            f"print(trl_zoo.__file__, *(name for name, (table, _) in {NEW_ENTRIES!r}.items() "
            "if 'zoo_example' in getattr(r, table).names(plugins=False)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stderr
    where, *found = result.stdout.split()
    assert Path(where).is_relative_to(copy)
    assert found == list(NEW_ENTRIES)


def test_the_console_script_and_python_m_still_reach_the_command_line():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attribute = scripts["trl-zoo"].partition(":")
    assert getattr(importlib.import_module(module), attribute) is trl_zoo.cli.main
    result = subprocess.run([sys.executable, "-m", "trl_zoo.cli", "--version"], capture_output=True, text=True,
                            cwd=ROOT, check=False)
    assert result.returncode == 0 and result.stdout.startswith("trl-zoo "), result.stderr


def needs_no_tests_line(path: Path, docstring: str) -> bool:
    """A package's `__init__.py` / `__main__.py` with no function or class of its own (re-exports,
    `sys.exit(main())`)."""
    trivial = not re.search(r"^\s*(async\s+)?(def|class)\s", path.read_text(), flags=re.MULTILINE)
    return path.name in ("__init__.py", "__main__.py") and trivial


def problem_with_tests_line(path: Path, docstring: str) -> str | None:
    """What is wrong with the module's map to its tests; None when tests/test_<stem>.py exists and the docstring has
    no "Tests:" line, or the "Tests:" line (it may wrap onto the lines up to the next blank one) names at least one
    test file and every file it names exists."""
    lines = docstring.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Tests:")), None)
    if start is None:
        if (ROOT / "tests" / f"test_{path.stem}.py").is_file():
            return None
        return "no tests/test_<stem>.py and no docstring line starting 'Tests:'"
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    named = re.findall(r"tests/[\w/]+\.py", " ".join(lines[start:end]))
    if not any(re.fullmatch(r"tests/test_\w+\.py", file) for file in named):
        return "its 'Tests:' line names no tests/test_*.py file"
    missing = [file for file in named if not (ROOT / file).is_file()]
    return f"its 'Tests:' line names missing files: {', '.join(missing)}" if missing else None


def test_every_module_has_a_test_file_of_its_name_or_a_tests_line():
    problems = []
    for path in sorted((ROOT / "trl_zoo").rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        if needs_no_tests_line(path, docstring):
            continue
        problem = problem_with_tests_line(path, docstring)
        if problem:
            problems.append(f"{module}: {problem}")
    assert not problems, "\n".join(problems)


def modules_after(argv: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after `trl_zoo.cli.main(argv)`, as the `trl-zoo` command runs it."""
    code = (f"import sys, contextlib, io\nfrom trl_zoo.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    status = main({argv!r})\n"
            f"print(status, ' '.join(sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    status, *modules = result.stdout.split()
    assert status == "0", result.stderr
    return set(modules)


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["list", "--help"]])
def test_help_and_version_import_no_library(argv):
    """Counted, not timed: torch, transformers and TRL took ~11 s of a 2-core machine to import for a usage line."""
    loaded = modules_after(argv)
    assert not {"torch", "transformers", "trl", "datasets"} & loaded, sorted(loaded)


def test_list_imports_torch_for_the_tables_but_no_trainer_library():
    assert not {"transformers", "trl", "datasets", "peft"} & modules_after(["list"])


LONGEST_CLI_FUNCTION = 80  # lines, from its first decorator to its last line
LONGEST_TRAIN_MODULE = 300  # lines of cli/train/command.py: the command reads as its steps, each in its own module


def function_lengths(path: Path) -> dict[str, int]:
    """Every function and method a module defines (nested ones too), by qualified name: its length in lines."""
    lengths = {}

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            name = f"{prefix}{getattr(child, 'name', '')}"
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno, *(decorator.lineno for decorator in child.decorator_list)])
                lengths[name] = child.end_lineno - first + 1
            visit(child, f"{name}." if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  else prefix)

    visit(ast.parse(path.read_text()), "")
    return lengths


def test_the_command_line_reads_in_steps_no_function_over_80_lines_and_the_train_command_short():
    cli = ROOT / "trl_zoo" / "cli"
    long = [
        f"{path.relative_to(cli.parent).as_posix()}: {name} ({length} lines)"
        for path in sorted(cli.rglob("*.py"))
        for name, length in function_lengths(path).items()
        if length > LONGEST_CLI_FUNCTION
    ]
    assert not long, f"functions over {LONGEST_CLI_FUNCTION} lines: split them into steps: {long}"
    lines = len((cli / "train" / "command.py").read_text().splitlines())
    assert lines <= LONGEST_TRAIN_MODULE, f"cli/train/command.py has {lines} lines; move a step into its own module"


def test_each_component_is_one_file_of_components_named_as_its_class_and_its_pipeline_name():
    from trl_zoo.components import COMPONENTS
    from trl_zoo.hooks.component import Component

    for component in COMPONENTS:
        assert issubclass(component, Component)
        assert component.__module__ == f"trl_zoo.components.{component.name}", component
        assert component.__name__.lower() == component.name.replace("_", ""), component
    hooks = {path.stem for path in (ROOT / "trl_zoo" / "hooks").glob("*.py")}
    assert not hooks & {component.name for component in COMPONENTS}
