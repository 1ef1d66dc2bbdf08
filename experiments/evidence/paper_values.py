"""A paper's numbers: `<paper>/paper_values.yaml`, one schema for every package.

    models: {<our model config>: <the paper's row for the same checkpoint>}      # e.g. roberta-large: RoBERTa-L
    tasks:  {<our task config>: <the paper's name for the same data>}            # e.g. bc5cdr: BC5CDR
    twins:                      # offline stand-ins, compared with a paper row only through an entry here (labelled)
      models: {<ours>: {paper: <row>, why: <one sentence>, where: [<table>, ...], metrics: [<metric>, ...]}}
      tasks:  {<ours>: {paper: <task>, why: ...}}                                # where/metrics: optional scope
    cells:                      # one per number, keyed by (model, task, column, metric); null where the paper has none
      - {model: MiniLM-L6-H384, task: cls-avg, column: reduced, metric: score, value: 77.6, where: "Table 1"}

`lookup(model, task, column, metric)` takes OUR names: a paper-scale run finds its own row (through `models`/`tasks` or
because it has the paper's name) or none; an offline run finds a row only through `twins` or its config's
`stand_in_for`, and `find` says which mapping it used so that tables can label it."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from experiments import REPO

SECTIONS = ("models", "tasks", "twins", "cells")
CELL_KEYS = ("model", "task", "column", "metric", "value", "where")
CELL_OPTIONAL = ("note",)
TWIN_KEYS = ("paper", "why")
TWIN_OPTIONAL = ("where", "metrics")


class PaperValuesError(ValueError):
    """A malformed paper_values.yaml; the message names the file, the entry and the fix."""


@dataclass(frozen=True)
class Cell:
    model: str | None
    task: str | None
    column: str | None
    metric: str
    value: float | str
    where: str
    note: str | None = None

    @property
    def key(self) -> tuple:
        return self.model, self.task, self.column, self.metric


@dataclass(frozen=True)
class Twin:
    paper: str
    why: str
    where: tuple[str, ...] = ()  # the cells' `where` it may be compared in (exact); empty = every table
    metrics: tuple[str, ...] = ()

    def covers(self, cell: Cell) -> bool:
        return (not self.where or cell.where in self.where) and \
            (not self.metrics or cell.metric in self.metrics)


@dataclass(frozen=True)
class Match:
    """A cell found for one of our runs, and how: `via` holds one line per stand-in mapping used (empty when the
    run's own model and task are the paper's)."""
    cell: Cell
    via: tuple[str, ...] = ()

    @property
    def value(self):
        return self.cell.value

    @property
    def stand_in(self) -> bool:
        return bool(self.via)

    @property
    def row(self) -> str:
        """The paper row in words, e.g. 'MiniLM-L6-H384, cls-avg (Table 1; stand-in)'."""
        what = ", ".join(x for x in (self.cell.model, self.cell.task) if x)
        return f"{what} ({self.cell.where}{'; stand-in' if self.via else ''})"


@dataclass
class PaperValues:
    path: Path | None = None
    models: dict[str, str] = field(default_factory=dict)
    tasks: dict[str, str] = field(default_factory=dict)
    twins: dict[str, dict[str, Twin]] = field(default_factory=lambda: {"models": {}, "tasks": {}})
    cells: dict[tuple, Cell] = field(default_factory=dict)

    def get(self, model: str | None, task: str | None, column: str | None, metric: str) -> Cell | None:
        """The cell under the paper's own names (no mapping)."""
        return self.cells.get((model, task, column, metric))

    def select(self, **fields) -> list[Cell]:
        """Every cell whose fields equal the given ones, in file order."""
        return [c for c in self.cells.values() if all(getattr(c, k) == v for k, v in fields.items())]

    def _candidates(self, kind: str, name: str | None, stand_in_for: str | None) -> list[tuple[str | None, str | None,
                                                                                             Twin | None]]:
        """(paper name, how it was reached, twin scope) in the order tried: the same model/task, then a twin, then
        the config's stand_in_for."""
        if name is None:
            return [(None, None, None)]
        known = {getattr(c, kind[:-1]) for c in self.cells.values()}
        own = getattr(self, kind)
        out = []
        if name in own:
            out.append((own[name], None, None))
        elif name in known:
            out.append((name, None, None))
        twin = self.twins[kind].get(name)
        if twin is not None:
            out.append((twin.paper, f"{name} → {twin.paper}: {twin.why}", twin))
        if stand_in_for:
            target = own.get(stand_in_for, stand_in_for if stand_in_for in known else None)
            if target is not None:
                out.append((target, f"{name} → {target}: {name} is the offline stand-in for {stand_in_for} "
                                    f"(its config's stand_in_for)", None))
        return out

    def find(self, model: str | None, task: str | None, column: str | None, metric: str | None, *,
             model_for: str | None = None, task_for: str | None = None) -> Match | None:
        """The cell for our (model, task): `metric=None` accepts the one metric the paper gives there."""
        for pm, mvia, mtwin in self._candidates("models", model, model_for):
            for pt, tvia, ttwin in self._candidates("tasks", task, task_for):
                if metric is None:
                    hits = [c for c in self.cells.values() if c.key[:3] == (pm, pt, column)]
                    if len(hits) > 1:
                        raise PaperValuesError(f"{self.path}: ({pm}, {pt}, {column}) has {len(hits)} metrics "
                                               f"{[c.metric for c in hits]}; ask for one by name")
                    cell = hits[0] if hits else None
                else:
                    cell = self.get(pm, pt, column, metric)
                if cell is not None and all(t is None or t.covers(cell) for t in (mtwin, ttwin)):
                    return Match(cell, tuple(v for v in (mvia, tvia) if v))
        return None

    def find_for(self, run: dict, column: str | None, metric: str | None, *, task: bool = True) -> Match | None:
        """`find` for one run record (its model, task and their stand_in_for); task=False for model-only cells."""
        c = run["config"]
        return self.find(c["model"]["name"], c["task"]["name"] if task else None, column, metric,
                         model_for=c["model"].get("stand_in_for"),
                         task_for=c["task"].get("stand_in_for") if task else None)

    def lookup(self, model: str | None, task: str | None, column: str | None, metric: str | None, **kw):
        """The paper's number for our (model, task, column, metric), or None."""
        m = self.find(model, task, column, metric, **kw)
        return None if m is None else m.value


def _fail(path: Path, where: str, msg: str):
    raise PaperValuesError(f"{path}: {where}: {msg}")


def _name(path: Path, where: str, key: str, v, nullable: bool) -> str | None:
    if v is None and nullable:
        return None
    if isinstance(v, bool) or not isinstance(v, (str, int, float)) or (isinstance(v, str) and not v.strip()):
        _fail(path, where, f"'{key}' is {v!r}; give a name (a string"
                           f"{', or null where the paper has none' if nullable else ''})")
    return str(v)


def _cell(path: Path, i: int, e) -> Cell:
    where = f"cells[{i}] {e!r}"
    if not isinstance(e, dict):
        _fail(path, where, "a cell is a mapping {model, task, column, metric, value, where}")
    missing = [k for k in CELL_KEYS if k not in e]
    unknown = [k for k in e if k not in CELL_KEYS + CELL_OPTIONAL]
    if missing or unknown:
        _fail(path, where, (f"missing {missing} " if missing else "") + (f"unknown {unknown} " if unknown else "") +
              f"(a cell has exactly {list(CELL_KEYS)} plus optional {list(CELL_OPTIONAL)}; write null for a model, "
              "task or column the paper does not split by)")
    v = e["value"]
    if isinstance(v, bool) or not isinstance(v, (int, float, str)) or (isinstance(v, float) and math.isnan(v)):
        _fail(path, where, f"value {v!r} must be the number the paper prints (or its text, for a non-numeric cell)")
    return Cell(model=_name(path, where, "model", e["model"], True), task=_name(path, where, "task", e["task"], True),
                column=_name(path, where, "column", e["column"], True),
                metric=_name(path, where, "metric", e["metric"], False), value=v,
                where=_name(path, where, "where", e["where"], False) or "",
                note=None if e.get("note") is None else str(e["note"]))


def parse(data, path: Path) -> PaperValues:
    """Validate one file's content; raises PaperValuesError naming the file and the entry."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        _fail(path, "top level", f"expected a mapping with keys {list(SECTIONS)}, got {type(data).__name__}")
    unknown = [k for k in data if k not in SECTIONS]
    if unknown:
        _fail(path, "top level", f"unknown section(s) {unknown}; the schema has {list(SECTIONS)} "
                                 "(experiments/evidence/paper_values.py)")
    pv = PaperValues(path=path)
    for i, e in enumerate(data.get("cells") or []):
        cell = _cell(path, i, e)
        if cell.key in pv.cells:
            old = pv.cells[cell.key]
            _fail(path, f"cells[{i}] {e!r}", f"duplicate of the cell from {old.where} (value {old.value}): one "
                                             "cell per (model, task, column, metric); merge them and name both "
                                             "tables in `where`")
        pv.cells[cell.key] = cell
    names = {"models": {c.model for c in pv.cells.values()}, "tasks": {c.task for c in pv.cells.values()}}
    for kind in ("models", "tasks"):
        mapping = data.get(kind) or {}
        if not isinstance(mapping, dict):
            _fail(path, kind, "expected a mapping {our config name: the paper's name}")
        for ours, theirs in mapping.items():
            if theirs not in names[kind]:
                _fail(path, f"{kind}.{ours}", f"maps to {theirs!r}, which no cell has (cells name: "
                                              f"{sorted(n for n in names[kind] if n)})")
            getattr(pv, kind)[str(ours)] = str(theirs)
    twins = data.get("twins") or {}
    if not isinstance(twins, dict) or [k for k in twins if k not in ("models", "tasks")]:
        _fail(path, "twins", "expected {models: {...}, tasks: {...}}")
    for kind in ("models", "tasks"):
        for ours, t in (twins.get(kind) or {}).items():
            where = f"twins.{kind}.{ours}"
            if not isinstance(t, dict) or [k for k in TWIN_KEYS if not t.get(k)] or \
                    [k for k in t if k not in TWIN_KEYS + TWIN_OPTIONAL]:
                _fail(path, where, f"{t!r}: a twin is {{paper: <row>, why: <the reason it may stand beside that row>}} "
                                   f"with optional {list(TWIN_OPTIONAL)} (lists) limiting where it applies")
            if t["paper"] not in names[kind]:
                _fail(path, where, f"paper {t['paper']!r} is not a {kind[:-1]} of any cell")
            if ours in getattr(pv, kind):
                _fail(path, where, f"{ours} is also in `{kind}` (the same checkpoint/data): a name is either the "
                                   "paper's own or a stand-in, not both")
            scope = {k: t.get(k) or [] for k in TWIN_OPTIONAL}
            if any(not isinstance(v, list) for v in scope.values()):
                _fail(path, where, f"where/metrics must be lists, got {scope}")
            for k, v in scope.items():
                attr = "metric" if k == "metrics" else k
                seen = {getattr(c, attr) for c in pv.cells.values()}
                if [x for x in v if x not in seen]:
                    _fail(path, where, f"{k} {[x for x in v if x not in seen]} names no cell's {attr} "
                                       f"(cells have: {sorted(seen)})")
            pv.twins[kind][str(ours)] = Twin(str(t["paper"]), str(t["why"]), tuple(map(str, scope["where"])),
                                             tuple(map(str, scope["metrics"])))
    return pv


def load(path: Path) -> PaperValues:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise PaperValuesError(f"{path}: not valid YAML: {e}") from e
    return parse(data, path)


@functools.cache
def paper_values(paper: str) -> PaperValues:
    """<paper>/paper_values.yaml, validated; an empty table for a paper without one (the suite's own baselines)."""
    path = REPO / paper / "paper_values.yaml"
    return load(path) if path.exists() else PaperValues(path=path)
