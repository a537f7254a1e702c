"""The package's import graph, derived from its source: no cycle, and no import from a lower layer to a higher one.

The layers, bottom to top (the same table stands in docs/architecture.md); a module belongs to the first layer one of
whose names is its path under `trl_zoo/` (a file's stem or its top folder). An import may go down or stay in its
layer; every import counts, also one inside a function.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "trl_zoo"

LAYERS = (
    ("kernel", ("numerics", "specs", "registry", "dataset_values", "run_files")),
    ("tables", ("losses", "aggregation", "advantages", "kl", "samplers", "reward_shaping", "value_function",
                "sft_term", "sampling_correction")),
    ("config", ("config",)),
    ("hooks", ("hooks",)),
    ("components", ("components",)),
    ("io", ("io",)),
    ("trainer", ("trainer",)),
    ("tasks", ("tasks",)),
    ("api", ("__init__",)),
    ("cli", ("cli",)),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_from(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a `from ... import` in module `name` (file `path`) reads, a relative one resolved."""
    if not node.level:
        return node.module or ""
    package = (name if path.name == "__init__.py" else name.rpartition(".")[0]).split(".")
    return ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))


def imports_of(name: str, path: Path, modules) -> set[str]:
    """The trl_zoo modules `name` imports (anywhere in the file), resolved to modules where a name is one."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(name, path, node)
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in modules else base)
    return {target for target in found if target in modules and target != name}


def layer_of(name: str) -> int:
    parts = name.split(".")[1:] or ["__init__"]
    for index, (_, members) in enumerate(LAYERS):
        if parts[0] in members:
            return index
    raise AssertionError(f"{name} is in no layer: add its file or folder to LAYERS here and in docs/architecture.md")


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer():
    for name in all_modules():
        layer_of(name)


def test_the_import_graph_has_no_cycle():
    assert cycles(import_graph()) == []


def test_no_import_runs_from_a_lower_layer_to_a_higher_one():
    upward = [
        f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for name, targets in import_graph().items()
        for target in sorted(targets)
        if layer_of(target) > layer_of(name)
    ]
    assert upward == []


def test_the_package_root_holds_at_most_13_modules():
    assert len(list(PACKAGE.glob("*.py"))) <= 13


def test_architecture_page_states_the_same_layers():
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    for layer, members in LAYERS:
        row = next((line for line in page.splitlines() if line.startswith(f"| {layer} |")), None)
        assert row is not None, f"docs/architecture.md has no row for the layer {layer!r}"
        assert all(f"`{member}`" in row for member in members), row



def defined_names(path: Path) -> set[str]:
    """The names a module binds itself at its top level (functions, classes, assignments), not those it imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.col_offset == 0:
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.col_offset == 0:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return names


def test_a_command_line_name_is_imported_from_the_module_that_defines_it():
    """`trl_zoo/cli/` re-exports nothing: every import of one of its names, in the package, the tests, the benchmarks
    and the examples, names the module that defines it (or imports a submodule)."""
    modules = all_modules()
    cli = {name: path for name, path in modules.items() if name == "trl_zoo.cli" or name.startswith("trl_zoo.cli.")}
    sources = [path for folder in ("trl_zoo", "tests", "benchmarks", "examples")
               for path in sorted((PACKAGE.parent / folder).rglob("*.py"))]
    elsewhere = []
    for path in sources:
        name = module_name(path) if path.is_relative_to(PACKAGE) else None
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or (node.level and name is None):
                continue
            base = imported_from(name, path, node)
            if base not in cli:
                continue
            defined = defined_names(cli[base])
            elsewhere += [f"{path.relative_to(PACKAGE.parent)}: {alias.name} from {base}" for alias in node.names
                          if alias.name not in defined and f"{base}.{alias.name}" not in modules]
    assert elsewhere == []

@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set(), "c": {"a"}}, []),
    ],
)
def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle(graph, expected):
    assert cycles(graph) == expected
