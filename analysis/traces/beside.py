"""A user's trace beside a campaign's traced cells (``python -m analysis trace <file> --compare <campaign>``):
one row for the trace and one per traced cell (the median of its traced runs), in the figures both have: the
reads, the files, reads per file, the mean read and the share of reads in each size class. Written as
``trace_compare.csv``; the campaign's rows come from its records (``trace.posix=true`` cells), so the
campaign need not have been analysed first."""

from __future__ import annotations

from pathlib import Path

from jobs.observe import posix

NAME = "trace_compare.csv"
CELL_KEYS = ("workload", "pipeline", "framework", "storage", "threads", "batch_size")
SHARES = tuple(f"share_{k}" for k in posix.SIZE_KEYS)
COLUMNS = ("row", "runs", "reads", "files", "reads_per_file", "mean_read_bytes", "small_read_share", *SHARES)


class NothingBeside(ValueError):
    """The campaign holds no traced cell to stand beside the trace."""


def frame(prof, name: str, campaign: Path):
    import pandas as pd

    rows = [_trace_row(prof, name), *_cell_rows(campaign)]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _trace_row(prof, name: str) -> dict:
    s = prof.summary.iloc[0]
    reads = prof.sizes[prof.sizes["operation"] == "read"]
    by_class = dict(zip(reads["size_class"], reads["requests"]))
    total = int(s["reads"])
    own_classes = prof.summary["from"].iloc[0] == "calls"  # counters: Darshan's own bins, not comparable
    shares = {
        f"share_{key}": (by_class.get(label, 0) / total if total and own_classes else None)
        for key, label in posix.SIZE_LABELS.items()
    }
    small = shares["share_reads_eof"] + shares["share_reads_lt_100B"] if own_classes and total else None
    return {
        "row": f"trace: {name}",
        "runs": 1,
        "reads": total,
        "files": int(s["files"]),
        "reads_per_file": total / s["files"] if s["files"] else None,
        "mean_read_bytes": s["mean_read_bytes"],
        "small_read_share": small,
        **shares,
    }


def _cell_rows(campaign: Path) -> list[dict]:
    from analysis.tables import posix as posix_tables
    from analysis.tables import tidy

    runs = posix_tables.summary_frame(tidy.collect(campaign))
    if runs.empty:
        raise NothingBeside(
            f"--compare {campaign}: no cell of it was traced (run its cells with trace.posix=true)"
        )
    keys = [k for k in CELL_KEYS if k in runs.columns]
    out = []
    for cell, one in runs.groupby("cell_dir", sort=True):
        first = one.iloc[0]
        label = " · ".join(f"{k}={first[k]}" for k in keys if str(first[k]) not in ("", "nan", "None"))
        reads = one["posix_reads"].astype(float)
        shares = {f"share_{k}": (one[k] / reads).median() for k in posix.SIZE_KEYS}
        out.append(
            {
                "row": f"cell {cell}: {label}" if cell != "." else f"cell: {label}",
                "runs": len(one),
                "reads": reads.median(),
                "files": one["posix_files"].median(),
                "reads_per_file": (reads / one["posix_files"]).median(),
                "mean_read_bytes": one["posix_mean_read_bytes"].median(),
                "small_read_share": one["posix_small_read_share"].median(),
                **shares,
            }
        )
    return out
