"""The class tables (trainer.py's docstring, docs/architecture.md) say the real method resolution order, and it holds
at most four classes of trl_zoo's: the features are the pipeline's components (hooks/pipeline.py), not bases."""

import inspect
import re
from pathlib import Path

import trl

import trl_zoo
import trl_zoo.trainer

DOCS = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def layers_in_order() -> list[tuple[str, str]]:
    """(class name, defining file relative to trl_zoo/) of every class from trl_zoo's GRPOTrainer to TRL's."""
    mro = trl_zoo.GRPOTrainer.__mro__
    layers = mro[: mro.index(trl.GRPOTrainer)]
    root = Path(trl_zoo.__file__).parent
    return [(cls.__name__, Path(inspect.getfile(cls)).relative_to(root).as_posix()) for cls in layers]


def test_the_trainer_docstring_lists_every_layer_in_order_with_its_file():
    rows = re.findall(r"^    ([A-Z]\w+)\s.*?\s(\S+\.py)$", trl_zoo.trainer.__doc__, flags=re.MULTILINE)
    assert rows == layers_in_order()


def test_the_architecture_page_lists_every_layer_in_order_with_its_file():
    rows = re.findall(r"^\| `([A-Z]\w+)` \|.*\| `(\S+\.py)` \|$", DOCS.read_text(), flags=re.MULTILINE)
    assert rows == layers_in_order()


def test_the_trainer_has_at_most_four_classes_of_trl_zoo():
    ours = [cls for cls in trl_zoo.GRPOTrainer.__mro__ if cls.__module__.startswith("trl_zoo")]
    assert len(ours) <= 4, [cls.__name__ for cls in ours]
