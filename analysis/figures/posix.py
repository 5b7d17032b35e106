"""POSIX traces of a campaign (``trace.posix=true``) as figures: the request-size histogram per pipeline
and a per-thread timeline of one run's reads over the device's MB/s, as tf-Darshan showed them."""

from __future__ import annotations

from pathlib import Path

from analysis.figures import plotting
from analysis.tables import tidy
from jobs.observe import posix

SIZES = "posix_sizes"
TIMELINE = "posix_timeline"
LINE_BINS = posix.TIMELINE_BINS // 40  # time bins of the threads' table per step of the traced MB/s line


def _series(e: dict) -> str:
    """A traced run's series: its workload, its pipeline (when it is not the workload) and its format."""
    what = e.get("pipeline") or e.get("workload")
    pipeline = f" · {what}" if what and what != e.get("workload") else ""
    return f"{e.get('workload')}{pipeline} · {e.get('format') or 'files'}"


def sizes_figure(c: tidy.Collected, folder: Path) -> list[Path]:
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


def timeline_run(c: tidy.Collected) -> dict | None:
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


def timeline_figure(c: tidy.Collected, folder: Path) -> list[Path]:
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


def render(c: tidy.Collected, folder: Path) -> list[Path]:
    """The POSIX figures of the campaign (nothing when no run was traced)."""
    if not c.posix:
        return []
    return sizes_figure(c, folder) + timeline_figure(c, folder)
