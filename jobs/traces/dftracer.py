"""DFTracer traces a user brings (``.pfw``, ``.pfw.gz``), and the tool's own POSIX traces, which dftracer's
preload library writes in the same format (``jobs.observe.posix`` owns how a cell writes and splits them).

A trace is one JSON event per line, with or without the enclosing ``[`` of older versions. Events are
``{name, cat, pid, tid, ts, dur, ph, args}``: ``ph`` is 1 (a complete call), 2 (a counter), 3 (aggregated) or
4 (metadata) in current versions, ``"X"``/``"C"``/``"M"`` in older ones. File names come as hashes
(``args.fhash``) that metadata events named ``FH`` resolve, or as ``args.fname`` in older versions. Only
POSIX and STDIO calls on a file become operations; a ``read`` has no offset of its own, so it is followed
from the file's open, the reads before it and ``lseek`` per process and file.
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from pathlib import Path

from jobs.observe import posix
from jobs.traces import operations
from jobs.traces.operations import COLUMNS, INTS, NA, Trace, TraceError, table, too_many

CALL, COUNTER, AGGREGATED, METADATA = 1, 2, 3, 4
_PHASES = {
    CALL: CALL,
    "X": CALL,
    COUNTER: COUNTER,
    "C": COUNTER,
    AGGREGATED: AGGREGATED,
    METADATA: METADATA,
    "M": METADATA,
}
SEEK_SET, SEEK_CUR = 0, 1
READ_VERSIONS = (1, 2)  # DFTracer's major versions whose events this module reads
MAX_LINE = 1 << 20  # characters of one event: DFTracer's are a few hundred; a longer line is refused
BOUND = 1 << 62  # a pid, thread, offset or size beyond this is no call's: the trace is damaged


def _open(p: Path):
    with open(p, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return (
        gzip.open(p, "rt", encoding="utf-8", errors="replace")
        if gz
        else open(p, encoding="utf-8", errors="replace")
    )


def _event(line: str) -> dict | None:
    line = line.strip().lstrip("[").rstrip(",").rstrip("]").strip()
    if not line:
        return None
    e = json.loads(line)
    return e if isinstance(e, dict) else None


def is_trace(p: Path) -> bool:
    """Whether the first event of ``p`` is a DFTracer event (JSON with ``cat`` and ``ph``)."""
    try:
        with _open(p) as f:
            for _, line in zip(range(5), f):
                e = _event(line[:1_000_000])
                if e is not None:
                    return "cat" in e and "ph" in e
    except (OSError, EOFError, zlib.error, ValueError, UnicodeDecodeError):
        return False
    return False


def read(p: Path) -> Trace:
    return _trace([p], p, "dftracer")


def read_cell(folder: Path) -> Trace:
    """A traced cell's folder (or its ``posix/`` folder): the traces of every process it ran, as one."""
    where = folder / posix.SUBDIR if (folder / posix.SUBDIR).is_dir() else folder
    files = posix.trace_files(where)
    if not files:
        raise TraceError(
            f"{folder}: no POSIX trace in it (a traced cell's folder holds {posix.SUBDIR}/"
            f"{posix.LOG_STEM}-*.pfw.gz: run the cell with trace.posix=true)"
        )
    return _trace(files, folder, "iocampaign", _windows(folder))


def _windows(folder: Path) -> list[tuple[int, int]]:
    """The traced runs' wall-clock windows (µs) from the cell's record; none without one."""
    from jobs import records

    rec = folder / "record.json" if (folder / "record.json").is_file() else folder.parent / "record.json"
    try:
        r = records.read(rec) if rec.is_file() else None
    except (OSError, ValueError):
        return []
    runs = [] if r is None else [*r.runs, *([r.traced_run] if r.traced_run else [])]  # trace.runs=extra
    return [tuple(x["posix_window_us"]) for x in runs if x.get("posix_window_us")]


def _trace(files: list[Path], where: Path, source: str, windows: list | None = None) -> Trace:
    names: dict[str, str] = {}
    calls: list[tuple] = []
    notes: list[str] = []
    for p in files:
        torn = _calls(p, names, calls)
        if torn:
            notes.append(
                f"{p.name}: its last line was cut short (a process stopped while writing it): left out"
            )
    columns = _columns(calls, names, where)
    unnamed = columns.pop("unnamed")
    misnamed = columns.pop("misnamed")
    if misnamed:
        notes.append(
            f"{misnamed:,} calls named a file DFTracer had seen closed and not opened again (another file "
            "opened untraced on the descriptor number it freed): left out"
        )
    del calls[:]
    kept = None
    if windows:  # a cell's: the calls of its traced runs, not the tool's own before and between them
        starts = columns["start_s"]
        kept = [i for i, t in enumerate(starts) if any(t0 <= t * 1e6 <= t1 for t0, t1 in windows)]
        notes.append(
            f"the calls of the cell's {len(windows)} traced run(s): {len(starts) - len(kept):,} calls the "
            "tool made before and between them are left out"
        )
        columns = {c: [v[i] for i in kept] for c, v in columns.items()}
    if not any(op in ("read", "write") for op in columns["operation"]):
        raise TraceError(
            f"{where}: a DFTracer trace with no reads or writes on a named file in it"
            + (
                f" ({unnamed:,} calls name their files by hashes that no FH event names: was it written "
                "with DFTRACER_INC_METADATA=1?)"
                if unnamed
                else ""
            )
        )
    return Trace(path=where, source=source, operations=table(columns), notes=notes)


def _calls(p: Path, names: dict, calls: list) -> bool:
    """Add the POSIX and STDIO calls of ``p`` to ``calls`` and its file names to ``names``; whether its
    last line was torn. TraceError for a truncated gzip stream, a bad line before the last, or an event
    of a format version not read here."""
    torn_at = None
    n = 0
    try:
        with _open(p) as f:
            for n, line in enumerate(iter(lambda: f.readline(MAX_LINE + 1), ""), 1):
                if len(line) > MAX_LINE:
                    raise TraceError(
                        f"{p}: line {n} is longer than {MAX_LINE:,} characters: not a DFTracer event"
                    )
                if torn_at is not None:
                    raise TraceError(f"{p}: line {torn_at} is not a JSON event (the trace is damaged)")
                try:
                    e = _event(line)
                except json.JSONDecodeError:
                    torn_at = n
                    continue
                if e is not None:
                    _take(p, n, e, names, calls)
    except (EOFError, zlib.error, gzip.BadGzipFile):
        raise TraceError(
            f"{p}: a truncated gzip stream after line {n} (was it copied before the job ended?)"
        ) from None
    return torn_at is not None


def _take(p: Path, n: int, e: dict, names: dict, calls: list) -> None:
    ph = _PHASES.get(e.get("ph"))
    if ph is None:
        raise TraceError(
            f"{p}: line {n} has ph={e.get('ph')!r}, which this tool does not read (DFTracer's ph is 1-4, or "
            "'X', 'C' and 'M' in versions before 2)"
        )
    args = e.get("args") or {}
    if e.get("name") == "start" and e.get("cat") == "dftracer":
        _version(p, args.get("version"))
    if ph == METADATA:
        if e.get("name") == "FH":
            names[args.get("value")] = args.get("name")
        return
    if ph != CALL or e.get("cat") not in posix.CATEGORIES:
        return
    fhash, fname = args.get("fhash"), args.get("fname")
    if fhash is None and fname is None:  # a call on no file (execv, waitpid): no row
        return
    if len(calls) >= operations.MAX_OPERATIONS:
        raise too_many(p, len(calls) + 1)
    # what a row needs, and no more: a trace's events are millions; its names and hashes are few (interned)
    calls.append(
        (
            sys.intern(str(e.get("name"))),
            e.get("pid"),
            e.get("tid"),
            e.get("ts"),
            e.get("dur"),
            sys.intern(fhash) if isinstance(fhash, str) else None,
            sys.intern(fname) if isinstance(fname, str) else None,
            args.get("ret"),
            args.get("size"),
            args.get("offset"),
            args.get("whence"),
        )
    )


def _version(p: Path, version) -> None:
    """DFTracer's start event names its version as major × 10000 + minor × 100 + patch (20003: 2.0.3)."""
    if isinstance(version, int) and version // 10000 not in READ_VERSIONS:
        raise TraceError(
            f"{p}: written by DFTracer {version // 10000}.{version // 100 % 100}.{version % 100}; this tool "
            f"reads traces of DFTracer {' and '.join(f'{v}.x' for v in READ_VERSIONS)}"
        )


def _operation(name: str) -> str:
    if name in posix.READS:
        return "read"
    if name in posix.WRITES:
        return "write"
    if name in posix.OPENS:
        return "open"
    if name in posix.CLOSES:
        return "close"
    if name in posix.SEEKS:
        return "seek"
    if name in posix.SYNCS:
        return "sync"
    return "meta"


def _columns(calls: list, names: dict, where: Path) -> dict:
    """The operations table's columns (``table``'s form), in time order, of the calls on a file; offsets of
    reads and writes without their own (``read``, ``write``) followed per process and file from its open,
    its calls and its seeks. Numbers go into arrays, names are shared: a million calls take about 60 MB."""
    from array import array

    out = {c: (array("q") if c in INTS else array("d") if c.endswith("_s") else []) for c in COLUMNS}
    position: dict = {}
    calls.sort(key=lambda c: _ts(where, c[3]))
    unnamed = misnamed = 0
    opened: dict = {}  # (pid, path) -> descriptors open (posix.reused_descriptor)
    for name, pid, tid, ts, dur, fhash, fname, ret, items, at, whence in calls:
        path = names.get(fhash) or fname
        if not path:
            unnamed += 1
            continue
        key = (pid, path)
        if posix.reused_descriptor(name, key, opened):
            misnamed += 1
            continue
        op = _operation(name)
        offset, size = None, None
        if op == "open":
            position[key] = 0
        elif op == "seek":
            at_now = _seek(name, ret, at, whence, position.get(key))
            position[key] = at_now if at_now is None or at_now >= 0 else None  # a failed seek: unknown
        elif op in ("read", "write"):
            size = max(int(ret), 0) * int(items or 1) if isinstance(ret, int) else 0  # fread/fwrite: items
            # pread, pwrite: their own offset (a negative one failed), the position kept
            if isinstance(at, int):
                offset = at if at >= 0 else None
            else:
                offset = position.get(key)
                position[key] = None if offset is None else offset + size
        out["file"].append(path)
        out["rank"].append(_int(where, "pid", pid))
        out["thread"].append(_int(where, "tid", tid))
        out["operation"].append(op)
        out["offset"].append(_int(where, "offset", offset))
        out["size"].append(_int(where, "size", size))
        out["start_s"].append(_ts(where, ts) / 1e6)
        out["duration_s"].append(_ts(where, dur) / 1e6)
    return {**out, "unnamed": unnamed, "misnamed": misnamed}


def _int(where: Path, what: str, v) -> int:
    """A call's integer field, NA for none; TraceError for one that is not a number a call can have."""
    if v is None:
        return NA
    if isinstance(v, bool) or not isinstance(v, int) or not -BOUND < v < BOUND:
        raise TraceError(
            f"{where}: a call's {what} is {str(v)[:40]!r}: not one a call can have (a damaged trace)"
        )
    return v


def _ts(where: Path, v) -> int:
    """A call's time or duration in µs (0 when it has none)."""
    return 0 if v is None else _int(where, "ts or dur", v)


def _seek(name: str, ret, offset, whence, now: int | None) -> int | None:
    if name.startswith("lseek") and isinstance(ret, int) and ret >= 0:  # lseek returns the new position
        return ret
    if not isinstance(offset, int):
        return None
    if whence == SEEK_SET:
        return offset
    if whence == SEEK_CUR and now is not None:
        return now + offset
    return None


_CALL_NAMES = {"open": "open64", "read": "pread64", "write": "pwrite64", "close": "close", "sync": "fsync"}


def events(t: Trace):
    """The trace's calls as DFTracer events (current layout: integer ``ph``, file names as hashes resolved by
    ``FH`` metadata events), so that DFTracer's analyzer, ``python -m analysis.perfetto`` and this module
    read a Darshan log's DXT segments as they read a DFTracer trace. Reads and writes become ``pread64`` and
    ``pwrite64`` with their offset, count and returned bytes; seeks and metadata calls are left out (their
    arguments are not in the table). Times are µs since the trace's first call."""
    import hashlib

    import pandas as pd

    def number(v, default: int) -> int:
        return default if pd.isna(v) else int(v)

    hashes: dict[str, str] = {}
    for n, row in enumerate(t.operations.itertuples(index=False), 1):
        name = _CALL_NAMES.get(str(row.operation))
        if name is None:
            continue
        pid = max(number(row.rank, 0), 0)
        fhash = hashes.get(row.file)
        if fhash is None:
            fhash = hashes[row.file] = hashlib.sha256(row.file.encode()).hexdigest()[:16]
            meta = {"name": row.file, "value": fhash}
            yield {"name": "FH", "cat": "dftracer", "pid": pid, "tid": pid, "ph": METADATA, "args": meta}
        args: dict = {"fhash": fhash}
        if name in ("pread64", "pwrite64"):
            size = number(row.size, 0)
            args.update(offset=number(row.offset, 0), count=size, ret=size)
        yield {
            "id": n,
            "name": name,
            "cat": "POSIX",
            "pid": pid,
            "tid": number(row.thread, pid),
            "ts": int(round(row.start_s * 1e6)),
            "dur": int(round(row.duration_s * 1e6)),
            "ph": CALL,
            "args": args,
        }


def write(t: Trace, f) -> int:
    """Write ``events(t)`` to the text file object ``f``, one JSON event per line; the events written."""
    n = 0
    for e in events(t):
        f.write(json.dumps(e, separators=(",", ":")) + "\n")
        n += 1
    return n
