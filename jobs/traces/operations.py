"""The table every trace becomes (``COLUMNS``), the ``Trace`` that carries it, and the limits and error the
readers share."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# one row per call: the file, the process (Darshan's MPI rank; DFTracer's pid) and thread that made it
# (none in Darshan), the operation, the byte offset and size of a read or write (none where the trace
# does not hold them), and its start and duration in seconds since the trace's first call
COLUMNS = ("file", "rank", "thread", "operation", "offset", "size", "start_s", "duration_s")
OPERATIONS = ("open", "read", "write", "seek", "sync", "close", "meta")
# the most calls read into memory: a DFTracer trace of this many took 1.6 GB at its peak and 77 s to profile
# (measured: docs/traces.md); a longer trace is refused
# (a DFTracer trace streams, so it is refused once the limit is passed, without reading the rest)
MAX_OPERATIONS = 5_000_000


class TraceError(ValueError):
    """A trace that cannot be read; the message is one line naming the file and what is wrong with it."""


@dataclass
class Trace:
    """What a trace says: its calls as one table, and, from a Darshan log, its counters per file and rank.

    ``operations`` has ``COLUMNS``; it is empty for a Darshan log without DXT, whose ``counters`` then
    carry the profile (``jobs.traces.darshan.COUNTER_COLUMNS``). ``notes`` say what the trace lacks."""

    path: Path
    source: str  # "darshan", "dftracer" or "iocampaign" (the tool's own, written by dftracer)
    operations: object  # a pandas DataFrame
    counters: object | None = None  # a pandas DataFrame (Darshan only)
    run_time_s: float | None = None  # the job's wall time, where the trace records it
    processes: int | None = None  # the job's processes (Darshan's nprocs), where the trace records it
    notes: list[str] = field(default_factory=list)

    @property
    def has_calls(self) -> bool:
        return len(self.operations) > 0


NA = -(2**63)  # in an integer column handed to ``table``: no value (an offset the trace does not give)


def frame(rows: list[tuple]):
    """The operations table from ``rows`` of ``COLUMNS`` (None where a value is missing)."""
    columns = list(zip(*rows)) if rows else [[] for _ in COLUMNS]
    ints = {c: [NA if v is None else int(v) for v in columns[i]] for i, c in enumerate(COLUMNS) if c in INTS}
    return table({**dict(zip(COLUMNS, columns)), **ints})


INTS = ("rank", "thread", "offset", "size")


def table(columns: dict):
    """The operations table from one sequence per column (integer columns with ``NA`` for a missing
    value), start times made relative to the first call, in time order."""
    import numpy as np
    import pandas as pd

    data = {}
    for c in COLUMNS:
        if c in INTS:
            values = np.asarray(columns[c], dtype="int64")
            data[c] = pd.arrays.IntegerArray(values, values == NA)
        elif c == "operation":
            data[c] = pd.Categorical(columns[c], categories=OPERATIONS)
        elif c == "file":
            data[c] = pd.Series(columns[c], dtype="object")
        else:
            data[c] = np.asarray(columns[c], dtype="float64")
    df = pd.DataFrame(data)
    if len(df):
        df["start_s"] = df["start_s"] - df["start_s"].min()
    return df.sort_values("start_s", kind="stable").reset_index(drop=True)


def too_many(p: Path, n: int) -> TraceError:
    return TraceError(
        f"{p}: {n:,} calls or more; this tool reads traces of up to {MAX_OPERATIONS:,} calls (about 1.6 GB "
        "in memory): trace a shorter part of the job"
    )
