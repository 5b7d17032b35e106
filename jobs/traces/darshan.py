"""Darshan logs, read with PyDarshan (PyPI ``darshan``, whose wheel carries the log reader).

From a log this module takes:
- DXT's segments (``DXT_POSIX``), where the job ran with ``DXT_ENABLE_IO_TRACE=1``: every read and write with
  its file, rank, offset, length and times, as rows of the operations table;
- always, the POSIX and STDIO counters per file and rank (``COUNTER_COLUMNS``). Rank -1 is a file every rank
  opened, whose counters Darshan summed over the ranks.

The log's header is checked before PyDarshan opens it: darshan-util's C reader, given a truncated log,
prints errors, returns empty records as if the job had made no I/O, and can abort the whole process when
it closes the file. A log whose regions (the header's map of each module's compressed bytes) reach past its
end is refused here as truncated; a log whose body is damaged is read first in a child process
(``validated``), and refused when that reader complains or dies.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from jobs.traces import operations
from jobs.traces.operations import Trace, TraceError, frame, too_many

MAGIC = 6567223  # darshan-log-format.h: DARSHAN_MAGIC_NR
MAX_MODS = 16  # DARSHAN_MAX_MODS of log versions 3.x: the header's map holds the name map and 16 modules
_HEADER = 24 + 16 * (MAX_MODS + 1)  # version string (8), magic (8), compression and partial flag (8), maps
MAX_LOG_BYTES = 1 << 30  # a compressed log larger than this is refused before it is decompressed
VALIDATE_S = 600  # the longest the child process that reads a log first may take

SIZE_BINS = (
    "0_100",
    "100_1K",
    "1K_10K",
    "10K_100K",
    "100K_1M",
    "1M_4M",
    "4M_10M",
    "10M_100M",
    "100M_1G",
    "1G_PLUS",
)
# per file, rank and module (POSIX or STDIO); the size bins are Darshan's own, of POSIX reads and writes
COUNTER_COLUMNS = (
    "file",
    "rank",
    "module",
    "opens",
    "reads",
    "writes",
    "bytes_read",
    "bytes_written",
    "seq_reads",
    "read_s",
    "write_s",
    "meta_s",
    *(f"read_{b}" for b in SIZE_BINS),
    *(f"write_{b}" for b in SIZE_BINS),
)
_NUMBERS = {
    "POSIX": ("OPENS", "READS", "WRITES", "BYTES_READ", "BYTES_WRITTEN", "SEQ_READS"),
    "STDIO": ("OPENS", "READS", "WRITES", "BYTES_READ", "BYTES_WRITTEN", None),
}


def is_log(p: Path) -> bool:
    """Whether ``p`` starts as a Darshan log does: a version string, then Darshan's magic number."""
    with open(p, "rb") as f:
        head = f.read(16)
    return len(head) == 16 and struct.unpack_from("<q", head, 8)[0] == MAGIC


def check(p: Path) -> str:
    """The log's version, once its header says it is whole; TraceError for a version not read here, a
    header cut short, or a module's region that reaches past the end of the file (a truncated log)."""
    size = os.path.getsize(p)
    with open(p, "rb") as f:
        head = f.read(_HEADER)
    version = head[:8].split(b"\0", 1)[0].decode("ascii", "replace")
    if not version.startswith("3."):
        raise TraceError(
            f"{p}: a Darshan log of version {version!r}; this tool reads versions 3.x (Darshan 3)"
        )
    if len(head) < _HEADER:
        raise TraceError(f"{p}: a truncated Darshan log (its header is cut short at {size} bytes)")
    maps = [struct.unpack_from("<QQ", head, 24 + 16 * i) for i in range(MAX_MODS + 1)]
    end = max((off + length for off, length in maps if length), default=0)
    if end > size:
        raise TraceError(
            f"{p}: a truncated Darshan log: its header maps {end:,} bytes, the file holds {size:,} "
            "(was it copied before the job ended?)"
        )
    if size > MAX_LOG_BYTES:
        raise TraceError(
            f"{p}: a Darshan log of {size:,} bytes; this tool reads logs up to {MAX_LOG_BYTES:,}"
        )
    return version


def validated(p: Path) -> None:
    """Read the log once in a child process first: darshan-util's C reader, given a damaged body, prints
    its errors and returns part of the records as if they were all (a DXT module cut to 183 of 6,126
    segments, measured), or aborts or crashes the whole process. Any error it prints, or its death, is a
    TraceError here, and the log is read in this process only once the child read it cleanly."""
    import subprocess
    import sys

    code = "import sys, darshan; darshan.DarshanReport(sys.argv[1], read_all=True)"
    try:
        r = subprocess.run(
            [sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=VALIDATE_S
        )
    except subprocess.TimeoutExpired:
        raise TraceError(f"{p}: darshan-util did not read it in {VALIDATE_S} s") from None
    said = [x.strip() for x in r.stderr.splitlines() if x.startswith("Error") or "Assertion" in x]
    if r.returncode != 0 or said:
        why = said[0] if said else f"its reader ended with status {r.returncode}"
        raise TraceError(f"{p}: a damaged Darshan log: darshan-util says {why!r}")


def read(p: Path) -> Trace:
    import darshan

    check(p)
    validated(p)
    try:
        report = darshan.DarshanReport(str(p), read_all=True)
    except RuntimeError as e:
        raise TraceError(f"{p}: PyDarshan cannot open it as a Darshan log ({e})") from None
    names = report.name_records
    job = report.metadata.get("job", {})
    trace = Trace(
        path=p,
        source="darshan",
        operations=frame(_segments(p, report, names)),
        counters=_counters(report, names),
        run_time_s=float(job["run_time"]) if job.get("run_time") else None,
        processes=int(job["nprocs"]) if job.get("nprocs") else None,
    )
    if not trace.has_calls:
        trace.notes.append(
            "no DXT segments in this log: the calls' order, offsets and times are not in it, so the "
            "profile comes from Darshan's counters per file and rank (run the job with DXT_ENABLE_IO_TRACE=1 "
            "for them)"
        )
    io = trace.counters[["reads", "writes"]].to_numpy().sum() if len(trace.counters) else 0
    if not trace.has_calls and not io:
        raise TraceError(
            f"{p}: a Darshan log with no reads or writes in it (no POSIX, STDIO or DXT records of I/O)"
        )
    return trace


def _segments(p: Path, report, names: dict) -> list[tuple]:
    """DXT_POSIX's reads and writes as operation rows; refused past MAX_OPERATIONS."""
    if "DXT_POSIX" not in report.records:
        return []
    records = report.records["DXT_POSIX"].to_df()
    n = sum(int(r["read_count"]) + int(r["write_count"]) for r in records)
    if n > operations.MAX_OPERATIONS:
        raise too_many(p, n)
    rows = []
    for r in records:
        path = names.get(r["id"], str(r["id"]))
        for op, segs in (("read", r["read_segments"]), ("write", r["write_segments"])):
            if len(segs) == 0:
                continue
            thread = segs["pthread_id"] if "pthread_id" in segs else [None] * len(segs)
            for off, length, t0, t1, tid in zip(
                segs["offset"], segs["length"], segs["start_time"], segs["end_time"], thread
            ):
                rows.append((path, int(r["rank"]), tid, op, int(off), int(length), float(t0), float(t1 - t0)))
    return rows


def _counters(report, names: dict):
    """POSIX and STDIO counters per file and rank (``COUNTER_COLUMNS``)."""
    import pandas as pd

    parts = []
    for module, (opens, reads, writes, b_read, b_written, seq) in _NUMBERS.items():
        if module not in report.records or not len(report.records[module]):
            continue
        df = report.records[module].to_df()
        c, f = df["counters"], df["fcounters"]
        m = f"{module}_"
        part = pd.DataFrame(
            {
                "file": [names.get(i, str(i)) for i in c["id"]],
                "rank": c["rank"].astype(int),
                "module": module,
                "opens": c[m + opens],
                "reads": c[m + reads],
                "writes": c[m + writes],
                "bytes_read": c[m + b_read],
                "bytes_written": c[m + b_written],
                "seq_reads": c[m + seq] if seq else pd.NA,
                "read_s": f[m + "F_READ_TIME"],
                "write_s": f[m + "F_WRITE_TIME"],
                "meta_s": f[m + "F_META_TIME"],
            }
        )
        for b in SIZE_BINS:
            for op in ("read", "write"):
                col = f"{m}SIZE_{op.upper()}_{b}"
                part[f"{op}_{b}"] = c.get(col, pd.NA)
        parts.append(part)
    if not parts:
        return pd.DataFrame(columns=list(COUNTER_COLUMNS))
    out = pd.concat(parts, ignore_index=True)[list(COUNTER_COLUMNS)]
    # Darshan writes -1 for a counter it did not keep (STDIO's, or one a rank did not reach)
    numeric = [c for c in COUNTER_COLUMNS if c not in ("file", "rank", "module")]
    out[numeric] = out[numeric].apply(pd.to_numeric, errors="coerce").mask(lambda x: x < 0)
    return out
