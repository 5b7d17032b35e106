"""A trace's I/O profile as tidy tables (the numbers: ``figure`` draws them, ``command`` writes them).

From the operations table (``jobs.traces.COLUMNS``) where the trace has calls; from Darshan's counters per
file and rank where it has none (a log without DXT), and then only what counters hold: no concurrency over
time, and request sizes in Darshan's own bins.

- ``files``: per file, its processes, reads, writes and bytes, and the extent seen (the furthest byte read
  or written);
- ``sizes``: requests per operation and size class;
- ``processes``: per process (rank; and thread, where the trace names one), calls, bytes and time in I/O;
- ``concurrency``: per time bin, the calls in flight and the MB/s read and written;
- ``summary``: one row of the job's figures, with the sequential share of reads (Darshan's definition: a
  read at or past the end of the same process's previous read of the file) and the share of time in I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.observe import posix
from jobs.traces import Trace
from jobs.traces.darshan import SIZE_BINS

BINS = 200  # time bins of the concurrency table
IO = ("read", "write")


@dataclass
class Profile:
    summary: object  # each a pandas DataFrame
    files: object
    sizes: object
    processes: object
    concurrency: object  # empty for a trace without times per call

    def tables(self) -> dict:
        """Each table under the name of its CSV file."""
        return {
            "trace_summary.csv": self.summary,
            "trace_files.csv": self.files,
            "trace_sizes.csv": self.sizes,
            "trace_processes.csv": self.processes,
            "trace_concurrency.csv": self.concurrency,
        }


def profile(t: Trace) -> Profile:
    return _from_calls(t) if t.has_calls else _from_counters(t)


def _from_calls(t: Trace) -> Profile:
    import pandas as pd

    ops = t.operations
    io = ops[ops["operation"].isin(IO)]
    reads, writes = io[io["operation"] == "read"], io[io["operation"] == "write"]
    end = (ops["start_s"] + ops["duration_s"]).max()
    span = float(end) if len(ops) else 0.0
    streams = ops[["rank", "thread"]].drop_duplicates()
    io_s = float(ops["duration_s"].sum())
    summary = _summary(
        t,
        files=None,  # below: the files read or written
        processes=ops["rank"].nunique(),
        threads=len(streams),
        reads=len(reads),
        writes=len(writes),
        bytes_read=int(reads["size"].sum()),
        bytes_written=int(writes["size"].sum()),
        seq=_sequential(reads),
        io_s=io_s,
        span_s=span,
        io_share=io_s / (len(streams) * span) if span > 0 and len(streams) else None,
    )
    by_file = ops.groupby("file", sort=False, observed=True)
    files = pd.DataFrame(
        {
            "processes": by_file["rank"].nunique(),
            "reads": reads.groupby("file").size(),
            "bytes_read": reads.groupby("file")["size"].sum(),
            "writes": writes.groupby("file").size(),
            "bytes_written": writes.groupby("file")["size"].sum(),
            "extent_bytes": (io["offset"] + io["size"]).groupby(io["file"]).max(),
            "first_s": by_file["start_s"].min(),
            "last_s": (ops["start_s"] + ops["duration_s"]).groupby(ops["file"]).max(),
        }
    )
    files = (
        _counts(files, ("reads", "bytes_read", "writes", "bytes_written")).rename_axis("file").reset_index()
    )
    files = files[(files["reads"] > 0) | (files["writes"] > 0)].sort_values("first_s", kind="stable")
    keys = ["rank", "thread"]
    by = ops.groupby(keys, dropna=False, sort=True)
    processes = pd.DataFrame(
        {
            "calls": by.size(),
            "reads": reads.groupby(keys, dropna=False).size(),
            "bytes_read": reads.groupby(keys, dropna=False)["size"].sum(),
            "writes": writes.groupby(keys, dropna=False).size(),
            "bytes_written": writes.groupby(keys, dropna=False)["size"].sum(),
            "io_s": by["duration_s"].sum(),
        }
    )
    processes = _counts(processes, ("reads", "bytes_read", "writes", "bytes_written")).reset_index()
    summary["files"] = len(files)  # those read or written
    return Profile(summary, files.reset_index(drop=True), _sizes(io), processes, _concurrency(ops, io, span))


def _counts(df, columns):
    df[list(columns)] = df[list(columns)].fillna(0).astype("int64")
    return df


def _summary(t: Trace, **figures):
    import pandas as pd

    reads = figures["reads"]
    row = {
        "trace": str(t.path),
        "source": t.source,
        "from": "calls" if t.has_calls else "counters",
        **{k: v for k, v in figures.items() if k != "seq"},
        "mean_read_bytes": figures["bytes_read"] / reads if reads else None,
        "sequential_read_share": figures["seq"],
        "job_processes": t.processes,
        "job_run_time_s": t.run_time_s,
    }
    return pd.DataFrame([row])


def _sequential(reads) -> float | None:
    """The share of reads, after each process's and thread's first read of a file, at or past the end of
    its previous read of that file (Darshan's POSIX_SEQ_READS)."""
    known = reads.dropna(subset=["offset"])
    if known.empty:
        return None
    keys = [known["file"], known["rank"].fillna(-1), known["thread"].fillna(-1)]
    previous_end = (known["offset"] + known["size"]).groupby(keys).shift(1)
    later = previous_end.notna()
    return float((known["offset"][later] >= previous_end[later]).mean()) if later.any() else None


def _sizes(io):
    import numpy as np
    import pandas as pd

    edges = [c[0] for c in posix.SIZE_CLASSES] + [np.inf]
    labels = [c[3] for c in posix.SIZE_CLASSES]
    rows = []
    for op in IO:
        sizes = io.loc[io["operation"] == op, "size"].astype("float64")
        classes = pd.cut(sizes, edges, right=False, labels=labels)
        for label in labels:
            mine = sizes[classes == label]
            rows.append((op, label, len(mine), int(mine.sum())))
    return pd.DataFrame(rows, columns=["operation", "size_class", "requests", "bytes"])


def _concurrency(ops, io, span: float):
    """Per time bin: the mean number of calls in flight (their time inside the bin over its width) and the
    MB/s read and written (each call's bytes spread over its duration)."""
    import numpy as np
    import pandas as pd

    if span <= 0:
        return pd.DataFrame(columns=["t_s", "dt_s", "calls_in_flight", "read_mb_s", "write_mb_s"])
    dt = span / BINS
    grid = np.arange(BINS + 1) * dt
    in_flight = _spread(ops["start_s"], ops["duration_s"], np.ones(len(ops)), grid, fraction=False)
    rates = {}
    for op in IO:
        one = io[io["operation"] == op]
        rates[op] = _spread(
            one["start_s"], one["duration_s"], one["size"].astype("float64"), grid, fraction=True
        )
    return pd.DataFrame(
        {
            "t_s": grid[:-1] + dt / 2,
            "dt_s": dt,
            "calls_in_flight": in_flight / dt,
            "read_mb_s": rates["read"] / dt / 1e6,
            "write_mb_s": rates["write"] / dt / 1e6,
        }
    )


def _spread(start, duration, weight, grid, fraction: bool):
    """Per bin of ``grid``: each interval's overlap with the bin (seconds) times its weight (``fraction``:
    the weight shared over the interval, so a bin gets its part of it). A call of no duration puts its
    weight (``fraction``) in its start's bin. Computed from the integral at the bin edges, sums over
    intervals sorted by start and by end: no loop over calls."""
    import numpy as np

    s = start.to_numpy(dtype="float64")
    d = np.maximum(duration.to_numpy(dtype="float64"), 0.0)
    w = np.asarray(weight, dtype="float64")
    out = np.zeros(len(grid) - 1)
    point = d <= 0
    if fraction and point.any():
        k = np.clip(np.searchsorted(grid, s[point], side="right") - 1, 0, len(out) - 1)
        np.add.at(out, k, w[point])
    s, d, w = s[~point], d[~point], w[~point]
    rate = w / d if fraction else w
    return np.maximum(out + np.diff(_integral(s, rate, grid) - _integral(s + d, rate, grid)), 0.0)


def _integral(x, rate, grid):
    """At each grid point g: the sum over intervals starting at x < g of rate × (g - x)."""
    import numpy as np

    order = np.argsort(x, kind="stable")
    xs, rs = x[order], rate[order]
    k = np.searchsorted(xs, grid, side="left")
    r_sum = np.concatenate(([0.0], np.cumsum(rs)))[k]
    rx_sum = np.concatenate(([0.0], np.cumsum(rs * xs)))[k]
    return r_sum * grid - rx_sum


def _from_counters(t: Trace) -> Profile:
    import pandas as pd

    c = t.counters
    posix_rows = c[c["module"] == "POSIX"]
    reads, writes = int(c["reads"].sum()), int(c["writes"].sum())
    io_s = float(c[["read_s", "write_s", "meta_s"]].sum().sum())
    seq = posix_rows["seq_reads"].sum() / posix_rows["reads"].sum() if posix_rows["reads"].sum() else None
    summary = _summary(
        t,
        files=None,
        processes=t.processes,
        threads=None,  # counters are per rank
        reads=reads,
        writes=writes,
        bytes_read=int(c["bytes_read"].sum()),
        bytes_written=int(c["bytes_written"].sum()),
        seq=float(seq) if seq is not None else None,
        io_s=io_s,
        span_s=t.run_time_s,
        io_share=io_s / (t.processes * t.run_time_s) if t.processes and t.run_time_s else None,
    )
    by_file = c.groupby("file", sort=False)
    files = pd.DataFrame(
        {
            "processes": by_file["rank"].nunique(),
            "reads": by_file["reads"].sum(),
            "bytes_read": by_file["bytes_read"].sum(),
            "writes": by_file["writes"].sum(),
            "bytes_written": by_file["bytes_written"].sum(),
        }
    )
    files = _counts(files, ("reads", "bytes_read", "writes", "bytes_written")).reset_index()
    files = files[(files["reads"] > 0) | (files["writes"] > 0)].reset_index(drop=True)
    summary["files"] = len(files)
    rows = []
    for op in IO:
        for b in SIZE_BINS:
            rows.append((op, b.replace("_", "–"), int(posix_rows[f"{op}_{b}"].fillna(0).sum()), None))
    sizes = pd.DataFrame(rows, columns=["operation", "size_class", "requests", "bytes"])
    by_rank = c.groupby("rank")
    processes = pd.DataFrame(
        {
            "reads": by_rank["reads"].sum(),
            "bytes_read": by_rank["bytes_read"].sum(),
            "writes": by_rank["writes"].sum(),
            "bytes_written": by_rank["bytes_written"].sum(),
            "io_s": by_rank[["read_s", "write_s", "meta_s"]].sum().sum(axis=1),
        }
    )
    processes = _counts(processes, ("reads", "bytes_read", "writes", "bytes_written")).reset_index()
    return Profile(summary, files, sizes, processes, _concurrency(t.operations, t.operations, 0.0))
