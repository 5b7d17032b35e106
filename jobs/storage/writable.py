"""Whether a folder may hold a tier's files, judged without writing anything into it: not the file
system's root or a folder of the operating system, on a file system that takes files, writable by
this user; and how much space a tier has left."""

from __future__ import annotations

import os

from jobs.errors import ConfigError

# Folders of the operating system, refused with everything below them: writing a dataset there (as root)
# fills or damages the system. /dev/shm is the shared-memory tmpfs, a tier of its own (storage=tmpfs);
# /run/media and /run/user are where desktops mount removable drives and keep a user's runtime files.
SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/backups",
    "/var/cache",
    "/var/lib",
    "/var/lock",
    "/var/log",
    "/var/mail",
    "/var/run",
    "/var/spool",
)
SYSTEM_EXCEPTIONS = ("/dev/shm", "/run/media", "/run/user")
# Folders refused themselves, but whose sub-folders are a user's to choose (/var/tmp, /home/<user>/data).
SYSTEM_FOLDERS = ("/", "/home", "/root", "/var")
# File systems that are interfaces of the kernel: they take no data files whatever their permissions say.
PSEUDO_FS = (
    "bpf",
    "cgroup",
    "cgroup2",
    "configfs",
    "debugfs",
    "devpts",
    "efivarfs",
    "fusectl",
    "hugetlbfs",
    "mqueue",
    "proc",
    "pstore",
    "securityfs",
    "sysfs",
    "tracefs",
)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def system_folder(path: str) -> str | None:
    """The system folder ``path`` resolves to or lies in (links followed), or None."""
    real = os.path.realpath(path)
    if real in SYSTEM_FOLDERS:
        return real
    if any(_inside(real, ok) for ok in SYSTEM_EXCEPTIONS):
        return None
    return next((tree for tree in SYSTEM_TREES if _inside(real, tree)), None)


def refuse_system_folder(path: str, setting: str) -> None:
    """ConfigError naming ``setting`` when ``path`` is the file system's root or a folder of the operating
    system: a tier's files there, as root, would fill or damage the system."""
    folder = system_folder(path)
    if folder is None:
        return
    real = os.path.realpath(path)
    link = "" if real == os.path.abspath(path) else f" (a link to {real})"
    what = (
        "the root of the file system"
        if folder == "/"
        else f"{'in ' if real != folder else ''}{folder}, a folder of the operating system"
    )
    raise ConfigError(
        f"{setting}={path}{link} is {what}: the tool would write its files there; choose a folder of "
        "your own, e.g. under /var/tmp or a scratch folder"
    )


def _fs_type(path: str) -> str:
    """The type of the file system that holds ``path`` (the longest mount point above it)."""
    from jobs.storage import mounts

    real, best, fs = os.path.realpath(path), -1, ""
    for point, fs_type, _ in mounts.mounts():
        if _inside(real, point) and len(point) >= best:
            best, fs = len(point), fs_type
    return fs


def unwritable(folder: str) -> str | None:
    """Why this user cannot create files in the existing ``folder`` (None: it can), asked of the kernel's
    permission check and the mount's flags rather than by creating a probe file in someone's folder."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return "permission denied"
    if os.statvfs(folder).f_flag & os.ST_RDONLY:
        return "its file system is mounted read-only"
    fs = _fs_type(folder)
    if fs in PSEUDO_FS:
        return f"it is on {fs}, an interface of the kernel that takes no files"
    return None


def _existing(path: str) -> str:
    """``path``, or its nearest ancestor that exists (where a folder made later takes its space from)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and path != "/":
        path = os.path.dirname(path)
    return path


def files_and_space(st) -> tuple[str | None, float | None]:
    """(the folder where tier ``st``'s files lie before any cell runs, bytes free for them); None for what
    planning cannot know. A modelled tier's files lie in its backing folder; an emulated tier is a file
    system of ``emulate.size_gb`` made when its cell starts."""
    import shutil

    if st.emulate is not None:
        return None, st.emulate.size_gb * 1e9
    if st.model is not None:
        from jobs.storage.modeled import mount

        backing = mount.backing_of(st.name, st.model)
        return backing, float(shutil.disk_usage(_existing(backing)).free)
    root = st.root
    if not os.path.isdir(root):
        return None, None
    return root, float(shutil.disk_usage(root).free)
