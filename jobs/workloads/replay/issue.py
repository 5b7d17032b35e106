"""One replay run: the trace's calls issued again, in their order, sizes and offsets, by threads.

Each thread takes whole streams of calls: with ``replay.concurrency`` null, one thread per process and
thread of the trace (its calls in their recorded order); with a number N, the files are dealt to N threads
in the order of their first call, each file's calls staying in their order on one thread. Reads are
``pread`` on the made file at the recorded offset and size (a read that found the end of a file finds it
again: the made file ends where the trace's did); writes are ``pwrite`` into the run's own folder; opens and
closes open and close; ``fsync`` syncs a written file. Seeks and metadata calls are counted, not issued:
offsets are explicit. ``mode=recorded`` waits, before each call, until its recorded time since the trace's
first call (the think time kept); ``fast`` issues each thread's calls back to back.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

OPEN, READ, WRITE, CLOSE, SYNC, SKIP = range(6)
_CODES = {"open": OPEN, "read": READ, "write": WRITE, "close": CLOSE, "sync": SYNC}


class ReplayFailed(RuntimeError):
    """A call of the replay failed; the message names the call and the file."""


@dataclass
class Plan:
    """Per thread, its calls as (code, file index, offset or -1, size, start s); and the files by index."""

    threads: list[list[tuple]]
    paths: list[str]  # the made (read) or written file of each index
    written: list[bool]  # whether the index is a file only the run makes (the trace wrote, never read it)
    writable: list[bool]  # whether the trace writes the file at all (opened for writing)
    skipped: int = 0  # seeks, metadata calls and calls on files never read or written: counted, not issued
    recorded_s: float = 0.0  # the trace's span: first call's start to the last call's end
    distinct_read: int = 0  # bytes of the made files the reads cover, each byte once (a cold run's least)


def plan(ops, made: dict[str, str], out_dir: str, concurrency: int | None, names: dict[str, str]) -> Plan:
    """The calls of the operations table ``ops`` dealt to threads (see the module's note)."""
    index: dict[str, int] = {}
    paths, written = [], []
    for p in dict.fromkeys(ops["file"]):
        if p not in names:  # opened, never read or written (or its reads lost): nothing to make or open
            continue
        index[p] = len(paths)
        paths.append(made.get(p) or os.path.join(out_dir, names[p]))
        written.append(p not in made)
    codes = ops["operation"].astype(str).map(lambda o: _CODES.get(o, SKIP)).to_numpy().copy()
    files = ops["file"].map(index).fillna(-1).astype("int64").to_numpy()
    codes[files < 0] = SKIP
    offsets = ops["offset"].fillna(-1).astype("int64").to_numpy()
    sizes = ops["size"].fillna(0).astype("int64").to_numpy()
    starts = ops["start_s"].to_numpy(dtype="float64")
    streams = list(zip(ops["rank"].fillna(-1).astype("int64"), ops["thread"].fillna(-1).astype("int64")))
    if concurrency is None:
        keys = {s: k for k, s in enumerate(dict.fromkeys(streams))}
        owner = [keys[s] for s in streams]
        n = len(keys)
    else:
        n = concurrency
        owner = [max(files[i], 0) % n for i in range(len(files))]  # files in order of first use, dealt round
    writes = set(ops.loc[ops["operation"] == "write", "file"])
    writable = [p in writes for p in index]
    threads: list[list[tuple]] = [[] for _ in range(n)]
    skipped = 0
    for i in range(len(codes)):
        if codes[i] == SKIP:
            skipped += 1
            continue
        threads[owner[i]].append(
            (int(codes[i]), int(files[i]), int(offsets[i]), int(sizes[i]), float(starts[i]))
        )
    end = float((ops["start_s"] + ops["duration_s"]).max()) if len(ops) else 0.0
    made_reads = ops[(ops["operation"] == "read") & ops["file"].isin(made.keys())]
    return Plan([t for t in threads if t], paths, written, writable, skipped, end, distinct(made_reads))


def distinct(reads) -> int:
    """Bytes the reads cover, each byte of each file once: the union of their (offset, size) ranges per file
    (a read without an offset counts whole)."""
    placed = reads.dropna(subset=["offset"])
    total = int(reads.loc[reads["offset"].isna(), "size"].sum())
    placed = placed.sort_values(["file", "offset"], kind="stable")
    last_file, reach = None, 0
    for f, off, size in zip(placed["file"], placed["offset"].astype("int64"), placed["size"].astype("int64")):
        end = off + size
        if f != last_file:
            last_file, reach = f, 0
        if end > reach:
            total += end - max(off, reach)
            reach = end
    return total


@dataclass
class Tally:
    calls: int = 0
    reads: int = 0
    bytes_read: int = 0
    writes: int = 0
    bytes_written: int = 0
    errors: list = field(default_factory=list)


def run(p: Plan, recorded: bool, stop: threading.Event) -> tuple[Tally, float]:
    """Issue the plan's calls on its threads; (what they did, seconds from the first call to the last)."""
    tallies = [Tally() for _ in p.threads]
    ready = threading.Barrier(len(p.threads) + 1)
    t0 = [0.0]
    workers = [
        threading.Thread(target=_thread, args=(p, calls, tallies[k], recorded, stop, ready, t0), daemon=True)
        for k, calls in enumerate(p.threads)
    ]
    for w in workers:
        w.start()
    t0[0] = time.perf_counter()
    ready.wait()
    try:
        for w in workers:
            while w.is_alive():
                w.join(0.1)  # the main thread stays where a signal's handler can run
    except BaseException:
        stop.set()
        for w in workers:
            w.join()
        raise
    seconds = time.perf_counter() - t0[0]
    total = Tally()
    for t in tallies:
        for k in ("calls", "reads", "bytes_read", "writes", "bytes_written"):
            setattr(total, k, getattr(total, k) + getattr(t, k))
        total.errors += t.errors
    if total.errors:
        raise ReplayFailed(total.errors[0])
    return total, seconds


def _thread(p: Plan, calls: list, tally: Tally, recorded: bool, stop, ready, t0) -> None:
    fds: dict[int, int] = {}
    buf = bytearray()
    ready.wait()
    try:
        for code, f, offset, size, start in calls:
            if stop.is_set():
                return
            if recorded:
                wait = t0[0] + start - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            if code == READ:
                fd = fds.get(f) or _open(p, f, fds)
                got = os.pread(fd, size, offset) if offset >= 0 else os.read(fd, size)
                tally.reads += 1
                tally.bytes_read += len(got)
            elif code == WRITE:
                fd = fds.get(f) or _open(p, f, fds)
                if len(buf) < size:
                    buf = bytearray(os.urandom(size))
                view = memoryview(buf)[:size]
                put = os.pwrite(fd, view, offset) if offset >= 0 else os.write(fd, view)
                tally.writes += 1
                tally.bytes_written += put
            elif code == OPEN:
                if f in fds:
                    os.close(fds.pop(f))
                _open(p, f, fds)
            elif code == CLOSE:
                if f in fds:
                    os.close(fds.pop(f))
            elif code == SYNC and f in fds and p.writable[f]:
                os.fsync(fds[f])
            tally.calls += 1
    except OSError as e:
        tally.errors.append(f"{p.paths[f]}: {e.strerror or e} (a replayed {_NAMES[code]} call)")
        stop.set()
    finally:
        for fd in fds.values():
            os.close(fd)


_NAMES = {OPEN: "open", READ: "read", WRITE: "write", CLOSE: "close", SYNC: "fsync"}


def _open(p: Plan, f: int, fds: dict) -> int:
    flags = os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= (os.O_RDWR | (os.O_CREAT if p.written[f] else 0)) if p.writable[f] else os.O_RDONLY
    fds[f] = os.open(p.paths[f], flags, 0o644)
    return fds[f]
