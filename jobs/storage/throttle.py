"""The throttle behind an emulated tier: a cgroup the tool creates, owns and removes, limiting one
device's read and write bandwidth and request rates. One contract, the two interfaces kernels have:

  blkio-v1   <blkio mount>/<group>/blkio.throttle.{read,write}_{bps,iops}_device  "MAJ:MIN N"
  io.max-v2  <cgroup2 mount>/<group>/io.max  "MAJ:MIN rbps=N wbps=N riops=N|max wiops=N|max"

Both limit the same I/O (docs/storage.md, emulated tiers): O_DIRECT and cold buffered reads, O_DIRECT
writes and the write-back fsync forces; not page-cache hits, not buffered writes themselves.
A process joins a group for the measured runs and leaves it after: on v1 for the hierarchy's root,
on v2 for the cgroup it came from (the unified hierarchy has one group per process, so a process
that leaves goes home, e.g. to its Slurm step's cgroup). v2 groups sit at the top of the hierarchy,
the one place a process may live beside a controller enabled for children.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from jobs.storage import mounts

PREFIX = "iocampaign-"  # every group this tool makes is named so, and only those are removed
BLKIO = Path("/sys/fs/cgroup/blkio")


@dataclass(frozen=True)
class Limits:
    dev: str  # MAJ:MIN
    read_bps: int
    write_bps: int
    read_iops: int = 0  # 0: no limit
    write_iops: int = 0


class Controller:
    """A cgroup hierarchy that can throttle a block device; ``root`` is its mount point."""

    name = ""

    def __init__(self, root: Path):
        self.root = Path(root)

    def available(self) -> str | None:
        raise NotImplementedError

    def limit(self, group: Path, lim: Limits) -> None:
        raise NotImplementedError

    def limits(self, group: Path) -> dict[str, dict[str, int]]:
        """What ``group`` limits, per device, as the kernel shows it: {"7:3": {"rbps": N, ...}}."""
        raise NotImplementedError

    def group(self, name: str) -> Path:
        """The group ``iocampaign-<name>``, made when missing."""
        g = self.root / f"{PREFIX}{name}"
        g.mkdir(exist_ok=True)
        return g

    def groups(self, pattern: str = "*") -> list[Path]:
        return sorted(self.root.glob(f"{PREFIX}{pattern}"))

    def join(self, group: Path, pid: int | None = None) -> None:
        """Move process ``pid`` (all its threads, and the children it starts later) into ``group``."""
        pid = pid or os.getpid()
        _HOME.setdefault(pid, self.home(pid))
        (group / "cgroup.procs").write_text(str(pid))

    def home(self, pid: int) -> Path:
        """Where ``pid`` goes back to when it leaves: the hierarchy's root."""
        return self.root

    def leave(self, pid: int | None = None) -> None:
        pid = pid or os.getpid()
        home = _HOME.pop(pid, None)
        if home is None or not home.is_dir() or home.name.startswith(PREFIX):
            home = self.root
        (home / "cgroup.procs").write_text(str(pid))

    def remove(self, group: Path, tries: int = 50) -> bool:
        """Move what is left in ``group`` (a killed run's survivors) to the root and remove the group;
        True when it is gone. Only groups named ``iocampaign-*`` are touched."""
        if not group.name.startswith(PREFIX) or not group.exists():
            return not group.exists()
        try:
            pids = (group / "cgroup.procs").read_text().split()
        except OSError:
            pids = []
        for pid in pids:
            try:
                (self.root / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        for _ in range(tries):
            try:
                group.rmdir()
                return True
            except OSError:
                time.sleep(0.1)
        return False


_HOME: dict[int, Path] = {}  # the cgroup each joined process came from


class BlkioV1(Controller):
    name = "blkio-v1"

    def available(self) -> str | None:
        if not (self.root / "blkio.throttle.read_bps_device").exists():
            return f"the cgroup-v1 blkio controller is not mounted at {self.root}"
        return None

    def limit(self, group: Path, lim: Limits) -> None:
        (group / "blkio.throttle.read_bps_device").write_text(f"{lim.dev} {lim.read_bps}")
        (group / "blkio.throttle.write_bps_device").write_text(f"{lim.dev} {lim.write_bps}")
        if lim.read_iops:
            (group / "blkio.throttle.read_iops_device").write_text(f"{lim.dev} {lim.read_iops}")
        if lim.write_iops:
            (group / "blkio.throttle.write_iops_device").write_text(f"{lim.dev} {lim.write_iops}")

    def limits(self, group: Path) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for key, file in (
            ("rbps", "read_bps"),
            ("wbps", "write_bps"),
            ("riops", "read_iops"),
            ("wiops", "write_iops"),
        ):
            path = group / f"blkio.throttle.{file}_device"
            for line in path.read_text().splitlines() if path.exists() else []:
                dev, value = line.split()
                out.setdefault(dev, {})[key] = int(value)
        return out


class IoMaxV2(Controller):
    name = "io.max-v2"

    def available(self) -> str | None:
        try:
            controllers = (self.root / "cgroup.controllers").read_text().split()
        except OSError:
            return f"no cgroup-v2 hierarchy is mounted at {self.root}"
        if "io" not in controllers:
            return (
                f"the cgroup-v2 hierarchy at {self.root} has no io controller (it offers "
                f"{' '.join(controllers) or 'none'}; io is bound to cgroup v1 here)"
            )
        if "io" not in (self.root / "cgroup.subtree_control").read_text().split():
            return (
                f"the io controller of the cgroup-v2 hierarchy at {self.root} "
                f"is not enabled for child cgroups; as root: echo +io > {self.root}/cgroup.subtree_control"
            )
        return None

    def limit(self, group: Path, lim: Limits) -> None:
        (group / "io.max").write_text(
            f"{lim.dev} rbps={lim.read_bps} wbps={lim.write_bps} riops={lim.read_iops or 'max'} "
            f"wiops={lim.write_iops or 'max'}\n"
        )

    def limits(self, group: Path) -> dict[str, dict[str, int]]:
        """io.max read back; a device line lists only the keys that are limited (``max`` is none)."""
        out: dict[str, dict[str, int]] = {}
        path = group / "io.max"
        for line in path.read_text().splitlines() if path.exists() else []:
            dev, *pairs = line.split()
            out[dev] = {k: int(v) for k, v in (p.split("=", 1) for p in pairs) if v != "max"}
        return out

    def home(self, pid: int) -> Path:
        """The cgroup ``pid`` is in now (``0::/path`` of /proc/<pid>/cgroup), under this hierarchy."""
        try:
            for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                if line.startswith("0::"):
                    return self.root / line[3:].strip().lstrip("/")
        except OSError:
            pass
        return self.root


def v2_root() -> Path:
    """Where the unified (cgroup v2) hierarchy is mounted: /sys/fs/cgroup on most machines,
    /sys/fs/cgroup/unified on a hybrid one."""
    for point, fs_type, _ in mounts.mounts():
        if fs_type == "cgroup2":
            return Path(point)
    return Path("/sys/fs/cgroup")


def controllers() -> list[Controller]:
    """The candidates, in the order they are tried: v1's blkio where it is mounted, then v2's io."""
    return [BlkioV1(BLKIO), IoMaxV2(v2_root())]


def current() -> tuple[Controller | None, str | None]:
    """The controller that throttles here, or None and why none can."""
    reasons = []
    for c in controllers():
        why = c.available()
        if why is None:
            return c, None
        reasons.append(why)
    return None, "; ".join(reasons)


def by_name(name: str) -> Controller:
    """The controller a tier was built with (its record's ``throttle``)."""
    for c in controllers():
        if c.name == name:
            return c
    raise ValueError(f"unknown throttle {name!r}")
