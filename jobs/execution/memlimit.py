"""A memory limit on a cell's runs (``platform.memory_limit_gb``): a cgroup the tool makes, owns and
removes, which the cell's process joins for its runs (the tasks, workers and warm children it starts join
with it). What the runs allocate from then on and the page cache of what they read are charged to it; the
kernel reclaims the cache beyond the limit, so a dataset larger than the limit cannot be served from
memory on a second pass, as MLPerf Storage's rule of five times the clients' memory intends on a machine
with more. One contract, the two interfaces kernels have:

  memory-v1  <memory mount>/<the process's group>/iocampaign-mem-<pid>/memory.limit_in_bytes
  memory-v2  <cgroup2 mount>/iocampaign-mem-<pid>/memory.max, or the tool's throttle group the process is
             already in (a process sits in one v2 group: an emulated tier's)

What was there before the process joined stays charged where it was (the interpreter, TensorFlow's
import): the limit bounds what the runs add. The record keeps the limit, the group's peak and how many
processes the kernel's OOM killer ended in it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from jobs import lifeline
from jobs.execution import warm
from jobs.storage import mounts, throttle

PREFIX = f"{throttle.PREFIX}mem-"  # every group this module makes is named so, and only those are removed
SETTING = "platform.memory_limit_gb"
CONTROLLER = "memory"  # the kernel's memory controller: a v1 hierarchy's option, a v2 subtree control
PAGE = os.sysconf("SC_PAGE_SIZE")


class MemoryLimitError(RuntimeError):
    """The limit cannot be set on this machine; the message names the setting and why."""


@dataclass(frozen=True)
class Group:
    """Where a limit is set: its folder, the controller's name, and what to restore after (v2: the
    tool's throttle group's own ``memory.max``; None: the group is this module's, removed after)."""

    path: Path
    controller: str
    home: Path
    restore: str | None = None

    @property
    def limit_file(self) -> Path:
        return self.path / ("memory.limit_in_bytes" if self.controller == "memory-v1" else "memory.max")


def _v1_mount() -> Path | None:
    for e in mounts.table():
        if e.fs_type == "cgroup" and CONTROLLER in e.options.split(","):
            return Path(e.point)
    return None


def _v1_home() -> Path | None:
    mount = _v1_mount()
    if mount is None:
        return None
    for controllers, path in warm.cgroups().items():
        if CONTROLLER in controllers.split(","):
            return mount / path.lstrip("/")
    return mount


def available() -> str | None:
    """None when a limit can be set here; else why not, in one sentence."""
    home = _v1_home()
    if home is not None:
        if not (home / "memory.limit_in_bytes").exists():
            return f"the cgroup-v1 memory controller at {home} has no memory.limit_in_bytes"
        return None if os.access(home, os.W_OK) else f"{home} is not writable (root can set a memory limit)"
    root = throttle.v2_root()
    try:
        enabled = (root / "cgroup.subtree_control").read_text().split()
    except OSError:
        return "no cgroup memory controller is mounted (neither v1's memory nor a cgroup-v2 hierarchy)"
    if CONTROLLER not in enabled:
        return (
            f"the memory controller of the cgroup-v2 hierarchy at {root} is not enabled for child cgroups; "
            f"as root: echo +memory > {root}/cgroup.subtree_control"
        )
    return None


def _make(limit: int) -> Group:
    why = available()
    if why is not None:
        raise MemoryLimitError(f"{SETTING}: {why}")
    home = _v1_home()
    if home is not None:
        _sweep(home)
        group = home / f"{PREFIX}{os.getpid()}"
        group.mkdir(exist_ok=True)
        g = Group(group, "memory-v1", home)
        g.limit_file.write_text(str(limit))
        return g
    root = throttle.v2_root()
    current = root / warm.cgroups().get("", "/").lstrip("/")
    if current.name.startswith(throttle.PREFIX) and current.parent == root:  # an emulated tier's group
        g = Group(current, "memory-v2", current, restore=(current / "memory.max").read_text().strip())
        g.limit_file.write_text(str(limit))
        return g
    _sweep(root)
    group = root / f"{PREFIX}{os.getpid()}"
    group.mkdir(exist_ok=True)
    g = Group(group, "memory-v2", current)
    g.limit_file.write_text(str(limit))
    return g


def _sweep(parent: Path) -> None:
    """Remove the groups a killed cell left in ``parent``: this module's, empty, their process gone."""
    for g in parent.glob(f"{PREFIX}*"):
        pid = g.name[len(PREFIX) :]
        if not pid.isdigit() or not 0 < int(pid) <= warm.PID_MAX or lifeline.alive(int(pid)):
            continue  # not a name this module gives, or its process runs
        if not (_read(g / "cgroup.procs") or "").split():
            with contextlib.suppress(OSError):
                g.rmdir()


def _facts(g: Group, limit: int) -> dict:
    """The limit as the kernel holds it, the group's peak use and its OOM kills (None: not shown here)."""
    v1 = g.controller == "memory-v1"
    held = _read(g.limit_file)
    peak = _read(g.path / ("memory.max_usage_in_bytes" if v1 else "memory.peak"))
    events = _pairs(g.path / ("memory.oom_control" if v1 else "memory.events"))
    return {
        "memory_limit_bytes": limit,
        "memory_limit_held_bytes": int(held) if held and held.isdigit() else None,
        "memory_peak_bytes": int(peak) if peak and peak.isdigit() else None,
        "memory_oom_kills": events.get("oom_kill"),
        "memory_cgroup": str(g.path),
        "memory_controller": g.controller,
    }


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _pairs(path: Path) -> dict[str, int]:
    text = _read(path) or ""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


def _leave(g: Group) -> None:
    with contextlib.suppress(OSError):
        (g.home / "cgroup.procs").write_text(str(os.getpid()))
    if g.restore is not None:
        with contextlib.suppress(OSError):
            g.limit_file.write_text(g.restore)
        return
    _remove(g)


def _remove(g: Group, tries: int = 50) -> bool:
    """Move what is left in the group (a killed task) home, then remove it; only ``iocampaign-mem-*``."""
    if not g.path.name.startswith(PREFIX):
        return False
    for pid in (_read(g.path / "cgroup.procs") or "").split():
        with contextlib.suppress(OSError):
            (g.home / "cgroup.procs").write_text(pid)
    for _ in range(tries):
        try:
            g.path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.1)
    return False


@contextlib.contextmanager
def limited(limit_gb: float | None) -> Iterator[dict]:
    """This process (and what it starts) under a memory limit of ``limit_gb`` GB for the block; yields a
    dict that holds, after the block, the facts for the record (empty without a limit)."""
    facts: dict = {}
    if not limit_gb:
        yield facts
        return
    limit = int(limit_gb * 1e9)
    g = _make(limit)
    held = _read(g.limit_file) or ""
    if not held.isdigit() or not limit - 2 * PAGE < int(held) <= limit:  # the kernel rounds to its pages
        _leave(g)
        raise MemoryLimitError(f"{SETTING}={limit_gb}: the kernel holds {held or 'nothing'}, not {limit} B")
    (g.path / "cgroup.procs").write_text(str(os.getpid()))
    try:
        yield facts
    finally:
        facts.update(_facts(g, limit))
        _leave(g)
