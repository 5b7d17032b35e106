"""One measuring cell per device at a time, across processes and campaigns on this machine."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)


def lock_path(lock_dir: str, path: str) -> Path:
    """The lock file of the device that holds ``path``."""
    st = os.stat(path)
    return Path(lock_dir) / f"dev-{os.major(st.st_dev)}-{os.minor(st.st_dev)}.lock"


@contextlib.contextmanager
def device_lock(lock_dir: str, path: str) -> Iterator[float]:
    """Hold the device lock of ``path``; yields the seconds spent waiting for it."""
    lp = lock_path(lock_dir, path)
    lp.parent.mkdir(parents=True, exist_ok=True)
    with open(lp, "a+") as f:
        t0 = time.monotonic()
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            log.warning("waiting for %s, which is measuring the device of %s (%s)", holder, path, lp)
            fcntl.flock(f, fcntl.LOCK_EX)
        waited = time.monotonic() - t0
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()}\n")
        f.flush()
        try:
            yield waited
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)
