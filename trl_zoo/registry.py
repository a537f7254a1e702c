"""The plugin tables.

A table maps a name to an entry: a function, a one-line description, the paper it comes from and its typed spec
(`trl_zoo/specs.py`: `LossSpec` for losses, `AdvantageSpec` for estimators, `SamplerSpec` for samplers), built from
the declarations passed to `register`, defaults for the rest. Entries are added with the table's decorator
(``@LOSSES.register("name", ...)``) or, for third-party packages, through a package entry point in the table's group
(``trl_zoo.losses`` for losses), loaded the first time the table is read; a bare function gets the defaults. The
built-in entries' modules (`BUILT_IN_MODULES`) are imported at the first read of any table.

Looking up an unknown name raises a ``ValueError`` that lists the known names and the closest match
(`closest_name`, also the command line's for fields and commands); registering a name twice raises unless
``override=True`` is passed. An entry point that fails to load (its module or attribute
is missing, its import raises) is reported once in a warning and skipped; only looking its name up fails, with
the same reason.

Tests: tests/test_validation.py (closest known name, declarations at registration), tests/test_broken_plugin.py (broken
entry points), tests/test_plugin_package.py (the entry-point group).
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from importlib.metadata import entry_points
from typing import Any

from .specs import AdvantageSpec, LossSpec, SamplerSpec, Spec


@dataclass(frozen=True)
class Entry:
    """One row of a plugin table: the function, what `trl-zoo list` shows about it, and its spec."""

    name: str
    fn: Callable[..., Any]
    description: str
    source: str = ""
    spec: Any = Spec()


class Registry:
    """A named table of plugins, extensible by decorator and by package entry points."""

    def __init__(self, kind: str, entry_point_group: str | None = None, spec_type: type = Spec):
        self.kind = kind
        self.entry_point_group = entry_point_group
        self.spec_type = spec_type
        self._entries: dict[str, Entry] = {}
        self._aliases: dict[str, str] = {}  # old name -> name
        self._broken: dict[str, str] = {}  # entry-point name -> why it could not be loaded
        self._entry_points_loaded = entry_point_group is None

    def register(
        self, name: str, *, description: str, source: str = "", override: bool = False, **declarations
    ) -> Callable[[Any], Any]:
        """Decorator: add the decorated function to the table under `name`, with its spec's `declarations`."""

        def decorator(fn):
            self.add(name, fn, description=description, source=source, override=override, **declarations)
            return fn

        return decorator

    def add(self, name: str, fn, *, description: str, source: str = "", override: bool = False, **declarations):
        if not name or not isinstance(name, str):
            raise ValueError(f"A {self.kind} name must be a non-empty string, got {name!r}.")
        if name in self._entries and not override:
            raise ValueError(
                f"A {self.kind} named {name!r} is already registered ({self._entries[name].fn!r}). "
                f"Pass override=True to replace it."
            )
        try:
            spec = self.spec_type(**declarations)
        except TypeError:
            known = ", ".join(f.name for f in fields(self.spec_type)) or "none"
            raise ValueError(
                f"{self.kind} {name!r}: unknown declarations {sorted(declarations)}; known: {known}."
            ) from None
        except ValueError as error:  # a malformed PluginField
            raise ValueError(f"{self.kind} {name!r}: {error}") from None
        try:
            spec.check(TABLES)
        except ValueError as error:
            raise ValueError(f"{self.kind} {name!r}: {error}") from None
        self._entries[name] = Entry(name, fn, description.strip(), source, spec)

    def add_alias(self, alias: str, name: str):
        """Accept `alias` wherever `name` is accepted (a renamed entry's old name); `names()` lists only `name`."""
        self._aliases[alias] = name

    def get(self, name: str) -> Entry:
        self._load_entry_points()
        name = self._aliases.get(name, name)
        if name not in self._entries:
            raise ValueError(self._broken.get(name) or self.unknown_message(name))
        return self._entries[name]

    def unknown_message(self, name: str, field_name: str | None = None) -> str:
        where = f"{field_name}: " if field_name else ""
        if name in self._broken:
            return where + self._broken[name]
        known = self.names()
        folded = str(name).strip().lower()  # "GRPO " is a near miss of "grpo", named but not taken for it
        same_but_case = [candidate for candidate in (*known, *self._aliases) if candidate.lower() == folded]
        close = same_but_case or [closest_name(folded, known)]
        hint = f" Did you mean {close[0]!r}?" if close[0] else ""
        return f"{where}unknown {self.kind} {name!r}.{hint} Known: {', '.join(known)}."

    def names(self, plugins: bool = True) -> list[str]:
        """Every name in the table; `plugins=False`: the built-in ones and those registered so far, without
        importing entry points."""
        if plugins:
            self._load_entry_points()
        else:
            load_built_in_entries()
        return sorted(self._entries)

    def entries(self, plugins: bool = True) -> list[Entry]:
        """Every entry; `plugins=False`: the built-in ones and those registered so far, without importing entry
        points."""
        return [self._entries[name] for name in self.names(plugins)]

    def __contains__(self, name: str) -> bool:
        self._load_entry_points()
        return self._aliases.get(name, name) in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _load_entry_points(self):
        load_built_in_entries()
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for entry_point in entry_points(group=self.entry_point_group):
            try:
                loaded = entry_point.load()  # importing the module runs its @register decorators
            except Exception as error:  # a broken plugin must not break the other entries
                self._skip_broken(entry_point, error)
                continue
            if entry_point.name not in self._entries and callable(loaded):
                doc = (loaded.__doc__ or entry_point.value).strip().splitlines()[0]
                self.add(entry_point.name, loaded, description=doc, source=entry_point.value)

    def _skip_broken(self, entry_point, error: Exception):
        dist = getattr(entry_point, "dist", None)
        package = f"package {dist.name!r}" if dist is not None else "an installed package"
        why = " ".join(f"{type(error).__name__}: {error}".split())
        self._broken[entry_point.name] = (
            f"{self.kind} {entry_point.name!r} from {package} (entry point group {self.entry_point_group!r}, "
            f"{entry_point.value}) could not be loaded: {why}"
        )
        warnings.warn(self._broken[entry_point.name] + "; skipped.", stacklevel=2)


# the modules whose decorators register the built-in entries of the tables
BUILT_IN_MODULES = ("aggregation", "kl", "advantages", "losses", "samplers")
_built_in_loaded = False


def load_built_in_entries() -> None:
    """Import `BUILT_IN_MODULES` once, at the first read of any table, so that a table is whole however trl_zoo was
    imported (`import trl_zoo` alone imports none of them, nor torch: `trl-zoo --help` starts without them)."""
    global _built_in_loaded
    if not _built_in_loaded:
        _built_in_loaded = True  # first: a module being imported reads the tables it registers into
        for module in BUILT_IN_MODULES:
            importlib.import_module(f"{__package__}.{module}")


def closest_name(name: str, known) -> str | None:
    """The known name `name` most likely misspells: of difflib's close matches, the one fewest edits away, a swap of
    two neighbouring letters counting as one edit ("gpro" is "grpo", not "gspo" or "gmpo"); None when none is close."""
    close = difflib.get_close_matches(name, list(known), n=max(len(known), 1))
    return min(close, key=lambda candidate: edits_between(name, candidate), default=None)


def edits_between(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps of neighbouring letters."""
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(rows[i - 1][j] + 1, row[j - 1] + 1, rows[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[i - 2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


LOSSES = Registry("loss", "trl_zoo.losses", LossSpec)
AGGREGATIONS = Registry("aggregation", "trl_zoo.aggregations")
ADVANTAGES = Registry("advantage estimator", "trl_zoo.advantages", AdvantageSpec)
KL_ESTIMATORS = Registry("KL estimator", "trl_zoo.kl_estimators")
SAMPLERS = Registry("sampler", "trl_zoo.samplers", SamplerSpec)

TABLES = {
    "losses": LOSSES,
    "aggregations": AGGREGATIONS,
    "advantages": ADVANTAGES,
    "kl_estimators": KL_ESTIMATORS,
    "samplers": SAMPLERS,
}
