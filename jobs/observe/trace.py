"""System I/O trace of a run, as the paper took with dstat: device read/write bytes per interval.

A background thread samples ``psutil.disk_io_counters(perdisk=True)`` for the device that holds the
data (dstat itself crashes writing CSV on these machines). Counters are system-wide: other
processes' I/O on the same device shows too, as it did in the paper's dstat traces.
"""

from __future__ import annotations

import csv
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from jobs.storage.modeled import mount as modeled

FIRST = "first_iterator_call"
LAST = "last_iterator_call"
COLUMNS = ("t_s", "dt_s", "read_bytes", "write_bytes", "read_mb_s", "write_mb_s", "event")


def disk_name(dev: str) -> str | None:
    """psutil's name of the block device MAJ:MIN (``vda``, ``sda1``, ``loop3``); None if not a block
    device."""
    try:
        return os.path.basename(os.path.realpath(f"/sys/dev/block/{dev}"))
    except OSError:
        return None


def device_of(path: str) -> str | None:
    """psutil's disk name for the file system holding ``path``, ``modeled:<mount>`` on a modelled tier
    (its layer counts what the modelled drive served), or None (tmpfs, network file systems)."""
    import psutil

    point = modeled.mounted_tier(path)
    if point is not None:
        return modeled.PREFIX + point

    st = os.stat(path)
    name = disk_name(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}") if os.major(st.st_dev) else None
    return name if name and name in psutil.disk_io_counters(perdisk=True) else None


def device_bytes(disk: str | None) -> tuple[int, int]:
    """(read, written) bytes of device ``disk`` so far: a block device's (psutil), a modelled tier's
    (what its drive served), or every disk's together (None)."""
    import psutil

    if disk is not None and disk.startswith(modeled.PREFIX):
        c = modeled.counters(disk) or {}
        return c.get("read_bytes", 0), c.get("write_bytes", 0)
    counters = psutil.disk_io_counters(perdisk=True)
    if disk is None:
        return sum(c.read_bytes for c in counters.values()), sum(c.write_bytes for c in counters.values())
    c = counters[disk]
    return c.read_bytes, c.write_bytes


@dataclass
class Tracer:
    """Samples a device's counters every ``interval`` seconds until stopped; events mark moments."""

    disk: str | None  # psutil disk name; None traces the sum of all disks
    interval: float = 1.0
    samples: list[tuple[float, float, int, int]] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _t0: float = 0.0

    def _read(self) -> tuple[int, int]:
        return device_bytes(self.disk)

    def _loop(self) -> None:
        prev_t, (prev_r, prev_w) = time.perf_counter(), self._read()
        while not self._stop.wait(max(0.0, self.interval - (time.perf_counter() - prev_t))):
            now, (r, w) = time.perf_counter(), self._read()
            self.samples.append((now - self._t0, now - prev_t, r - prev_r, w - prev_w))
            prev_t, prev_r, prev_w = now, r, w
        now, (r, w) = time.perf_counter(), self._read()
        if now - prev_t > 1e-3:
            self.samples.append((now - self._t0, now - prev_t, r - prev_r, w - prev_w))

    def start(self) -> Tracer:
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, name="io-trace", daemon=True)
        self._thread.start()
        return self

    def mark(self, event: str, at: float | None = None) -> None:
        """Mark ``event`` at perf_counter time ``at`` (now if None)."""
        self.events.append(((time.perf_counter() if at is None else at) - self._t0, event))

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def write(self, path: Path) -> Path:
        """Samples (one row per interval, ``t_s`` at its end) and events (rows with ``event``) as CSV."""
        rows = [
            (round(t, 4), round(dt, 4), r, w, round(r / dt / 1e6, 3), round(w / dt / 1e6, 3), "")
            for t, dt, r, w in self.samples
        ]
        rows += [(round(t, 4), "", "", "", "", "", e) for t, e in self.events]
        rows.sort(key=lambda r: r[0])
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(COLUMNS)
            w.writerows(rows)
        return path
