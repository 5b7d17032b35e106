"""The machine's mounts as this process sees them (``/proc/self/mountinfo``): what the tiers read to
tell their own mounts from a user's."""

from __future__ import annotations

import os
from collections.abc import Iterator


def mounts() -> Iterator[tuple[str, str, str]]:
    """(mount point, file-system type, source) of every mount, in mount order."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            after = fields[fields.index("-") + 1 :]
            yield fields[4], after[0], after[1]


def mount_at(path: str) -> tuple[str, str] | None:
    """(file-system type, source) of the top-most mount at ``path``, or None when nothing is mounted there."""
    target = os.path.realpath(path)
    found = None
    for point, fs_type, source in mounts():
        if point == target:
            found = (fs_type, source)
    return found
