"""Reading the tool's own small files (plan.json, record.json, the outputs manifest, a study's marker)
without ever blocking or following a link.

These files lie in campaign folders other users may be able to write. Under their names anyone can
plant a FIFO (``open`` waits for a writer for ever), a device, or a link to a file elsewhere; each
reader goes through ``read_bytes``, which opens without blocking and without following a final
link, then refuses anything that is not a regular file before reading a byte. The formats' owners
(jobs.plan, jobs.records, analysis.outputs) turn the error into their own one-line refusal.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


class NotAFile(OSError):
    """The name holds something other than a regular file (a FIFO, a device, a folder, a link)."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_bytes(path: str | os.PathLike) -> bytes:
    """The content of the regular file ``path``; raises NotAFile (an OSError naming the path) for a
    link, FIFO, device or folder, and OSError as ``open`` does otherwise. Never blocks on a FIFO."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW's answer for a final symbolic link
            raise NotAFile(f"{path} is a symbolic link, not a file of the tool: remove it") from None
        raise
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotAFile(f"{path} is {_kind(mode)}, not a file of the tool: remove it")
        return f.read()


def read_text(path: str | os.PathLike) -> str:
    """``read_bytes`` decoded as UTF-8 (UnicodeDecodeError, a ValueError, for other bytes)."""
    return read_bytes(path).decode()


def read_json(path: str | os.PathLike):
    """``read_bytes`` parsed as JSON (ValueError for a damaged file)."""
    return json.loads(read_bytes(Path(path)))
