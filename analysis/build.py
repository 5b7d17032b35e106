"""``python -m analysis <campaign folder>``: rebuild a campaign's tables and figures from its records; never
measures, never imports TensorFlow."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from analysis import outputs, standing
from analysis.figures import declared, plotting
from analysis.tables import mlperf, tidy
from analysis.tables.capacity import MARKS

RESULTS = "results.csv"
SUMMARY = "summary.csv"
CELLS = "cells.csv"
IO_COST = "io_cost.csv"
CHECKPOINTS = "checkpoints.csv"
BASELINES = "baselines.csv"


@dataclass
class Built:
    folder: Path
    completed: int = 0
    runs: int = 0
    failed: list[dict] = field(default_factory=list)
    missing: list[dict] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    collected: tidy.Collected | None = None  # what was read, for the report (records are read once)

    def describe(self) -> str:
        """What a user reads at the end of a campaign: counts, problems, and where the files are."""
        lines = [
            f"campaign {self.folder}: {self.completed} cell{'' if self.completed == 1 else 's'} completed "
            f"({self.runs} measured run{'' if self.runs == 1 else 's'}), "
            f"{len(self.failed)} failed, {len(self.missing)} missing"
            + (standing.suffix(self.collected) if self.collected is not None else "")
        ]
        for c in self.failed:
            lines.append(f"  FAILED  cell {c['cell_dir']} [{_as_typed(c['overrides'])}]: {c['error']}")
        for c in self.missing:
            lines.append(f"  MISSING cell {c['cell_dir']} [{_as_typed(c['overrides'])}]: {c['error']}")
        for u in self.unreadable:
            lines.append(f"  UNREADABLE {u}")
        for f in self.files:
            lines.append(f"  {f}")
        return "\n".join(lines)


def _as_typed(overrides: str) -> str:
    """A cell's overrides as the user typed them, not as Hydra's sweeper escaped them (``http\\://``)."""
    import re

    return re.sub(r"\\(.)", r"\1", overrides)


class NothingToBuild(ValueError):
    """The folder holds no record and no plan: nothing is written into it."""


class NotACampaign(ValueError):
    """The folder is none of the tool's campaign folders: nothing is read or written there."""


# a study's folder holds the marker the study wrote there before its first cell (listed as the tool's in the
# folder's manifest: a user's file of that name proves nothing): the paper study's; a capacity search's
# (before it had one: its table)
STUDY_MARKS = ("paper.txt", *MARKS)


def not_a_campaign(folder: Path) -> str | None:
    """Why ``folder`` is not a campaign folder (one line), or None: it is a sweep's (plan.json), a single
    run's (record.json), a paper study's or a capacity search's. Any other folder, e.g. one that holds
    campaigns, would get tables merged from every campaign below it."""
    import os

    from jobs import plan, records

    if any(os.path.lexists(folder / name) for name in (plan.FILENAME, records.FILENAME)):
        return None
    if any(os.path.lexists(cell / records.FILENAME) for cell in folder.iterdir() if cell.name.isdigit()):
        return None  # a sweep's cells (0/, 1/, ...) without plan.json: their records are named, not skipped
    if any(os.path.lexists(folder / m) and outputs.owned(folder / m) for m in STUDY_MARKS):
        return None
    return (
        f"{folder} is not a campaign folder: a campaign folder holds plan.json (a sweep's, "
        "multirun/<date>/<time>), record.json (a single run's, or in its cells' folders), or a paper study's "
        "paper.txt or a capacity search's capacity.txt; give one of those; nothing was written"
    )


def not_a_baseline(folder: Path) -> str | None:
    """Why ``folder`` cannot give the efficiency column (the end of one line), or None."""
    if not folder.is_dir():
        return "is not a folder"
    why = not_a_campaign(folder)
    if why:
        return f": {why}; nothing was written"
    if tidy.baselines_frame(tidy.collect(folder)).empty:  # else the efficiency column is silently empty
        return (
            "has no completed workload=baseline cell (python -m campaign workload=baseline storage=<tier> "
            "measures one); nothing was written"
        )
    return None


def output_names(figures=None) -> list[str]:
    """Every file name the analysis may write into a campaign folder (tables, figures, the report);
    ``figures``: what its records declare (``analysis.declarations.Declared``; the built-in workloads'
    when not given)."""
    from analysis import declarations
    from analysis.figures.posix import SIZES, TIMELINE
    from analysis.tables import frameworks, posix
    from analysis.tables.baselines import TABLE_I

    stems = [TABLE_I, SIZES, TIMELINE, *(figures or declarations.builtin()).stems()]
    return [
        RESULTS,
        SUMMARY,
        CELLS,
        BASELINES,
        CHECKPOINTS,
        IO_COST,
        mlperf.MLPERF,
        frameworks.FRAMEWORKS,
        "claims.csv",
        "report.html",
        f"{TABLE_I}.csv",
        f"{TABLE_I}.md",
        posix.SUMMARY,
        posix.FILES,
        *(f"{s}.{ext}" for s in stems for ext in ("png", "svg")),
    ]


def build(folder: str | Path, render: bool = True, baseline_from: str | Path | None = None) -> Built:
    """Write results.csv, summary.csv, cells.csv, the baselines and the figures into ``folder``.

    ``baseline_from``: another campaign folder whose baseline cells give the efficiency column.
    Raises NotACampaign for a folder that is not a campaign's (``not_a_campaign``), and OutputExists, before
    anything is written, when a file under one of ``output_names`` is not
    the tool's; should one appear while the files are written, the message names those already written.
    """
    folder = Path(folder)
    why = not_a_campaign(folder)
    if why:
        raise NotACampaign(why)
    c = tidy.collect(folder)
    if not c.cells:  # files named record.json that are not records do not make a campaign either
        also = f" ({len(c.unreadable)} unreadable: {c.unreadable[0]})" if c.unreadable else ""
        raise NothingToBuild(
            f"no cell records (record.json) and no plan.json under {folder}{also}: nothing written"
        )
    out = Built(folder=folder, unreadable=c.unreadable, collected=c)
    out.failed = [x for x in c.cells if x["status"] == "failed"]
    out.missing = [x for x in c.cells if x["status"] == "missing"]
    out.completed = sum(1 for x in c.cells if x["status"] == "completed")
    try:
        outputs.check([folder / n for n in output_names(c.declared)])
    except outputs.OutputExists as e:
        raise outputs.OutputExists(f"{e}; nothing was written") from None
    before = len(outputs.PLACED)
    try:
        _write(c, folder, out, render, baseline_from)
    except outputs.OutputExists as e:
        done = ", ".join(f.name for f in outputs.PLACED[before:]) or "nothing"
        raise outputs.OutputExists(f"{e}; written before it: {done}") from None
    return out


def not_drawn(out: Built, named: int = 3) -> str | None:
    """The line under each figure of a campaign some of whose cells have no runs to draw (failed, or
    missing: never ran), naming the first ``named`` of them by the overrides that set them apart; None when
    every cell completed."""
    gone = [(c, "failed") for c in out.failed] + [(c, "missing") for c in out.missing]
    if not gone:
        return None
    every = [set(str(c.get("overrides") or "").split()) for c in out.collected.cells]
    common = set.intersection(*every) if every else set()

    def own(cell) -> str:
        words = [w for w in str(cell.get("overrides") or "").split() if w not in common]
        return " ".join(words) or "the others' overrides"

    cells = "; ".join(f"#{c['cell_dir']} {status} ({own(c)})" for c, status in gone[:named])
    more = f"; and {len(gone) - named} more" if len(gone) > named else ""
    total = len(out.collected.cells)
    return (
        f"Not drawn: {len(gone)} of {total} cells have no runs: {cells}{more} (cells.csv); every bar and "
        "point shown is a completed cell's."
    )


def _table(frame, path: Path, out: Built) -> None:
    """``frame`` as the CSV ``path`` (the tool's output), noted in ``out.files``."""
    with outputs.create(path) as f:
        frame.to_csv(f, index=False)
    out.files.append(path)


def _write(c: tidy.Collected, folder: Path, out: Built, figures: bool, baseline_from) -> None:
    import pandas as pd

    from analysis.figures import posix as posix_figures
    from analysis.tables import baselines as bl
    from analysis.tables import frameworks, posix, training

    results = tidy.results_frame(c)
    out.runs = len(results)
    _table(results, folder / RESULTS, out)
    base = tidy.baselines_frame(c)
    if not base.empty:
        _table(base, folder / BASELINES, out)
        out.files += bl.write_table_i(bl.table_i(base, c.storages), folder)
    if baseline_from is not None:
        base = tidy.baselines_frame(tidy.collect(Path(baseline_from)))
    _table(bl.efficiency(tidy.summary_frame(results), base), folder / SUMMARY, out)
    _table(pd.DataFrame(c.cells, columns=["cell_dir", "status", "overrides", "error"]), folder / CELLS, out)
    ckpts = tidy.checkpoints_frame(c)
    if not ckpts.empty:
        _table(ckpts, folder / CHECKPOINTS, out)
    out.files += mlperf.write(results, folder)
    out.files += frameworks.write(results, folder)
    cost = training.io_cost(results)
    if not cost.empty:
        _table(cost, folder / IO_COST, out)
    with plotting.footnote(not_drawn(out)):
        if figures and not results.empty:
            out.files += declared.render_all(results, folder, c.declared)
        out.files += posix.write(c, folder)
        if figures and not results.empty:
            out.files += posix_figures.render(c, folder)
