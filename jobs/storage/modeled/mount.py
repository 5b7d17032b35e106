"""Set-up and tear-down of a modelled tier: the layer's process, its FUSE mount at the tier's root,
its backing folder (the tool's own, under ``model.backing_dir``).

The mount is recognised by its type (``fuse.iocampaign``) and source (``iocampaign-model:<tier>``);
only such a mount is ever unmounted. The layer's process dies with the process that started it
(its parent-death signal), and libfuse unmounts as it ends; a set-up first clears a mount a killed
run left behind.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from jobs import owned
from jobs.storage import mounts, systools
from jobs.storage.modeled.disk import HddGeometry
from jobs.storage.modeled.lustre import LustreGeometry

log = logging.getLogger(__name__)

SUBTYPE = "iocampaign"
SOURCE = "iocampaign-model:"
PREFIX = "modeled:"  # a modelled tier's device name in usage, traces and records: modeled:<mount>
MARKER = ".iocampaign-backing"
XATTR = "user.iocampaign.disk"  # the layer's counters (its device's), as JSON on the mount's root
XATTR_SIZE = 1024  # fixed, padded: a size query and the read that follows agree


class ModelError(RuntimeError):
    """The modelled tier cannot be built here; the message says why and what to use instead."""


@dataclass(frozen=True)
class ModeledTier:
    name: str
    mount: str
    backing: str
    pid: int
    geometry: dict

    @property
    def device(self) -> str:
        return PREFIX + self.mount

    def dead(self) -> str | None:
        """Why the tier no longer serves (its layer's process, its mount, its counters), None while it does:
        unlike a disk, a modelled tier can die, its layer being a process of its own. The counters are read
        first: a layer that dies meanwhile is then named as the cause, not its silence."""
        answers = counters(self.device) is not None
        if not layer_runs(self.pid, self.backing):
            return unanswered(self.backing) or f"the tier's FUSE layer (pid {self.pid}) died"
        if not mounted_here(self):
            return f"the tier's FUSE mount at {self.mount} is gone (its layer, pid {self.pid}, still runs)"
        if not answers:
            return f"the tier's FUSE layer (pid {self.pid}) no longer answers on {self.mount}"
        return None


DEVICES = {"hdd": HddGeometry, "lustre": LustreGeometry}  # storage.model.device -> its figures


def geometry_of(model) -> HddGeometry | LustreGeometry:
    """The device of a ``storage.model`` section (``jobs.schema.ModelConf``); fields left null take
    the model's defaults. KeyError for a device that is not modelled."""
    cls = DEVICES[model.device]
    return cls(**{k: getattr(model, k) for k in cls.__dataclass_fields__ if getattr(model, k) is not None})


def described(geometry) -> dict:
    """The figures as the layer's process and the record take them: the device's name first."""
    return {"device": next(k for k, v in DEVICES.items() if isinstance(geometry, v)), **asdict(geometry)}


def backing_of(name: str, model) -> str:
    return str(Path(model.backing_dir) / name)


def available() -> str | None:
    """None when a modelled tier can be mounted here, else the reason it cannot."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (FUSE is not available in this kernel or container)"
    if os.geteuid() != 0 and shutil.which("fusermount3") is None:
        return "mounting FUSE without root needs fusermount3 (Debian package fuse3)"
    try:
        import mfusepy  # noqa: F401
    except ImportError:
        return "the Python package mfusepy is missing (it comes with the project: pip install -e .)"
    except OSError as e:
        return f"the FUSE binding cannot load libfuse3 ({e}); install the Debian package fuse3"
    return None


def mounted_tier(path: str) -> str | None:
    """The modelled tier's mount point that holds ``path`` (None when ``path`` is on no modelled tier)."""
    best = None
    real = os.path.realpath(path)
    for point, fs_type, source in mounts.mounts():
        ours = fs_type == f"fuse.{SUBTYPE}" and source.startswith(SOURCE)
        holds = real == point or real.startswith(point.rstrip("/") + "/")
        if ours and holds and (best is None or len(point) > len(best)):
            best = point
    return best


def _ours(name: str, mount: str) -> bool:
    return mounts.mount_at(mount) == (f"fuse.{SUBTYPE}", SOURCE + name)


def mounted_here(tier: ModeledTier) -> bool:
    """The tier's own mount is still in this process's mount table (/proc/self/mountinfo)."""
    return _ours(tier.name, tier.mount)


def _marker(backing: str) -> Path:
    return Path(backing, MARKER)


def mark_unanswered(tier: ModeledTier, why: str) -> None:
    """Keep in the backing folder's marker why the watch ended the tier's layer (``liveness.Watch``), for
    the processes that run the cell's runs and find the layer gone; the next set-up writes it afresh."""
    _marker(tier.backing).write_text(json.dumps({"tier": tier.name, "unanswered": why}))


def unanswered(backing: str) -> str | None:
    """Why the watch ended the layer serving ``backing`` (``mark_unanswered``), or None."""
    try:
        return json.loads(_marker(backing).read_text()).get("unanswered")
    except (OSError, ValueError, AttributeError):
        return None


def layer_runs(pid: int, backing: str) -> bool:
    """The layer process ``pid`` serving ``backing`` still runs (not a zombie, the pid not reused)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X") and b"jobs.storage.modeled" in args and backing.encode() in args


def foreign(name: str, backing: str, mount: str, key: str = "storage") -> str | None:
    """Why tier ``name`` cannot use ``mount`` or ``backing`` without touching what it does not own."""
    at = mounts.mount_at(mount)
    if at is not None and not _ours(name, mount):
        return (
            f"{key}.root={mount} has {at[0]} from {at[1]} mounted, which iocampaign did not mount "
            f"(it unmounts only its own tiers): unmount it yourself or choose another {key}.root"
        )
    if at is None and os.path.isdir(mount) and any(os.scandir(mount)):
        return (
            f"{key}.root={mount} is a folder with files in it: the modelled tier would be mounted over "
            f"them; choose an empty or new folder for {key}.root"
        )
    if os.path.exists(mount) and not os.path.isdir(mount):
        return f"{key}.root={mount} exists and is not a folder"
    if os.path.lexists(backing) and (
        not os.path.isdir(backing)
        or os.path.islink(backing)
        or (any(os.scandir(backing)) and not os.path.exists(os.path.join(backing, MARKER)))
    ):
        return (
            f"{key}.model.backing_dir holds {backing}, which iocampaign did not create: move it away or "
            f"set {key}.model.backing_dir to another folder"
        )
    return None


# the layer answers an unmount at once; one that has not in this long is stopped or hung (an unmount waits
# for it without end), and its mount is detached lazily instead
UNMOUNT_S = 10.0
END_S = 10.0  # how long the tear-down waits for the layer to end after its unmount, before SIGKILL


def cleanup(name: str, mount: str) -> list[str]:
    """Unmount what tier ``name`` left mounted (its own mount only); returns what was undone."""
    done = []
    for _ in range(3):
        if not _ours(name, mount):
            break
        systools.unmount(mount, UNMOUNT_S)
        done.append(f"unmounted {mount}")
    return done


def setup(
    name: str, backing_dir: str, mount: str, geometry: HddGeometry | LustreGeometry, timeout_s: float = 30.0
) -> ModeledTier:
    """Mount tier ``name`` at ``mount`` over ``<backing_dir>/<name>`` and return it once it serves."""
    why = available() or geometry.check()
    if why:
        raise ModelError(f"storage={name}: {why}")
    backing = str(Path(backing_dir) / name)
    why = foreign(name, backing, mount)
    if why:
        raise ModelError(f"storage={name}: {why}")
    cleanup(name, mount)
    owned.ensure(backing, "storage.model.backing_dir", own_from=owned.own_from_of(backing_dir))
    _marker(backing).write_text(json.dumps({"tier": name}))
    owned.ensure(mount, "storage.root")
    from jobs import lifeline

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobs.storage.modeled",
            "serve",
            name,
            backing,
            mount,
            json.dumps(described(geometry)),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=lifeline.child_env(),
        preexec_fn=lifeline.bind,
    )

    def died() -> Exception | None:
        if proc.poll() is None:
            return None
        err = proc.stderr.read().decode(errors="replace").strip().splitlines()
        return ModelError(
            f"storage={name}: the FUSE layer ended before it mounted: {err[-1] if err else proc.returncode}"
        )

    def late() -> Exception:
        proc.kill()
        return ModelError(f"storage={name}: the FUSE layer did not mount {mount} within {timeout_s:.0f} s")

    lifeline.wait_ready(lambda: _ours(name, mount), died=died, late=late, timeout_s=timeout_s)
    return ModeledTier(name, os.path.realpath(mount), backing, proc.pid, described(geometry))


def teardown(tier: ModeledTier) -> None:
    """Unmount the tier and wait for its process to end (idempotent)."""
    cleanup(tier.name, tier.mount)
    deadline = time.monotonic() + END_S
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(tier.pid, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            return
        time.sleep(0.05)
    try:
        os.kill(tier.pid, 9)
        log.warning(
            "storage=%s: the tier's FUSE layer (pid %d) had not ended %g s after its unmount and was killed",
            tier.name,
            tier.pid,
            END_S,
        )
        os.waitpid(tier.pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def counters(device: str) -> dict | None:
    """The drive's counters of the modelled tier named ``modeled:<mount>`` (None when not mounted)."""
    try:
        return json.loads(os.getxattr(device[len(PREFIX) :], XATTR))
    except (OSError, ValueError):
        return None
