"""Rebuild a campaign's tables and figures from its records; never measures, never imports TensorFlow."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from analysis import figures, tables

RESULTS = "results.csv"
SUMMARY = "summary.csv"
CELLS = "cells.csv"
IO_COST = "io_cost.csv"


@dataclass
class Built:
    folder: Path
    completed: int = 0
    runs: int = 0
    failed: list[dict] = field(default_factory=list)
    missing: list[dict] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    def describe(self) -> str:
        """What a user reads at the end of a campaign: counts, problems, and where the files are."""
        lines = [f"campaign {self.folder}: {self.completed} cells completed ({self.runs} measured runs), "
                 f"{len(self.failed)} failed, {len(self.missing)} missing"]
        for c in self.failed:
            lines.append(f"  FAILED  cell {c['cell_dir']} [{c['overrides']}]: {c['error']}")
        for c in self.missing:
            lines.append(f"  MISSING cell {c['cell_dir']} [{c['overrides']}]: {c['error']}")
        for u in self.unreadable:
            lines.append(f"  UNREADABLE {u}")
        for f in self.files:
            lines.append(f"  {f}")
        return "\n".join(lines)


def build(folder: str | Path, render: bool = True) -> Built:
    """Write results.csv, summary.csv, cells.csv and the figures into ``folder``."""
    folder = Path(folder)
    c = tables.collect(folder)
    out = Built(folder=folder, unreadable=c.unreadable)
    out.failed = [x for x in c.cells if x["status"] == "failed"]
    out.missing = [x for x in c.cells if x["status"] == "missing"]
    out.completed = sum(1 for x in c.cells if x["status"] == "completed")
    results = tables.results_frame(c)
    out.runs = len(results)
    import pandas as pd

    results.to_csv(folder / RESULTS, index=False)
    out.files.append(folder / RESULTS)
    summary = tables.summary_frame(results)
    summary.to_csv(folder / SUMMARY, index=False)
    out.files.append(folder / SUMMARY)
    pd.DataFrame(c.cells, columns=["cell_dir", "status", "overrides", "error"]).to_csv(folder / CELLS, index=False)
    out.files.append(folder / CELLS)
    from analysis import training

    cost = training.io_cost(results)
    if not cost.empty:
        cost.to_csv(folder / IO_COST, index=False)
        out.files.append(folder / IO_COST)
    if render and not results.empty:
        out.files += figures.render_all(results, folder)
    return out
