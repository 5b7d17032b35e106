"""POSIX traces of a campaign (``trace.posix=true``) as tables: ``posix_summary.csv`` (one row per traced
run), ``posix_files.csv`` (one row per file and run) and the report's per-cell medians. Everything comes
from the records and the per-run tables the cells wrote (``jobs.observe.posix``)."""

from __future__ import annotations

import csv
from pathlib import Path

from analysis.tables import tidy
from jobs.metrics import METRICS
from jobs.observe import posix

SUMMARY = "posix_summary.csv"
FILES = "posix_files.csv"
KEYS = (
    "workload",
    "kind",
    "pipeline",
    "storage",
    "dataset",
    "format",
    "shuffle",
    "threads",
    "batch_size",
    "prefetch",
    "checkpoint_target",
    "run",
    "traced_run",
)
METRIC_COLUMNS = tuple(m for m in METRICS if m.startswith("posix_"))


def summary_frame(c: tidy.Collected):
    """One row per traced measured run: the cell's keys, the posix_* figures, the reads per size class
    and the trace's path (relative to the campaign folder)."""
    import pandas as pd

    rows = []
    for e in c.posix:
        row = {k: e.get(k) for k in (*KEYS, "cell_dir", "seconds", "bytes_consumed")}
        row.update({m: e.get(m) for m in METRIC_COLUMNS})
        row.update({k: (e["posix_size_histogram"] or {}).get(k, 0) for k in posix.SIZE_KEYS})
        row["posix_trace"] = (
            e["posix_trace"] if isinstance(e["posix_trace"], str) else ";".join(e["posix_trace"])
        )
        rows.append(row)
    return pd.DataFrame(
        rows,
        columns=[
            *KEYS,
            "cell_dir",
            "seconds",
            "bytes_consumed",
            *METRIC_COLUMNS,
            *posix.SIZE_KEYS,
            "posix_trace",
        ],
    )


def write_files(c: tidy.Collected, folder: Path) -> Path | None:
    """``posix_files.csv``: every run's per-file table with the cell's keys, streamed row by row."""
    if not c.posix:
        return None
    from analysis import outputs

    out = folder / FILES
    with outputs.create(out) as f:
        w = csv.writer(f)
        w.writerow([*KEYS, "cell_dir", *posix.FILE_COLUMNS])
        for e in c.posix:
            src = folder / e["posix_files_table"]
            if not src.is_file():
                c.unreadable.append(
                    f"{src}: the per-file table of a traced run is missing (left out of {FILES})"
                )
                continue
            rows = 0
            with open(src, newline="") as s:
                r = csv.reader(s)
                head = next(r, None) or []
                keys = [e.get(k) for k in KEYS] + [e["cell_dir"]]
                for line in r:
                    if len(line) != len(head):
                        break  # a torn last line: the table was cut short
                    w.writerow(keys + line)
                    rows += 1
            if len(head) != len(posix.FILE_COLUMNS) or rows < (e.get("posix_files") or 0):
                c.unreadable.append(
                    f"{src}: truncated ({rows} of at least {e.get('posix_files') or 0} files; "
                    f"its rows in {FILES} are incomplete)"
                )
    return out


def write(c: tidy.Collected, folder: Path) -> list[Path]:
    """The POSIX tables of the campaign (nothing when no run was traced)."""
    if not c.posix:
        return []
    from analysis import outputs

    with outputs.create(folder / SUMMARY) as f:
        summary_frame(c).to_csv(f, index=False)
    return [folder / SUMMARY, write_files(c, folder)]


def per_cell(folder: Path):
    """The report's table: per traced cell, medians over its runs, and how many runs' traces were
    incomplete (coverage under 98%)."""
    import pandas as pd

    path = folder / SUMMARY
    if not path.exists():
        return None
    s = pd.read_csv(path)
    if s.empty:
        return None
    s["small_reads_pct"] = 100 * s["posix_small_read_share"]
    g = s.groupby(
        ["cell_dir", "workload", "pipeline", "storage", "format", "threads", "traced_run"],
        dropna=False,
        sort=False,
    )
    out = g.agg(
        runs=("run", "count"),
        reads=("posix_reads", "median"),
        opens=("posix_opens", "median"),
        files=("posix_files", "median"),
        reopened=("posix_files_reopened", "median"),
        small_reads_pct=("small_reads_pct", "median"),
        mean_read_bytes=("posix_mean_read_bytes", "median"),
        reads_in_flight=("posix_reads_in_flight", "median"),
        threads_reading=("posix_threads", "median"),
        coverage=("posix_coverage", "median"),
        unclosed=("posix_unclosed", "max"),
        incomplete=("posix_complete", lambda x: int((~x.astype(bool)).sum())),
    ).reset_index()
    return out.round(3)
