"""What each workload's rows are drawn and labelled with, read as data: the figures and metrics a workload
declared when its cells ran, as their records keep them (``CellRecord.declared``). A record written before
records kept them (schema 1) is drawn with what the tool's own workload of its kind declares today, kept in
``workloads.json`` beside this module; the built-in workloads' metrics are always columns, so that
``results.csv`` has the same columns whatever the records declare. The analysis never imports a workload to
learn them.

A figure is drawn by the function its declaration names (``module:function``): one of the analysis's figure
modules (``analysis.figures.*``), or of a workload outside the tool (``iocampaign_workloads.*``, imported
only from the folders ``jobs.owned.trusted_portions`` trusts); its key is a plain file name, one kind's
only. A declaration that breaks a rule is not drawn, and said so once on stderr; a metric may not take the
name of a column the tables make themselves."""

from __future__ import annotations

import functools
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from jobs import records
from jobs.metrics import METRICS, Metric

BUILTIN = Path(__file__).with_name("workloads.json")  # kind -> its declarations, as the records keep them


@dataclass(frozen=True)
class FigureSpec:
    """A figure as a workload declares it: drawn from the results rows of its kind (and ``where``) into
    ``<campaign>/<key>.png`` and ``.svg`` by ``draw``."""

    key: str  # file stem and the report's anchor: fig4
    draw: str  # "module:function": function(rows, folder, figure) -> list of files written
    title: str = ""  # its title and the report's caption
    where: tuple = ()  # (column, value) pairs that select its rows beyond the kind
    order: float = 100.0  # its place in the report (the paper's numbering)


@dataclass
class Declared:
    """The figures of every kind the analysis has read declarations of, and the lines of those it
    refused."""

    figures: dict[str, tuple[str, FigureSpec]] = field(default_factory=dict)  # key -> (kind, figure)
    refused: list[str] = field(default_factory=list)
    reserved: frozenset = frozenset()  # the columns the tables make themselves: no metric's name

    def add(self, kind: str, declared) -> None:
        """Take the declarations of ``kind`` (a record's, or the built-in list's): its metrics become
        columns (the first declaration of a name is kept), its figures are drawn; the first declaration of
        a figure's key is kept."""
        metrics = (declared.get("metrics") or []) if isinstance(declared, dict) else None
        figures = (declared.get("figures") or []) if isinstance(declared, dict) else None
        if not isinstance(metrics, list) or not isinstance(figures, list):
            self._refuse(f"the declarations of workload {kind!r} are not lists of metrics and figures")
            return
        for m in metrics:
            metric, why = _metric(m, self.reserved)
            if metric is None:
                self._refuse(f"a metric of workload {kind!r} is not a column: {why}")
            elif metric.name not in METRICS:
                METRICS[metric.name] = metric
        for f in figures:
            spec, why = _figure(f)
            held = self.figures.get(spec.key) if spec is not None else None
            if spec is None:
                self._refuse(f"a figure of workload {kind!r} is not drawn: {why}")
            elif held is not None and held[0] != kind:
                taken = f"{held[0]!r} has one of its name"
                self._refuse(f"figure {spec.key} of workload {kind!r} is not drawn: {taken}")
            elif held is None:
                self.figures[spec.key] = (kind, spec)

    def _refuse(self, line: str) -> None:
        line = f"iocampaign: {line}"
        if line not in self.refused:
            self.refused.append(line)
            print(line, file=sys.stderr)

    def ordered(self) -> list[tuple[str, FigureSpec]]:
        """(kind, figure) of every figure, in the report's order."""
        return sorted(self.figures.values(), key=lambda kf: (kf[1].order, kf[1].key))

    def stems(self) -> list[str]:
        return sorted(self.figures)


def _metric(m, reserved: frozenset) -> tuple[Metric | None, str]:
    fields = ("name", "unit", "better", "doc")
    if not isinstance(m, dict) or not all(isinstance(m.get(k), str) for k in fields):
        return None, f"{m!r:.80} is no metric (name, unit, better and doc, each a string)"
    if not records.METRIC_NAME.fullmatch(m["name"]) or m["name"] in reserved:
        return None, f"{m['name']!r:.80} is not a name a metric may have"
    return Metric(m["name"], m["unit"], m["better"], m["doc"]), ""


def _figure(f) -> tuple[FigureSpec | None, str]:
    """The figure of a declaration, or None and why it is not drawn."""
    if not isinstance(f, dict) or not isinstance(f.get("key"), str) or not isinstance(f.get("draw"), str):
        return None, f"{f!r:.80} is no figure (its key and draw, each a string)"
    where, order = f.get("where") or [], f.get("order", 100.0)
    if not isinstance(where, list) or not all(isinstance(w, list | tuple) and len(w) == 2 for w in where):
        return None, f"figure {f['key']!r:.40}: where={where!r:.80} is no list of (column, value)"
    if not isinstance(order, int | float) or not -1e9 < order < 1e9 or math.isnan(order):
        return None, f"figure {f['key']!r:.40}: order={order!r:.40} is no place in the report"
    why = records.figure_problem(f["key"], f["draw"])
    if why is not None:
        return None, why
    title = f.get("title") if isinstance(f.get("title"), str) else ""
    return FigureSpec(f["key"], f["draw"], title, tuple((str(c), v) for c, v in where), float(order)), ""


@functools.cache
def _builtin() -> dict:
    return json.loads(BUILTIN.read_text())


def builtin_of(kind: str) -> dict | None:
    """What the tool's own workload ``kind`` declares today (None: no workload of the tool's)."""
    return _builtin().get(kind)


def builtin(reserved: frozenset = frozenset(), figures: bool = True) -> Declared:
    """The tool's own workloads' declarations: their metrics, and their figures unless ``figures`` is
    false (a campaign's records then say which to draw)."""
    out = Declared(reserved=reserved)
    for kind, declared in _builtin().items():
        out.add(kind, declared if figures else {"metrics": declared["metrics"]})
    return out


def draw(spec: FigureSpec):
    """The drawing function ``spec`` names, imported (a workload's from the trusted folders only)."""
    import importlib

    module, _, function = spec.draw.partition(":")
    top = module.split(".")[0]
    if top != "analysis":
        from jobs import owned

        if not owned.trusted_portions(top):  # never another user's code
            raise ImportError(f"no folder of {top} this user could trust holds {module}")
    return getattr(importlib.import_module(module), function)
