"""The system tools a tier runs (losetup, mkfs.ext4, mount, umount, blkid, s3fs, fusermount, fio), each
bounded by a time limit: a tool that does not answer (a mount over a device that hangs, a FUSE daemon that
stopped serving) ends the call with one line that names it, instead of holding the campaign forever.

``subprocess.run(timeout=...)`` is not enough for that: after it kills the tool it waits for it without
a limit, and a process stuck in the kernel (state D) outlives SIGKILL. Here the wait after the kill is
bounded too; such a process is left to the kernel, and the line says so.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

QUICK_S = 60.0  # losetup, mount, umount, blkid, a tool's --version: seconds on any machine that answers
FORMAT_S = 600.0  # mkfs.ext4 of a tier's image (lazy inode tables: seconds, also for hundreds of GB)
REAPED_S = 5.0  # how long a killed tool is given to end


class NoAnswer(subprocess.SubprocessError):
    """A system tool that did not end within its time limit (it was killed)."""


def run(
    cmd: Sequence[str], *, timeout_s: float = QUICK_S, cwd: str | Path | None = None
) -> subprocess.CompletedProcess:
    """``cmd`` run with its output captured as text; raises NoAnswer once it has run ``timeout_s``."""
    proc = subprocess.Popen(
        list(cmd),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        start_new_session=True,  # a group of its own: killed with the processes it started
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            proc.communicate(timeout=REAPED_S)
            left = ""
        except subprocess.TimeoutExpired:
            left = f"; it did not end when killed (pid {proc.pid}, stuck in the kernel) and is left to it"
        said = f"{shlex.join(cmd)} did not end within {timeout_s:.0f} s and was killed{left}"
        raise NoAnswer(said) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def quietly(cmd: Sequence[str], *, timeout_s: float = QUICK_S) -> int | None:
    """``cmd``'s exit status, or None where it did not end in time (a clean-up that goes on without it)."""
    try:
        return run(cmd, timeout_s=timeout_s).returncode
    except NoAnswer:
        return None


def unmount(point: str, wait_s: float = QUICK_S) -> None:
    """Unmount the tool's own mount at ``point``: a plain ``umount`` given ``wait_s``, then, where that
    failed (busy) or did not end (a file system that stopped answering), a lazy one that detaches it at
    once."""
    if quietly(["umount", point], timeout_s=wait_s) != 0:
        quietly(["umount", "-l", point])
