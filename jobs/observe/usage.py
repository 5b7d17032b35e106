"""What a run used while it ran: the process's CPU time and the data device's busy time, read from
the kernel's counters at the start and the end of the run (``getrusage``, ``/proc/diskstats``).

The analysis turns this evidence into the ``bound`` label of a run (``analysis.tables.bounds``); the
record keeps the evidence itself, so thresholds can change without measuring again.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

from jobs import lifeline
from jobs.storage.modeled import mount as modeled

DISKSTATS = Path("/proc/diskstats")
SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own sector size
HZ = os.sysconf("SC_CLK_TCK")  # /proc/stat's ticks per second


@dataclass(frozen=True)
class Snapshot:
    t: float  # perf_counter, s
    cpu_s: float  # user + system time of this process (all its threads) and its waited-for children, s
    disk: tuple[int, int, int, int] | None  # reads completed, sectors read, ms doing I/O, weighted ms
    machine: tuple[int, int] | None  # the machine's CPU ticks: (busy, total), every process's, /proc/stat
    # a modelled device's (requests submitted, sum of the requests in flight at each submission)
    in_flight: tuple[int, int] | None = None
    helpers: tuple[tuple[int, float], ...] = ()  # (pid, CPU s) of each of HELPERS, now


def cores() -> int:
    """CPUs this process may run on (its affinity mask, lowered by a cgroup-v2 cpu.max quota)."""
    n = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            n = max(1, min(n, round(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return n


def _disk(name: str | None, model: dict | None = None) -> tuple[int, int, int, int] | None:
    """The device's (reads, sectors read, ms busy, weighted ms); a modelled one's from its counters
    (``model``, read here when not given)."""
    if not name:
        return None
    if name.startswith(modeled.PREFIX):  # the modelled drive's own counters, in diskstats's units
        model = model if model is not None else modeled.counters(name)
        return (
            None
            if model is None
            else (
                model["reads"],
                model["read_bytes"] // SECTOR,
                round(model["busy_s"] * 1000),
                round(model["weighted_s"] * 1000),
            )
        )
    try:
        for line in DISKSTATS.read_text().splitlines():
            f = line.split()
            if len(f) >= 14 and f[2] == name:
                return int(f[3]), int(f[5]), int(f[12]), int(f[13])
    except OSError:
        return None
    return None


def _machine() -> tuple[int, int] | None:
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = f[3] + (f[4] if len(f) > 4 else 0)  # idle + iowait
    return sum(f[:8]) - idle, sum(f[:8])


def _helpers() -> tuple[tuple[int, float], ...]:
    """(pid, user + system CPU s, its waited-for children's included) of each of ``HELPERS`` alive."""
    out = []
    for pid in sorted(lifeline.HELPERS):
        try:  # after the command's ")": state is field 3, utime 14, stime 15, cutime 16, cstime 17
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out.append((pid, sum(int(x) for x in f[11:15]) / HZ))
        except (OSError, ValueError, IndexError):
            continue
    return tuple(out)


def snapshot(disk: str | None) -> Snapshot:
    """The counters now; ``disk``: the data device's name in /proc/diskstats (None: no device)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    model = modeled.counters(disk) if disk and disk.startswith(modeled.PREFIX) else None
    in_flight = (
        (model["reads"] + model["writes"], model["in_flight_at_submit"])
        if model and "in_flight_at_submit" in model
        else None
    )
    return Snapshot(time.perf_counter(), cpu, _disk(disk, model), _machine(), in_flight, _helpers())


def other_share(a: Snapshot, b: Snapshot, own_extra_s: float = 0.0) -> float | None:
    """The share of all the machine's CPU time between ``a`` and ``b`` that other processes took: the
    machine's busy time less this process's, its waited-for children's, its ``HELPERS``' (s3fs, the
    tf.data service) and ``own_extra_s`` (CPU seconds of the embedded S3 server). It is what a run's rate
    cannot be blamed on: a client starved of cores by others reads slower whatever the storage."""
    if a.machine is None or b.machine is None or b.machine[1] <= a.machine[1]:
        return None
    busy_s = (b.machine[0] - a.machine[0]) / HZ
    all_s = (b.machine[1] - a.machine[1]) / HZ
    before = dict(a.helpers)
    helpers_s = sum(max(0.0, cpu - before[pid]) for pid, cpu in b.helpers if pid in before)
    return min(1.0, max(0.0, (busy_s - (b.cpu_s - a.cpu_s) - helpers_s - own_extra_s) / all_s))


def between(
    a: Snapshot, b: Snapshot, parallelism: int | None = None, nodes: int = 1, own_extra_s: float = 0.0
) -> dict:
    """The run's usage from two snapshots: CPU seconds, cores kept busy, the share of the cores the run
    could use (``min(cores, parallelism)`` on each of ``nodes`` nodes like this one), and the device's
    busy fraction, mean queue depth (a modelled device's also as it saw each request arrive), read rate
    and read requests per second (None without a device); the share of the machine's CPU other processes
    took (``other_share``)."""
    wall = max(b.t - a.t, 1e-9)
    usable = (min(cores(), parallelism) if parallelism else cores()) * max(1, nodes)
    busy = (b.cpu_s - a.cpu_s) / wall
    out = {
        "wall_s": wall,
        "cpu_s": b.cpu_s - a.cpu_s,
        "cpu_cores_busy": busy,
        "cpu_cores_usable": usable,
        "cpu_share": busy / usable,
        "device_busy": None,
        "device_queue_depth": None,
        "device_requests_in_flight": None,
        "device_read_mb_s": None,
        "device_read_iops": None,
        "machine_cpu_busy": None,
        "other_cpu_share": other_share(a, b, own_extra_s),
    }
    if a.machine is not None and b.machine is not None and b.machine[1] > a.machine[1]:
        out["machine_cpu_busy"] = (b.machine[0] - a.machine[0]) / (b.machine[1] - a.machine[1])
    if a.in_flight is not None and b.in_flight is not None and b.in_flight[0] > a.in_flight[0]:
        submitted, summed = (y - x for x, y in zip(a.in_flight, b.in_flight))
        out["device_requests_in_flight"] = summed / submitted
    if a.disk is not None and b.disk is not None:
        reads, sectors, ticks, weighted = (y - x for x, y in zip(a.disk, b.disk))
        out.update(
            device_busy=min(1.0, ticks / 1000 / wall),
            device_queue_depth=weighted / 1000 / wall,
            device_read_mb_s=sectors * SECTOR / 1e6 / wall,
            device_read_iops=reads / wall,
        )
    return out
