"""Rebuild a campaign's tables and figures from its records; never measures, never imports TensorFlow."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from analysis import figures, mlperf, outputs, tables

RESULTS = "results.csv"
SUMMARY = "summary.csv"
CELLS = "cells.csv"
IO_COST = "io_cost.csv"
CHECKPOINTS = "checkpoints.csv"


@dataclass
class Built:
    folder: Path
    completed: int = 0
    runs: int = 0
    failed: list[dict] = field(default_factory=list)
    missing: list[dict] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    collected: tables.Collected | None = None  # what was read, for the report (records are read once)

    def describe(self) -> str:
        """What a user reads at the end of a campaign: counts, problems, and where the files are."""
        lines = [f"campaign {self.folder}: {self.completed} cell{'' if self.completed == 1 else 's'} completed "
                 f"({self.runs} measured run{'' if self.runs == 1 else 's'}), "
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


BASELINES = "baselines.csv"


class NothingToBuild(ValueError):
    """The folder holds no record and no plan: nothing is written into it."""


def build(folder: str | Path, render: bool = True, baseline_from: str | Path | None = None) -> Built:
    """Write results.csv, summary.csv, cells.csv, the baselines and the figures into ``folder``.

    ``baseline_from``: another campaign folder whose baseline cells give the efficiency column.
    """
    from analysis import baselines as bl

    folder = Path(folder)
    c = tables.collect(folder)
    if not c.cells:  # files named record.json that are not records do not make a campaign either
        also = f" ({len(c.unreadable)} unreadable: {c.unreadable[0]})" if c.unreadable else ""
        raise NothingToBuild(f"no cell records (record.json) and no plan.json under {folder}{also}: nothing written")
    out = Built(folder=folder, unreadable=c.unreadable, collected=c)
    out.failed = [x for x in c.cells if x["status"] == "failed"]
    out.missing = [x for x in c.cells if x["status"] == "missing"]
    out.completed = sum(1 for x in c.cells if x["status"] == "completed")
    results = tables.results_frame(c)
    out.runs = len(results)
    import pandas as pd

    # before anything is written: a table of the same name that the tool did not write stops the build
    outputs.check([folder / n for n in (RESULTS, SUMMARY, CELLS, BASELINES, CHECKPOINTS, IO_COST, mlperf.MLPERF,
                                        "claims.csv", "report.html")])
    results.to_csv(outputs.claim(folder / RESULTS), index=False)
    out.files.append(folder / RESULTS)
    base = tables.baselines_frame(c)
    if not base.empty:
        base.to_csv(outputs.claim(folder / BASELINES), index=False)
        out.files.append(folder / BASELINES)
        out.files += bl.write_table_i(bl.table_i(base, c.storages), folder)
    if baseline_from is not None:
        base = tables.baselines_frame(tables.collect(Path(baseline_from)))
    summary = bl.efficiency(tables.summary_frame(results), base)
    summary.to_csv(outputs.claim(folder / SUMMARY), index=False)
    out.files.append(folder / SUMMARY)
    pd.DataFrame(c.cells, columns=["cell_dir", "status", "overrides", "error"]).to_csv(outputs.claim(folder / CELLS),
                                                                                      index=False)
    out.files.append(folder / CELLS)
    from analysis import training

    ckpts = tables.checkpoints_frame(c)
    if not ckpts.empty:
        ckpts.to_csv(outputs.claim(folder / CHECKPOINTS), index=False)
        out.files.append(folder / CHECKPOINTS)
    out.files += mlperf.write(results, folder)
    cost = training.io_cost(results)
    if not cost.empty:
        cost.to_csv(outputs.claim(folder / IO_COST), index=False)
        out.files.append(folder / IO_COST)
    if render and not results.empty:
        out.files += figures.render_all(results, folder)
    from analysis import posix

    out.files += [p for p in posix.write_all(c, folder, render and not results.empty) if p]
    return out

