"""What each workload's rows are drawn and labelled with, read as data: the figures and metrics a workload
declared when its cells ran, as their records keep them (``CellRecord.declared``), and, for records
written before records kept them (schema 1), the built-in workloads' own, kept in ``workloads.json``
beside this module. The analysis never imports a workload to learn them.

A figure is drawn by the function its declaration names (``module:function``): one of the analysis's own
(``analysis.*``), or of a workload outside the tool (``iocampaign_workloads.*``, imported only from the
folders ``jobs.owned.trusted_portions`` trusts). A declaration that names anything else, or a file name
that is not a plain stem, is not drawn, and said so once on stderr."""

from __future__ import annotations

import functools
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from jobs.metrics import METRICS, Metric

BUILTIN = Path(__file__).with_name("workloads.json")  # kind -> its declarations, as the records keep them
DRAWERS = ("analysis", "iocampaign_workloads")  # the packages a figure's drawing function may come from
_STEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


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
    """The figures of every kind the analysis has seen, in the report's order."""

    figures: dict[tuple[str, str], FigureSpec] = field(default_factory=dict)  # (kind, key) -> figure
    refused: list[str] = field(default_factory=list)  # one line per declaration not drawn

    def add(self, kind: str, declared: dict) -> None:
        """Take a record's (or the built-in list's) declarations of ``kind``: its metrics become columns
        (the first declaration of a name is kept), its figures are drawn where they may be."""
        for m in declared.get("metrics") or []:
            metric = _metric(m)
            if metric is not None and metric.name not in METRICS:
                METRICS[metric.name] = metric
        for f in declared.get("figures") or []:
            spec, why = _figure(f)
            if spec is None:
                line = f"iocampaign: a figure of workload {kind} is not drawn: {why}"
                if line not in self.refused:
                    self.refused.append(line)
                    print(line, file=sys.stderr)
                continue
            self.figures.setdefault((kind, spec.key), spec)

    def ordered(self) -> list[tuple[str, FigureSpec]]:
        """(kind, figure) of every figure, in the report's order."""
        return sorted(((k, f) for (k, _), f in self.figures.items()), key=lambda kf: (kf[1].order, kf[1].key))

    def stems(self) -> list[str]:
        return sorted({f.key for f in self.figures.values()})


def _metric(m) -> Metric | None:
    try:
        return Metric(str(m["name"]), str(m["unit"]), str(m["better"]), str(m["doc"]))
    except (KeyError, TypeError):
        return None


def _figure(f) -> tuple[FigureSpec | None, str]:
    """The figure of a declaration, or None and why it is not drawn."""
    try:
        spec = FigureSpec(
            key=str(f["key"]),
            draw=str(f["draw"]),
            title=str(f.get("title") or ""),
            where=tuple((str(c), v) for c, v in f.get("where") or ()),
            order=float(f.get("order", 100.0)),
        )
    except (KeyError, TypeError, ValueError) as e:
        return None, f"its declaration is not one ({type(e).__name__}: {e})"
    if not _STEM.fullmatch(spec.key):
        return None, f"key {spec.key!r} is not a plain file name"
    module, _, function = spec.draw.partition(":")
    if module.split(".")[0] not in DRAWERS or not function.isidentifier():
        return None, f"draw={spec.draw!r} names neither the analysis's nor a workload's drawing function"
    return spec, ""


@functools.cache
def _builtin() -> dict:
    return json.loads(BUILTIN.read_text())


def builtin() -> Declared:
    """The built-in workloads' declarations (what a record of schema 1 was drawn with)."""
    out = Declared()
    for kind, declared in _builtin().items():
        out.add(kind, declared)
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
