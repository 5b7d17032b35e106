"""POSIX-level traces of a cell's runs (``trace.posix=true``): every open, read, write and close
TensorFlow makes on the data and checkpoint tiers, recorded by dftracer's preload library, and their
streaming analysis per run.

This module owns dftracer's trace format (gzipped JSON lines: metadata lines ``FH`` map a file
hash to its path, ``cat: POSIX`` lines are calls with ``ts``/``dur`` in µs since the epoch and
``args.ret``/``args.count``/``args.fhash``) and the per-run tables written beside it:
``posix/<run>-files.csv`` (one row per file) and ``posix/<run>-threads.csv`` (reads per thread over
time). The trace is read line by line; memory holds one row per file and a fixed number of time
bins per thread, never the events.

LD_PRELOAD only takes effect when a process starts, so a traced cell measures in a child process
started for it (``jobs.execution.traced``); the runner records each run's wall-clock window, which splits the
one trace of that process into runs.
"""

from __future__ import annotations

import bisect
import contextlib
import csv
import gzip
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SUBDIR = "posix"  # in the cell's folder: the trace and the per-run tables
LOG_STEM = "trace"  # dftracer names its file <stem>-<hash>-preload.pfw.gz
COVERAGE_MIN = 0.98  # a run whose traced reads return less than this share of its consumed bytes is marked
TIMELINE_BINS = 400  # time bins per thread and run in <run>-threads.csv
SMALL = 100  # bytes: tf-Darshan's "small read"

READS = frozenset({"read", "pread", "pread64", "readv", "preadv", "preadv2", "fread"})
WRITES = frozenset({"write", "pwrite", "pwrite64", "writev", "pwritev", "pwritev2", "fwrite"})
OPENS = frozenset({"open", "open64", "openat", "openat64", "fopen", "fopen64", "creat", "creat64"})
CLOSES = frozenset({"close", "fclose"})
SEEKS = frozenset({"lseek", "lseek64", "fseek", "fseeko"})
SYNCS = frozenset({"fsync", "fdatasync", "fflush", "sync_file_range"})
# calls that give a process a descriptor on a file, and calls made on one (not on a path: a rename or an
# unlink after the close is the same file's)
DESCRIPTOR_OPENS = OPENS | {"fdopen", "dup", "dup2", "dup3"}
ON_DESCRIPTOR = (
    READS | WRITES | CLOSES | SEEKS | SYNCS | {"ftell", "posix_fadvise", "posix_fadvise64", "mmap"}
)
STDIO_CALLS = frozenset(
    {"fopen", "fopen64", "fdopen", "fclose", "fread", "fwrite", "fseek", "ftell", "fflush"}
)
CATEGORIES = ("POSIX", "STDIO")  # TensorFlow writes checkpoints through stdio (fopen, fwrite, fclose)

# Request-size classes of reads by bytes returned: [lower, upper), a column name and a label.
SIZE_CLASSES = (
    (0, 1, "reads_eof", "0 B (end of file)"),
    (1, SMALL, "reads_lt_100B", "1–99 B"),
    (SMALL, 4096, "reads_100B_4KiB", "100 B–4 KiB"),
    (4096, 65536, "reads_4_64KiB", "4–64 KiB"),
    (65536, 1 << 20, "reads_64KiB_1MiB", "64 KiB–1 MiB"),
    (1 << 20, 1 << 62, "reads_ge_1MiB", "≥ 1 MiB"),
)
SIZE_KEYS = tuple(c[2] for c in SIZE_CLASSES)
SIZE_LABELS = dict((c[2], c[3]) for c in SIZE_CLASSES)
_EDGES = [c[0] for c in SIZE_CLASSES[1:]]

FILE_COLUMNS = (
    "path",
    "opens",
    "reads",
    "bytes_read",
    "writes",
    "bytes_written",
    "open_s",
    "first_open_s",
    "last_close_s",
    "mb_per_s",
)
THREAD_COLUMNS = ("thread", "t_s", "dt_s", "reads", "bytes_read", "read_s")


class PosixTraceError(RuntimeError):
    """Tracing was asked for and cannot be done (no dftracer, no trace written)."""


@contextlib.contextmanager
def window(job_dir: Path, tag: str, disk: str | None):
    """Around one run of the traced child: yields a dict that, after the block, holds the run's
    wall-clock window (which splits the process's one trace), the rchar of the process over it, and
    the device's MB/s every 50 ms written to ``posix/<tag>-device.csv`` (the timeline's lower panel)."""
    from jobs.data import loading
    from jobs.observe import trace

    keys: dict = {}
    tracer = trace.Tracer(disk, 0.05).start()
    t0, (_, rchar0) = int(time.time() * 1e6), loading.read_counters()
    try:
        yield keys
    finally:
        t1, (_, rchar1) = int(time.time() * 1e6), loading.read_counters()
        tracer.stop()
    (job_dir / SUBDIR).mkdir(exist_ok=True)
    keys.update(
        posix_window_us=[t0, t1],
        posix_rchar_bytes=None if rchar0 is None or rchar1 is None else rchar1 - rchar0,
        posix_device_table=str(Path(SUBDIR) / f"{tag}-device.csv"),
    )
    tracer.write(job_dir / keys["posix_device_table"])


def trace_files(trace_dir: Path) -> list[Path]:
    return sorted(trace_dir.glob(f"{LOG_STEM}-*.pfw.gz"))


@dataclass
class _File:
    path: str
    opens: int = 0
    reads: int = 0
    bytes_read: int = 0
    writes: int = 0
    bytes_written: int = 0
    open_us: int = 0  # summed open-to-close time
    first_open: int | None = None
    last_close: int | None = None
    pending: list = field(default_factory=list)  # start times of opens not yet closed


@dataclass
class RunTrace:
    """What the trace says of one run (its wall-clock window ``t0``..``t1``, µs since the epoch)."""

    t0: int
    t1: int
    calls: dict = field(default_factory=dict)  # call name -> count
    bytes_read: int = 0
    bytes_written: int = 0
    read_us: int = 0  # time inside read calls, all threads
    sizes: list = field(default_factory=lambda: [0] * len(SIZE_CLASSES))  # reads per size class
    files: dict = field(default_factory=dict)  # fhash -> _File
    threads: dict = field(default_factory=dict)  # tid -> [reads, bytes, read_us] per time bin
    misnamed: int = 0  # calls dftracer named after a closed file (reused_descriptor): left out

    @property
    def reads(self) -> int:
        return sum(self.sizes)

    def _bin(self, ts: int) -> int:
        span = max(self.t1 - self.t0, 1)
        return min(TIMELINE_BINS - 1, max(0, (ts - self.t0) * TIMELINE_BINS // span))

    def add(self, name: str, tid: int, ts: int, dur: int, args: dict, path: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        fh = args.get("fhash")
        f = self.files.get(fh)
        if f is None:
            f = self.files[fh] = _File(path)
        ret = args.get("ret")
        # fread/fwrite: items
        nbytes = max(int(ret), 0) * int(args.get("size") or 1) if isinstance(ret, int) else 0
        if name in READS:
            got = nbytes
            self.bytes_read += got
            self.read_us += dur
            self.sizes[bisect.bisect_right(_EDGES, got)] += 1
            f.reads += 1
            f.bytes_read += got
            bins = self.threads.get(tid)
            if bins is None:
                bins = self.threads[tid] = [[0, 0, 0] for _ in range(TIMELINE_BINS)]
            b = bins[self._bin(ts)]
            b[0] += 1
            b[1] += got
            b[2] += dur
        elif name in WRITES:
            put = nbytes
            self.bytes_written += put
            f.writes += 1
            f.bytes_written += put
        elif name in OPENS:
            f.opens += 1
            f.pending.append(ts)
            f.first_open = ts if f.first_open is None else min(f.first_open, ts)
        elif name in CLOSES:
            end = ts + dur
            if f.pending:
                f.open_us += end - f.pending.pop()
            f.last_close = end if f.last_close is None else max(f.last_close, end)

    def summary(self, consumed: int | None, rchar: int | None, seconds: float | None) -> dict:
        """The run's per-run keys (``posix_*``): calls, bytes, the small-read share, time in reads,
        files, and how complete the trace is: ``posix_complete`` when its reads returned at least
        COVERAGE_MIN of the bytes consumed and at most 2% of its opens lack their close (under
        concurrent calls dftracer was seen to lose a file's last events: 3 of 512 files, 4 threads)."""
        reads = self.reads
        window = seconds if seconds else max(self.t1 - self.t0, 1) / 1e6
        coverage = self.bytes_read / consumed if consumed else None
        data_files = [f for f in self.files.values() if f.reads or f.writes or f.opens]
        opens = sum(v for k, v in self.calls.items() if k in OPENS)
        unclosed = sum(len(f.pending) for f in data_files)  # opens whose close the trace does not hold
        return {
            "posix_calls": sum(self.calls.values()),
            "posix_opens": opens,
            "posix_unclosed": unclosed,
            "posix_misnamed_calls": self.misnamed,
            "posix_reads": reads,
            "posix_writes": sum(v for k, v in self.calls.items() if k in WRITES),
            "posix_bytes_read": self.bytes_read,
            "posix_bytes_written": self.bytes_written,
            "posix_eof_reads": self.sizes[0],
            "posix_small_read_share": (self.sizes[0] + self.sizes[1]) / reads if reads else None,
            "posix_mean_read_bytes": self.bytes_read / reads if reads else None,
            "posix_read_s": self.read_us / 1e6,
            "posix_reads_in_flight": self.read_us / 1e6 / window,
            "posix_files": len(data_files),
            "posix_files_reopened": sum(1 for f in data_files if f.opens > 1),
            "posix_threads": len(self.threads),
            "posix_coverage": coverage,
            "posix_rchar_share": self.bytes_read / rchar if rchar else None,
            "posix_complete": (coverage is None or coverage >= COVERAGE_MIN)
            and unclosed <= (1 - COVERAGE_MIN) * opens,
            "posix_calls_by_kind": dict(sorted(self.calls.items())),
            "posix_size_histogram": dict(zip(SIZE_KEYS, self.sizes)),
        }

    def write_files(self, path: Path) -> Path:
        with open(path, "w", newline="") as out:
            w = csv.writer(out)
            w.writerow(FILE_COLUMNS)
            for f in sorted(self.files.values(), key=lambda f: f.first_open or 0):
                open_s = f.open_us / 1e6
                w.writerow(
                    (
                        f.path,
                        f.opens,
                        f.reads,
                        f.bytes_read,
                        f.writes,
                        f.bytes_written,
                        round(open_s, 6),
                        _rel(f.first_open, self.t0),
                        _rel(f.last_close, self.t0),
                        round((f.bytes_read + f.bytes_written) / open_s / 1e6, 3) if open_s > 0 else "",
                    )
                )
        return path

    def write_threads(self, path: Path) -> Path:
        dt = max(self.t1 - self.t0, 1) / 1e6 / TIMELINE_BINS
        with open(path, "w", newline="") as out:
            w = csv.writer(out)
            w.writerow(THREAD_COLUMNS)
            for tid, bins in sorted(self.threads.items()):
                for k, (reads, nbytes, us) in enumerate(bins):
                    if reads:
                        w.writerow(
                            (tid, round((k + 0.5) * dt, 6), round(dt, 6), reads, nbytes, round(us / 1e6, 6))
                        )
        return path


def _rel(ts: int | None, t0: int) -> float | str:
    return "" if ts is None else round((ts - t0) / 1e6, 6)


def reused_descriptor(name: str, key, opened: dict) -> bool:
    """Whether dftracer pinned this call on a file it saw closed and not opened again since: the call was
    on another file, opened untraced (outside the traced folders) by another thread, that took the
    descriptor number the closed file freed (seen in the suite: the device sampler's read of /proc/diskstats
    recorded as an image's, a second end-of-file read among them). ``opened`` (``key`` -> descriptors
    not yet closed, for one process's calls in the order they ended) is the caller's."""
    if name in DESCRIPTOR_OPENS:
        opened[key] = opened.get(key, 0) + 1
        return False
    if name not in ON_DESCRIPTOR:
        return False
    if opened.get(key) == 0:
        return True
    if name in CLOSES and key in opened:
        opened[key] -= 1
    return False


def events(paths: list[Path], misnamed: Callable[[int], None] | None = None):
    """(name, tid, ts, dur, args, path) of every POSIX call on a known file, streamed from the
    traces; calls without a file (execv, waitpid) are left out, and so are the calls dftracer named after a
    file it had seen closed (``reused_descriptor``): ``misnamed(ts)`` is told of each. The file names come
    first, from every trace: a forked process (a DataLoader's worker) writes its calls to a trace of its
    own, and the names of the files it reads to its parent's."""
    names = file_names(paths)
    for p in paths:
        opened: dict = {}  # one process's trace, its calls in the order they ended
        with gzip.open(p, "rt", errors="replace") as f:
            for line in f:
                if '"POSIX"' not in line and '"STDIO"' not in line and '"FH"' not in line:
                    continue
                line = line.strip().rstrip(",")
                if not line.startswith("{"):
                    continue
                try:
                    e = json.loads(line)
                except json.JSONDecodeError:  # a process killed mid-write leaves a torn last line
                    continue
                args = e.get("args") or {}
                if e.get("cat") not in CATEGORIES:
                    continue
                path = names.get(args.get("fhash"))
                if path is None:
                    continue
                ts = int(e.get("ts", 0))
                if reused_descriptor(e["name"], args.get("fhash"), opened):
                    if misnamed is not None:
                        misnamed(ts)
                    continue
                yield e["name"], int(e.get("tid", 0)), ts, int(e.get("dur", 0)), args, path


def file_names(paths: list[Path]) -> dict[str, str]:
    """dftracer's file hash -> path, from the ``FH`` metadata lines of every trace."""
    names: dict[str, str] = {}
    for p in paths:
        with gzip.open(p, "rt", errors="replace") as f:
            for line in f:
                if '"FH"' not in line:
                    continue
                try:
                    e = json.loads(line.strip().rstrip(","))
                except json.JSONDecodeError:
                    continue
                if e.get("name") == "FH" and e.get("cat") == "dftracer":
                    args = e.get("args") or {}
                    names[args.get("value")] = args.get("name")
    return names


def split(paths: list[Path], windows: dict[str, tuple[int, int]]) -> dict[str, RunTrace]:
    """One pass over the traces: each call goes to the run whose window holds its start."""
    runs = {tag: RunTrace(int(t0), int(t1)) for tag, (t0, t1) in windows.items()}
    order = sorted(runs.items(), key=lambda kv: kv[1].t0)
    starts = [r.t0 for _, r in order]

    def run_at(ts: int) -> RunTrace | None:
        k = bisect.bisect_right(starts, ts) - 1
        return order[k][1] if k >= 0 and ts <= order[k][1].t1 else None

    def misnamed(ts: int) -> None:
        run = run_at(ts)
        if run is not None:
            run.misnamed += 1

    for name, tid, ts, dur, args, path in events(paths, misnamed):
        run = run_at(ts)
        if run is not None:
            run.add(name, tid, ts, dur, args, path)
    return runs


def attach(runs: list[dict], trace_dir: Path, job_dir: Path) -> list[dict]:
    """Add each run's ``posix_*`` keys and write its per-file and per-thread tables; a run whose
    trace misses more than 2% of its consumed bytes gets ``posix_complete: false``."""
    files = trace_files(trace_dir)
    if not files:
        raise PosixTraceError(
            f"trace.posix=true: dftracer wrote no trace into {trace_dir} (was the preload library "
            "loaded? see the cell's log)"
        )
    windows = {_tag(r): tuple(r["posix_window_us"]) for r in runs}
    traced = split(files, windows)
    for r in runs:
        tag = _tag(r)
        t = traced[tag]
        r.update(
            t.summary(
                r.get("bytes_consumed"), r.get("posix_rchar_bytes"), r.get("seconds") or r.get("runtime_s")
            )
        )
        r["posix_trace"] = (
            os.path.relpath(files[0], job_dir)
            if len(files) == 1
            else [os.path.relpath(f, job_dir) for f in files]
        )
        r["posix_files_table"] = os.path.relpath(t.write_files(trace_dir / f"{tag}-files.csv"), job_dir)
        r["posix_threads_table"] = os.path.relpath(t.write_threads(trace_dir / f"{tag}-threads.csv"), job_dir)
    return runs


def _tag(run: dict) -> str:
    n = int(run["run"])
    return f"run{n}" if n > 0 else f"warmup{1 - n}"
