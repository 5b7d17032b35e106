"""POSIX traces of a campaign (``trace.posix=true``): the tables ``posix_summary.csv`` (one row per
traced run) and ``posix_files.csv`` (one row per file and run), the request-size histogram per
pipeline and a per-thread timeline of one run's reads over the device's MB/s, as tf-Darshan showed
them. Everything comes from the records and the per-run tables the cells wrote (``jobs.observe.posix``)."""

from __future__ import annotations

import csv
from pathlib import Path

from analysis import plotting, tables
from jobs.metrics import METRICS
from jobs.observe import posix

SUMMARY = "posix_summary.csv"
FILES = "posix_files.csv"
SIZES = "posix_sizes"
TIMELINE = "posix_timeline"
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
LINE_BINS = posix.TIMELINE_BINS // 40  # time bins of the threads' table per step of the traced MB/s line
METRIC_COLUMNS = tuple(m for m in METRICS if m.startswith("posix_"))
PERFETTO = (
    "python -m analysis.perfetto <cell>/posix/trace-*.pfw.gz  # writes <trace>.json.gz: open it at "
    "https://ui.perfetto.dev (or chrome://tracing)"
)


def summary_frame(c: tables.Collected):
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


def write_files(c: tables.Collected, folder: Path) -> Path | None:
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


def _series(e: dict) -> str:
    what = e.get("pipeline") or e.get("workload")
    return f"{e.get('workload')}{' · ' + what if what and what != e.get('workload') else ''} · {e.get('format') or 'files'}"


def sizes_figure(c: tables.Collected, folder: Path) -> list[Path]:
    """Reads by bytes returned, as a share of all reads, one bar series per workload × pipeline ×
    format (summed over its traced runs); the legend states the share under 100 B."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    totals: dict[str, list[int]] = {}
    for e in c.posix:
        h = e["posix_size_histogram"] or {}
        acc = totals.setdefault(_series(e), [0] * len(posix.SIZE_KEYS))
        for i, k in enumerate(posix.SIZE_KEYS):
            acc[i] += int(h.get(k, 0))
    totals = {k: v for k, v in totals.items() if sum(v)}
    if not totals:
        return []
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    x = np.arange(len(posix.SIZE_KEYS))
    width = 0.8 / len(totals)
    for j, (name, counts) in enumerate(totals.items()):
        share = np.array(counts) / sum(counts)
        small = share[0] + share[1]
        ax.bar(
            x - 0.4 + width * (j + 0.5),
            100 * share,
            width,
            label=f"{name}: {100 * small:.0f}% of {sum(counts):,} reads < 100 B",
            edgecolor="black",
            linewidth=0.4,
        )
    ax.set_xticks(x, [posix.SIZE_LABELS[k] for k in posix.SIZE_KEYS], fontsize=8)
    ax.set_xlabel("bytes returned by the read call")
    ax.set_ylabel("share of read calls (%)")
    ax.set_title(
        "POSIX read sizes (trace.posix, dftracer): every read call of the measured runs", fontsize=10
    )
    ax.grid(axis="y", linewidth=0.3)
    ax.set_axisbelow(True)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return plotting.save(fig, folder / SIZES)


def timeline_run(c: tables.Collected) -> dict | None:
    """The run the timeline shows: the first measured run of the traced cell with the most threads
    (micro-benchmark cells first, the paper's layout first)."""

    def key(e):
        t = str(e.get("threads"))
        return (
            e.get("kind") != "microbench",
            (e.get("format") or "files") != "files",
            -(int(t) if t.isdigit() else 0),
            e["cell_dir"],
            e["run"],
        )

    runs = [e for e in c.posix if e.get("posix_threads_table")]
    return min(runs, key=key) if runs else None


def timeline_figure(c: tables.Collected, folder: Path) -> list[Path]:
    """One row per thread that read (a mark per time bin with reads, darker for more bytes), and
    beneath, the device's read MB/s (jobs.observe.trace, every process) beside the traced reads' MB/s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    e = timeline_run(c)
    if e is None:
        return []
    th = pd.read_csv(folder / e["posix_threads_table"])
    if th.empty:
        return []
    threads = list(th.groupby("thread")["t_s"].min().sort_values().index)
    fig, (top, bottom) = plt.subplots(
        2,
        1,
        sharex=True,
        figsize=(9, 2.2 + 0.32 * len(threads) + 2.2),
        gridspec_kw={"height_ratios": [max(1.0, 0.32 * len(threads)), 2.0]},
    )
    peak = max(float(th["bytes_read"].max()), 1.0)
    for row, tid in enumerate(threads):
        one = th[th["thread"] == tid]
        top.scatter(
            one["t_s"],
            [row] * len(one),
            marker="|",
            s=60,
            c=one["bytes_read"] / peak,
            cmap="Blues",
            vmin=-0.3,
            vmax=1.0,
            linewidths=1.2,
        )
    top.set_yticks(range(len(threads)), [f"thread {n + 1}" for n in range(len(threads))], fontsize=7)
    top.set_ylim(-0.7, len(threads) - 0.3)
    top.invert_yaxis()
    top.set_title(
        f"Reads per thread: {_series(e)}, {e['storage']}, threads={e['threads']}, run {e['run']} "
        f"({e.get('posix_reads') or 0:,} read calls)",
        fontsize=9,
    )
    dt = float(th["dt_s"].iloc[0]) * LINE_BINS  # the traced rate over coarser bins: 1/40 of the run each
    coarse = th.assign(b=(th["t_s"] // dt).astype(int)).groupby("b")["bytes_read"].sum()
    coarse = coarse.reindex(range(int(th["t_s"].max() // dt) + 1), fill_value=0)
    bottom.step(
        (coarse.index + 1) * dt,
        coarse.values / dt / 1e6,
        where="pre",
        linewidth=0.9,
        color="tab:blue",
        label="traced reads (this process)",
    )
    dev = folder / e["posix_device_table"] if e.get("posix_device_table") else None
    if dev is not None and dev.exists():
        samples, _ = plotting.read_trace(folder, e["posix_device_table"])
        if not samples.empty:
            x, y = plotting.step_series(samples, "read_mb_s", 0.0)
            bottom.step(x, y, where="pre", linewidth=1.2, color="black", label="device read (every process)")
    bottom.set_ylabel("MB/s")
    bottom.set_xlabel("time since the run started (s)")
    bottom.grid(linewidth=0.3)
    bottom.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return plotting.save(fig, folder / TIMELINE)


def write_all(c: tables.Collected, folder: Path, render: bool = True) -> list[Path]:
    """The POSIX tables and figures of the campaign (nothing when no run was traced)."""
    if not c.posix:
        return []
    out = []
    from analysis import outputs

    with outputs.create(folder / SUMMARY) as f:
        summary_frame(c).to_csv(f, index=False)
    out.append(folder / SUMMARY)
    out.append(write_files(c, folder))
    if render:
        out += sizes_figure(c, folder)
        out += timeline_figure(c, folder)
    return out


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
