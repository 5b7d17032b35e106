"""Where and with what a cell ran: machine, storage tier, software, project commit."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

PACKAGES = ("tensorflow", "keras", "numpy", "hydra-core", "omegaconf", "submitit", "psutil", "pillow")
PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mount:
    mount_point: str
    fs_type: str
    source: str  # the device or server:/export behind the mount
    options: str  # mount options plus super-block options
    dev: str  # MAJ:MIN of the file system
    rotational: bool | None  # from /sys/dev/block/MAJ:MIN/queue/rotational; None when not a block device


def _rotational(dev: str) -> bool | None:
    base = Path("/sys/dev/block") / dev
    for q in (base / "queue" / "rotational", base / ".." / "queue" / "rotational"):
        try:
            return q.read_text().strip() == "1"
        except OSError:
            continue
    return None


def mount_of(path: str | os.PathLike) -> Mount:
    """The mount that holds ``path`` (the longest mount point above it; the last mounted of equals)."""
    from jobs.storage import mounts

    real = os.path.realpath(path)
    best = None
    for e in mounts.table():
        inside = real == e.point or real.startswith(e.point.rstrip("/") + "/")
        if inside and (best is None or len(e.point) >= len(best.point)):
            best = e
    if best is None:
        return Mount(real, "unknown", "unknown", "", "", None)
    return Mount(best.point, best.fs_type, best.source, best.options, best.device, _rotational(best.device))


def _cpuinfo() -> list[str]:
    """/proc/cpuinfo's lines (none where it cannot be read)."""
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def _cpu_model(lines: list[str]) -> str:
    for line in lines:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _cpu_topology(lines: list[str]) -> dict | None:
    """The CPUs' sockets, cores and hardware threads per socket, as /proc/cpuinfo gives them (``physical
    id``, ``cpu cores``, ``siblings``); None where it does not say."""
    fields: dict[str, set[str]] = {"physical id": set(), "cpu cores": set(), "siblings": set()}
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() in fields:
            fields[key.strip()].add(value.strip())
    if not fields["physical id"]:
        return None
    try:
        return {
            "sockets": len(fields["physical id"]),
            "cores_per_socket": int(max(fields["cpu cores"], key=int)),
            "threads_per_socket": int(max(fields["siblings"], key=int)),
        }
    except ValueError:  # a key it does not give (max of nothing), or not a number
        return None


def _mem_total_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def versions(extra: tuple[str, ...] = ()) -> dict[str, str | None]:
    """Python's version and those of the common packages plus ``extra`` (a workload's)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in dict.fromkeys((*PACKAGES, *extra)):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = _module_version(name)
    return out


def _module_version(module: str) -> str | None:
    """The version of the distribution that installs the importable ``module`` (``PIL``: Pillow's), or
    None where none does."""

    for dist in metadata.packages_distributions().get(module, ()):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def slurm() -> dict | None:
    """The Slurm job this process runs in, with its sbatch script; None outside Slurm."""
    if "SLURM_JOB_ID" not in os.environ:
        return None
    env = os.environ
    out = {
        "job_id": env.get("SLURM_JOB_ID"),
        "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
        "array_task_id": env.get("SLURM_ARRAY_TASK_ID"),
        "node": env.get("SLURMD_NODENAME"),
        "partition": env.get("SLURM_JOB_PARTITION"),
        "cluster": env.get("SLURM_CLUSTER_NAME"),
        "cpus_on_node": env.get("SLURM_CPUS_ON_NODE"),
        "sbatch_script": None,
    }
    try:
        import submitit

        out["sbatch_script"] = submitit.JobEnvironment().paths.submission_file.read_text()
    except Exception:  # not a submitit job, or its folder is gone: the ids above still hold
        pass
    return out


def tier_facts(path: str, fs_type: str) -> dict:
    """Size and free space of the file system at ``path``; Lustre stripe settings where lfs exists."""
    import shutil

    out: dict = {}
    try:
        du = shutil.disk_usage(path)
        out.update(total_bytes=du.total, free_bytes=du.free)
    except OSError:
        pass
    if fs_type == "lustre" and shutil.which("lfs"):
        try:
            out["lustre_stripe"] = subprocess.run(
                ["lfs", "getstripe", "-d", path], capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out["lustre_stripe"] = None
    return out


def collect(storage_root: str, data_dir: str | None = None, packages: tuple[str, ...] = ()) -> dict:
    """Provenance of a cell: host, kernel, CPU, memory, the tier's mount, versions and git commit; for a
    workload that runs TensorFlow, the accelerator (``jobs.observe.accelerator``)."""
    commit = _git("rev-parse", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    storage_mount = mount_of(storage_root)
    cpuinfo = _cpuinfo()
    return {
        "host": socket.gethostname(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "cpu_model": _cpu_model(cpuinfo),
        "cpu_count": os.cpu_count(),
        "cpu_topology": _cpu_topology(cpuinfo),
        "cpus_usable": affinity,
        "mem_total_bytes": _mem_total_bytes(),
        "storage_mount": asdict(storage_mount),
        "storage_space": tier_facts(storage_root, storage_mount.fs_type),
        "data_mount": asdict(mount_of(data_dir)) if data_dir else None,
        "versions": versions(packages),
        "git_commit": commit,
        "git_dirty": None if dirty is None else bool(dirty),
        "argv": sys.argv,
        "slurm": slurm(),
        **_accelerator(packages),
    }


def _accelerator(packages: tuple[str, ...]) -> dict:
    """``{"accelerator": …}`` as the first framework among ``packages`` that can describe it sees it, or {}
    (a cell that runs no framework: fio, IOR, a checkpoint's bytes)."""
    from jobs.observe import accelerator

    package = next((p for p in packages if p in accelerator.VIEWS), None)
    return {"accelerator": accelerator.describe(package)} if package else {}
