"""The machine's mounts as this process sees them (``/proc/self/mountinfo``): what the tiers read to
tell their own mounts from a user's."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

_ESCAPE = re.compile(rb"\\([0-3][0-7]{2})")  # the kernel writes a space, tab, newline or backslash as \ooo


def unescape(field: bytes) -> str:
    """A path field of mountinfo as the path itself: every octal escape decoded (``\\040`` a space,
    ``\\011`` a tab, ``\\134`` a backslash), then the bytes as the file system's name."""
    return os.fsdecode(_ESCAPE.sub(lambda m: bytes([int(m.group(1), 8)]), field))


@dataclass(frozen=True)
class Entry:
    """One line of mountinfo, its names decoded."""

    point: str
    fs_type: str
    source: str  # the device or server:/export behind the mount
    options: str  # the mount's options, then its super block's (a cgroup-v1 hierarchy's controllers)
    device: str  # MAJ:MIN of the file system


def table() -> Iterator[Entry]:
    """Every mount, in mount order."""
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            fields = line.split()
            after = fields[fields.index(b"-") + 1 :]
            options = os.fsdecode(fields[5]) + ("," + os.fsdecode(after[2]) if len(after) > 2 else "")
            yield Entry(
                unescape(fields[4]),
                os.fsdecode(after[0]),
                unescape(after[1]),
                options,
                os.fsdecode(fields[2]),
            )


def mounts() -> Iterator[tuple[str, str, str]]:
    """(mount point, file-system type, source) of every mount, in mount order, their names decoded."""
    for e in table():
        yield e.point, e.fs_type, e.source


def mount_at(path: str) -> tuple[str, str] | None:
    """(file-system type, source) of the top-most mount at ``path``, or None when nothing is mounted there.

    A mount point is looked up by its folder's real path and its own name first, without a look inside the
    mount: a FUSE layer that stopped answering (its process stopped or hung) would hold that look, and the
    process, for ever. Only a path that names no mount point that way (its last name a link, or nothing
    mounted) is resolved whole."""
    head, name = os.path.split(os.path.abspath(path))
    found = _top(os.path.join(os.path.realpath(head), name))
    return found if found is not None else _top(os.path.realpath(path))


def _top(point: str) -> tuple[str, str] | None:
    found = None
    for at, fs_type, source in mounts():
        if at == point:
            found = (fs_type, source)
    return found
