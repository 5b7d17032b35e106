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
# the most calls read into memory: a table of this many rows takes about 0.5 GB; a longer trace is refused
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


def frame(rows: list[tuple]):
    """The operations table from ``rows`` of ``COLUMNS``, start times made relative to the first call."""
    import pandas as pd

    df = pd.DataFrame(rows, columns=list(COLUMNS))
    for c in ("rank", "thread", "offset", "size"):
        df[c] = df[c].astype("Int64")
    df["operation"] = pd.Categorical(df["operation"], categories=OPERATIONS)
    if len(df):
        df["start_s"] = df["start_s"] - df["start_s"].min()
    return df.sort_values("start_s", kind="stable").reset_index(drop=True)


def too_many(p: Path, n: int) -> TraceError:
    return TraceError(
        f"{p}: {n:,} calls or more; this tool reads traces of up to {MAX_OPERATIONS:,} calls (about 0.5 GB "
        "in memory): trace a shorter part of the job"
    )
