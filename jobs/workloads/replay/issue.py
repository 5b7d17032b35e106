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
    """Per thread, its calls as (code, file index, offset or -1, size, start s); and the files by index: the
    made file its reads read (None: the trace never read it), and the run's own file its writes write (None:
    the trace never wrote it). Writes never go into a made file: the made set stays as it was made."""

    threads: list[list[tuple]]
    read_paths: list[str | None]
    write_paths: list[str | None]
    skipped: int = 0  # seeks, metadata calls and calls on files never read or written: counted, not issued
    recorded_s: float = 0.0  # the trace's span: first call's start to the last call's end
    distinct_read: int = 0  # bytes of the made files the reads cover, each byte once (a cold run's least)

    @property
    def writes(self) -> bool:
        return any(w is not None for w in self.write_paths)

    def name(self, f: int) -> str:
        return self.read_paths[f] or self.write_paths[f] or "?"


def plan(ops, made: dict[str, str], out_dir: str, concurrency: int | None, names: dict[str, str]) -> Plan:
    """The calls of the operations table ``ops`` dealt to threads (see the module's note)."""
    writes = set(ops.loc[ops["operation"] == "write", "file"])
    index: dict[str, int] = {}
    read_paths, write_paths = [], []
    for p in dict.fromkeys(ops["file"]):
        if p not in names:  # opened, never read or written (or its reads lost): nothing to make or open
            continue
        index[p] = len(read_paths)
        read_paths.append(made.get(p))
        write_paths.append(os.path.join(out_dir, names[p]) if p in writes else None)
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
    return Plan([t for t in threads if t], read_paths, write_paths, skipped, end, distinct(made_reads))


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
    joined(workers, stop)
    seconds = time.perf_counter() - t0[0]
    return summed(tallies), seconds


def joined(workers: list, stop: threading.Event) -> None:
    """Wait for the replay's threads, the main thread staying where a signal's handler can run; a signal
    (or any error here) stops them all before it goes on."""
    try:
        for w in workers:
            while w.is_alive():
                w.join(0.1)
    except BaseException:
        stop.set()
        for w in workers:
            w.join()
        raise


def summed(tallies: list[Tally]) -> Tally:
    """The threads' tallies added up; ReplayFailed with the first error any thread met."""
    total = Tally()
    for t in tallies:
        for k in ("calls", "reads", "bytes_read", "writes", "bytes_written"):
            setattr(total, k, getattr(total, k) + getattr(t, k))
        total.errors += t.errors
    if total.errors:
        raise ReplayFailed(total.errors[0])
    return total


CHUNK = 16 << 20  # the most bytes one pread or pwrite moves: a larger recorded call is issued in pieces


def _thread(p: Plan, calls: list, tally: Tally, recorded: bool, stop, ready, t0) -> None:
    """One thread's calls. Any error ends every thread and fails the run with one line naming the call."""
    rfds: dict[int, int] = {}
    wfds: dict[int, int] = {}
    buf = bytearray(os.urandom(min(CHUNK, max((c[3] for c in calls), default=0))))
    ready.wait()
    code, f = SKIP, 0
    try:
        for code, f, offset, size, start in calls:
            if stop.is_set():
                return
            if recorded:
                wait = t0[0] + start - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            if code == READ:
                got = _read(_fd(p, f, rfds, wfds, False), offset, size)
                tally.reads += 1
                tally.bytes_read += got
            elif code == WRITE:
                put = _write(_fd(p, f, rfds, wfds, True), offset, size, buf)
                tally.writes += 1
                tally.bytes_written += put
            elif code == OPEN:
                _close(f, rfds, wfds)
                if p.read_paths[f]:
                    _fd(p, f, rfds, wfds, False)
                if p.write_paths[f]:
                    _fd(p, f, rfds, wfds, True)
            elif code == CLOSE:
                _close(f, rfds, wfds)
            elif code == SYNC and f in wfds:
                os.fsync(wfds[f])
            tally.calls += 1
    except Exception as e:  # noqa: BLE001 - the run fails with it, named (an OSError, or memory, or the like)
        what = e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
        tally.errors.append(f"{p.name(f)}: {what} (a replayed {_NAMES.get(code, 'call')})")
        stop.set()
    finally:
        for fd in (*rfds.values(), *wfds.values()):
            os.close(fd)


_NAMES = {OPEN: "open", READ: "read", WRITE: "write", CLOSE: "close", SYNC: "fsync"}


def _read(fd: int, offset: int, size: int) -> int:
    """One recorded read (in pieces of at most CHUNK, each a ``pread`` or ``read``, the calls tracers such as
    dftracer see); the bytes it returned. A read of 0 bytes that found a file's end asks for 1 there."""
    got = 0
    while True:
        n = min(CHUNK, size - got) if size else 1
        k = len(os.pread(fd, n, offset + got) if offset >= 0 else os.read(fd, n))
        got += k
        if k == 0 or got >= size:
            return got if size else 0


def _write(fd: int, offset: int, size: int, buf: bytearray) -> int:
    """One recorded write (in pieces of at most CHUNK); the bytes written."""
    put = 0
    while put < size:
        view = memoryview(buf)[: min(len(buf), size - put)]
        put += os.pwrite(fd, view, offset + put) if offset >= 0 else os.write(fd, view)
    return put


def _fd(p: Plan, f: int, rfds: dict, wfds: dict, write: bool) -> int:
    fds = wfds if write else rfds
    if f not in fds:
        flags = os.O_NOFOLLOW | os.O_CLOEXEC
        path = p.write_paths[f] if write else p.read_paths[f]
        fds[f] = os.open(path, flags | (os.O_RDWR | os.O_CREAT if write else os.O_RDONLY), 0o644)
    return fds[f]


def _close(f: int, rfds: dict, wfds: dict) -> None:
    for fds in (rfds, wfds):
        if f in fds:
            os.close(fds.pop(f))
