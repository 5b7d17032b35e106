"""A trace's I/O profile as one figure of four panels: request sizes, bytes per process, calls in flight and
MB/s over time, and files by bytes moved (``trace_profile.png`` and ``.svg``)."""

from __future__ import annotations

from pathlib import Path

from analysis.figures import plotting
from analysis.traces.tables import Profile

STEM = "trace_profile"
TOP = 24  # processes shown by bytes moved; the rest are summed in one bar


def render(p: Profile, folder: Path, title: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5))
    _sizes(axes[0][0], p)
    _processes(axes[0][1], p)
    _concurrency(axes[1][0], p)
    _files(axes[1][1], p)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return plotting.save(fig, folder / STEM)


def _sizes(ax, p: Profile) -> None:
    import numpy as np

    s = p.sizes
    labels = list(dict.fromkeys(s["size_class"]))
    x = np.arange(len(labels))
    for j, op in enumerate(("read", "write")):
        one = s[s["operation"] == op].set_index("size_class").reindex(labels)
        ax.bar(x - 0.2 + 0.4 * j, one["requests"], 0.4, label=f"{op}s ({int(one['requests'].sum()):,})")
    ax.set_xticks(x, labels, fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("requests")
    counters = p.summary["from"].iloc[0] == "counters"
    ax.set_title(
        "Request sizes: POSIX calls in Darshan's bins (its counters)"
        if counters
        else "Request sizes (bytes per call)",
        fontsize=9,
    )
    ax.legend(fontsize=7)


def _processes(ax, p: Profile) -> None:
    d = p.processes.assign(moved=p.processes["bytes_read"] + p.processes["bytes_written"])
    d = d[d["moved"] > 0].sort_values("moved", ascending=False, kind="stable")
    unit, scale = _unit(float(d["moved"].max()) if len(d) else 0.0)
    shown, rest = d.head(TOP), d.iloc[TOP:]
    names = [_process(r) for r in shown.itertuples()]
    read, written = list(shown["bytes_read"] / scale), list(shown["bytes_written"] / scale)
    if len(rest):
        names.append(f"{len(rest)} more")
        read.append(rest["bytes_read"].sum() / scale)
        written.append(rest["bytes_written"].sum() / scale)
    y = range(len(names))
    ax.barh(y, read, label="read")
    ax.barh(y, written, left=read, label="written")
    ax.set_yticks(list(y), names, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(
        f"Bytes per process ({len(d):,} of the {len(p.processes):,} that made calls moved bytes)", fontsize=9
    )
    ax.legend(fontsize=7)


def _unit(most: float) -> tuple[str, float]:
    return next(((u, s) for u, s in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)) if most >= s), ("kB", 1e3))


def _process(r) -> str:
    rank = "all ranks" if r.rank == -1 else f"rank {r.rank}"
    import pandas as pd

    thread = getattr(r, "thread", None)
    return rank if pd.isna(thread) else f"{rank} · thread {thread}"


def _concurrency(ax, p: Profile) -> None:
    c = p.concurrency
    if c.empty:
        ax.text(0.5, 0.5, "no times per call in this trace\n(Darshan without DXT)", ha="center", va="center")
        ax.set_axis_off()
        return
    ax.step(c["t_s"], c["read_mb_s"], where="mid", label="read MB/s", linewidth=0.9)
    ax.step(c["t_s"], c["write_mb_s"], where="mid", label="write MB/s", linewidth=0.9)
    ax.set_xlabel("time since the first call (s)")
    ax.set_ylabel("MB/s")
    twin = ax.twinx()
    twin.plot(c["t_s"], c["calls_in_flight"], color="black", linewidth=0.7, label="calls in flight")
    twin.set_ylabel("calls in flight (mean per bin)")
    ax.set_title("Over time", fontsize=9)
    lines = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper right")


def _files(ax, p: Profile) -> None:
    import numpy as np

    moved = (p.files["bytes_read"] + p.files["bytes_written"]).to_numpy()
    moved = moved[moved > 0]
    if not len(moved):
        ax.set_axis_off()
        return
    bins = np.logspace(0, max(1.0, np.log10(moved.max()) + 0.1), 30)
    ax.hist(moved, bins=bins)
    ax.set_xscale("log")
    ax.set_xlabel("bytes read and written per file")
    ax.set_ylabel("files")
    ax.set_title(f"Files by bytes moved ({len(moved):,} files that moved bytes)", fontsize=9)
