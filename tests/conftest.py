"""Shared fixtures: hermetic environment, a storage root on a real disk, a tiny real dataset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch):
    for k in list(os.environ):
        if k.startswith(("SLURM_", "SUBMITIT_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture
def disk_root(tmp_path_factory) -> Path:
    """A directory on a block-device file system (the page-cache tests need one)."""
    base = tmp_path_factory.mktemp("storage")
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(base)], capture_output=True, text=True).stdout.strip()
    if fs in ("tmpfs", "ramfs"):
        base = Path(os.environ.get("IOCAMPAIGN_TEST_DISK", "/var/tmp")) / f"iocampaign-test-{os.getpid()}"
        base.mkdir(parents=True, exist_ok=True)
    return base


def campaign(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``python -m campaign`` as a user would, in ``cwd``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "HYDRA_FULL_ERROR": ""}
    env.pop("HYDRA_FULL_ERROR")
    return subprocess.run(
        [sys.executable, "-m", "campaign", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def analysis(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "analysis", *args], cwd=cwd, env=env, capture_output=True, text=True)


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
