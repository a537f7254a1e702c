"""Every `torch.load` of the package and its benchmarks passes `weights_only=True`: a checkpoint file (critic.pt, the
zoo state, the buffered batch, the moved reference) can hold tensors and plain containers, never code to run."""

import ast
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def torch_load_calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load":
            if isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":
                yield node


SOURCES = sorted(path for folder in ("trl_zoo", "benchmarks", "tests") for path in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(ROOT)))
def test_torch_load_is_weights_only(path):
    for call in torch_load_calls(path):
        keywords = {keyword.arg: keyword.value for keyword in call.keywords}
        assert "weights_only" in keywords, f"{path.name}:{call.lineno}: torch.load without weights_only=True"
        assert isinstance(keywords["weights_only"], ast.Constant) and keywords["weights_only"].value is True


class NotATensor:
    pass


def test_weights_only_refuses_a_pickled_object(tmp_path):
    path = tmp_path / "critic.pt"
    torch.save({"mode": "head", "value_head": NotATensor()}, path)
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(path, weights_only=True)
