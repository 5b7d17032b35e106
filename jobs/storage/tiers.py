"""Emulated storage tiers on one disk (root): a file-backed loop device with ext4, mounted, and
throttled to a tier's read and write bandwidth and request rates by a cgroup (``jobs.storage.throttle``:
cgroup v1's blkio controller or cgroup v2's io.max, whichever the machine has).

What the throttle covers (docs/storage.md, emulated tiers): O_DIRECT and cold buffered reads,
O_DIRECT writes and the write-back that fsync forces. Not buffered writes themselves, not
sync()/syncfs() write-back, not reads served from the page cache. The campaign process joins the
tier's cgroup only for the measured runs; set-up and tear-down are idempotent, and a set-up first
clears whatever a killed run left mounted, attached or created.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from jobs import owned
from jobs.storage import mounts, systools, throttle

STATE_DIR = Path("/run/iocampaign-tiers")  # tmpfs: gone after a reboot, as the mounts are


class TierError(RuntimeError):
    """The emulated tier cannot be built here; the message says why and what to use instead."""


@dataclass(frozen=True)
class Tier:
    name: str
    image: str  # backing file on the real disk
    loop: str  # /dev/loopN
    dev: str  # MAJ:MIN of the loop device
    mount: str  # where the tier's ext4 is mounted (the storage root)
    cgroup: str  # the cgroup folder that throttles it
    read_bps: int
    write_bps: int
    read_iops: int = 0  # requests per second the tier's reads are throttled to (0: no limit)
    write_iops: int = 0
    throttle: str = "blkio-v1"  # the mechanism: blkio-v1 | io.max-v2

    @property
    def limits(self) -> throttle.Limits:
        return throttle.Limits(self.dev, self.read_bps, self.write_bps, self.read_iops, self.write_iops)


def _sh(*cmd: str, check: bool = True, timeout_s: float = systools.QUICK_S) -> str:
    try:
        p = systools.run(cmd, timeout_s=timeout_s)
    except systools.NoAnswer as e:
        raise TierError(str(e)) from None
    if check and p.returncode != 0:
        raise TierError(f"{' '.join(cmd)} failed: {(p.stderr or p.stdout).strip()}")
    return p.stdout.strip()


def available() -> str | None:
    """None when emulated tiers can be built here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "emulated tiers need root (loop device, mount, cgroup)"
    ctl, why = throttle.current()
    if ctl is None:
        return f"no cgroup can throttle a device here: {why}"
    import shutil

    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:  # not `which`: a PATH without it is no traceback
            return f"{tool} is not installed"
    return None


_mount_at = mounts.mount_at  # (file-system type, source) at a mount point, or None


def _backing_file(loop: str) -> str | None:
    """The file behind a loop device (None when it is not a loop device or has none)."""
    name = os.path.basename(os.path.realpath(loop))
    try:
        return Path(f"/sys/block/{name}/loop/backing_file").read_text().strip()
    except OSError:
        return None


def _ours_mounted(image: str, mount: str) -> bool:
    """Whether the mount at ``mount`` is this tier's loop device over ``image``."""
    at = _mount_at(mount)
    return at is not None and _backing_file(at[1]) == os.path.realpath(image)


def _loops_of(image: str) -> list[str]:
    out = _sh("losetup", "-j", image, check=False)
    return [line.split(":")[0] for line in out.splitlines() if line.strip()]


def marker(image: str) -> Path:
    """The file that says ``image`` was made by this project (it is never written without it)."""
    return Path(image + ".iocampaign")


def _image_is_ours(image: str, name: str) -> bool:
    """Whether the tool made ``image``: its marker, or (images made before markers existed) the tier's
    ext4 label. Reads only; ``setup`` writes the marker of an adopted image."""
    if marker(image).exists():
        return True
    label = _sh("blkid", "-o", "value", "-s", "LABEL", image, check=False)
    return bool(label) and label == name[:16]


def foreign(name: str, image: str, mount: str, key: str = "storage") -> str | None:
    """Why tier ``name`` cannot use ``mount`` or ``image`` without touching something it does not
    own (None when it can): a mount it did not make, a non-empty folder it would hide, a file at the
    image's path that it did not create."""
    at = _mount_at(mount)
    if at is not None and not _ours_mounted(image, mount):
        return (
            f"{key}.root={mount} has {at[0]} from {at[1]} mounted, which iocampaign did not mount "
            f"(it unmounts only its own tiers): unmount it yourself or choose another {key}.root"
        )
    if at is None and os.path.isdir(mount) and any(os.scandir(mount)):
        return (
            f"{key}.root={mount} is a folder with files in it: the emulated tier would be mounted over "
            f"them; choose an empty or new folder for {key}.root"
        )
    if os.path.exists(mount) and not os.path.isdir(mount):
        return f"{key}.root={mount} exists and is not a folder"
    if os.path.lexists(image) and (
        not os.path.isfile(image) or os.path.islink(image) or not _image_is_ours(image, name)
    ):
        return (
            f"{key}.emulate.image_dir holds {image}, which iocampaign did not create: move it away or "
            f"set {key}.emulate.image_dir to another folder"
        )
    return None


def cleanup(name: str, image: str, mount: str) -> list[str]:
    """Undo everything tier ``name`` may have left (idempotent); returns what was undone. Only the
    tier's own mount (its loop device over ``image``), loop devices and cgroup are touched."""
    done = []
    for ctl in throttle.controllers():
        cg = ctl.root / f"{throttle.PREFIX}{name}"
        if cg.exists() and ctl.remove(cg):
            done.append(f"removed cgroup {cg}")
    for _ in range(3):
        if not _ours_mounted(image, mount):
            break
        systools.unmount(mount)
        done.append(f"unmounted {mount}")
    if os.path.exists(image) and marker(image).exists():
        for loop in _loops_of(image):
            _sh("losetup", "-d", loop, check=False)
            done.append(f"detached {loop}")
        _detached(image)
    (STATE_DIR / f"{name}.json").unlink(missing_ok=True)
    return done


def _detached(image: str, timeout_s: float = 10.0) -> None:
    """Wait until no loop device is over ``image``. A device that another process holds open when it is
    detached (udev probing it after the unmount, on a busy machine) is only marked to go, and goes when
    that process lets go; a device still there after ``timeout_s`` is what ``leftovers`` reports. Not
    ``lifeline.wait_ready``: nothing here fails, it only waits."""
    deadline = time.monotonic() + timeout_s
    while _loops_of(image) and time.monotonic() < deadline:
        time.sleep(0.1)


def setup(
    name: str,
    image_dir: str,
    mount: str,
    size_gb: float,
    read_mb_s: float,
    write_mb_s: float,
    read_iops: int = 0,
    write_iops: int = 0,
) -> Tier:
    """Build (or rebuild after a crash) the tier and return it; the image file (allocated, not sparse),
    and the data on it, is kept between runs. Raises TierError, touching nothing, when the mount
    point or the image path holds something the project did not make."""
    why = available()
    if why:
        raise TierError(
            f"storage={name}: {why}; without root use storage=local, or a real device with "
            f"storage=hdd|ssd|optane storage.root=<its mount point>"
        )
    image = str(Path(image_dir) / f"{name}.img")
    why = foreign(name, image, mount)
    if why:
        raise TierError(f"storage={name}: {why}")
    cleanup(name, image, mount)
    ctl, _ = throttle.current()
    for cg in ctl.groups("cell-*"):  # combined cgroups of killed cells
        pid = cg.name.rsplit("-", 1)[1]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            ctl.remove(cg, tries=1)
    owned.ensure(image_dir, "storage.emulate.image_dir", own_from=owned.own_from_of(image_dir))
    if os.path.exists(image) and not marker(image).exists():  # adopted by its label (foreign() checked it)
        marker(image).write_text(json.dumps({"tier": name, "adopted": True}))
    fresh = not os.path.exists(image) or os.path.getsize(image) != int(size_gb * 1e9)
    if fresh:
        # allocated, not sparse: first writes into a sparse image cost extra allocation on the real
        # disk, which made a tier's fresh blocks slower than its reused ones
        marker(image).write_text(json.dumps({"tier": name, "size_gb": size_gb}))
        with open(image, "wb") as f:
            os.posix_fallocate(f.fileno(), 0, int(size_gb * 1e9))
    loop = _sh("losetup", "-f", "--show", "--direct-io=on", image)
    try:
        if fresh:
            # nodiscard: mkfs would otherwise punch the allocated image back to sparse
            mkfs = ("mkfs.ext4", "-q", "-F", "-E", "nodiscard", "-L", name[:16], loop)
            _sh(*mkfs, timeout_s=systools.FORMAT_S)
        owned.ensure(mount, "storage.root")
        _sh("mount", loop, mount)
        st = os.stat(loop)
        dev = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        cg = ctl.group(name)
        tier = Tier(
            name,
            image,
            loop,
            dev,
            mount,
            str(cg),
            int(read_mb_s * 1e6),
            int(write_mb_s * 1e6),
            int(read_iops or 0),
            int(write_iops or 0),
            ctl.name,
        )
        ctl.limit(cg, tier.limits)
    except Exception:
        cleanup(name, image, mount)
        raise
    owned.ensure(STATE_DIR, "the tiers' state folder")
    (STATE_DIR / f"{name}.json").write_text(json.dumps(asdict(tier)))
    return tier


def join(tier: Tier, pid: int | None = None) -> None:
    """Put this process (all its threads, and children it starts later) under the tier's throttle."""
    throttle.by_name(tier.throttle).join(Path(tier.cgroup), pid)


def join_all(tiers: list[Tier]) -> Path:
    """Put this process under the throttles of several tiers at once (a process sits in one cgroup:
    this one carries every tier's per-device limits). Remove it with ``leave_all``."""
    ctl = throttle.by_name(tiers[0].throttle)
    if len(tiers) == 1:
        ctl.join(Path(tiers[0].cgroup))
        return Path(tiers[0].cgroup)
    cg = ctl.group(f"cell-{os.getpid()}")
    for t in tiers:
        ctl.limit(cg, t.limits)
    ctl.join(cg)
    return cg


def leave_all(cg: Path) -> None:
    """Leave a cgroup made by join_all and remove it when it is this process's own."""
    ctl = next(c for c in throttle.controllers() if c.root == cg.parent)
    try:
        ctl.leave()
    except OSError:
        pass
    if cg.name.startswith(f"{throttle.PREFIX}cell-"):
        ctl.remove(cg)


def teardown(tier: Tier) -> None:
    """Leave the cgroup, unmount, detach the loop device, remove the cgroup (idempotent)."""
    try:
        throttle.by_name(tier.throttle).leave()
    except OSError:
        pass
    cleanup(tier.name, tier.image, tier.mount)


def leftovers(name: str, image: str, mount: str) -> list[str]:
    """What of tier ``name`` is still there (empty when clean)."""
    out = []
    if _ours_mounted(image, mount):
        out.append(f"mount {mount}")
    if os.path.exists(image):
        out += [f"loop {x}" for x in _loops_of(image)]
    for ctl in throttle.controllers():
        if (ctl.root / f"{throttle.PREFIX}{name}").exists():
            out.append(f"cgroup {ctl.root / (throttle.PREFIX + name)}")
    return out
