"""Real files for the tests: small JPEGs, a user's files planted around what the tool writes, a tmpfs."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from pathlib import Path


def make_jpegs(folder: Path, n: int, classes: int = 2, side: int = 64) -> list[Path]:
    """``n`` small real JPEGs in class sub-folders."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        d = folder / f"c{i % classes}"
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{i:04d}.jpg"
        Image.fromarray(rng.integers(0, 255, (side, side, 3), dtype=np.uint8)).save(p, quality=85)
        out.append(p)
    return out


def plant(*folders: Path) -> dict[Path, str]:
    """A user's files in and around ``folders``, under names the tool writes: returns path -> sha256 of
    what was written."""
    out = {}
    for k, folder in enumerate(folders):
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("notes.txt", "results.csv", "summary.csv", "cells.csv", "record.json", "run"):
            p = folder / f"{name}" if k == 0 else folder / f"user{k}-{name}"
            if p.exists():
                continue
            data = os.urandom(333) + f"user data in {p}".encode()
            p.write_bytes(data)
            out[p] = hashlib.sha256(data).hexdigest()
    return out


def intact(planted: dict[Path, str]) -> None:
    """Every planted file is still there, byte for byte."""
    for p, digest in planted.items():
        assert p.is_file(), f"{p} was removed"
        assert hashlib.sha256(p.read_bytes()).hexdigest() == digest, f"{p} was changed"


@contextlib.contextmanager
def tmpfs(folder: Path, size: str):
    """A real tmpfs of ``size`` mounted at ``folder`` (root), unmounted afterwards."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def on_disk(tmp_path_factory, name) -> Path:
    """A folder on a block-device file system (cold-cache verification needs one), as ``disk_root``."""
    base = tmp_path_factory.mktemp(name)
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(base)], capture_output=True, text=True).stdout.strip()
    if fs in ("tmpfs", "ramfs"):
        base = (
            Path(os.environ.get("IOCAMPAIGN_TEST_DISK", "/var/tmp")) / f"iocampaign-test-{os.getpid()}-{name}"
        )
        base.mkdir(parents=True, exist_ok=True)
    return base
