"""A campaign run by another (the paper's grids, the capacity search's rounds): ``python -m campaign -m``
as a child process that ends cleanly, tiers and locks released, when its parent is interrupted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run(args: list[str], sweep_dir: Path) -> int:
    """``python -m campaign -m <args> hydra.sweep.dir=<sweep_dir>``; its exit status."""
    from jobs import lifeline

    child = subprocess.Popen(
        [sys.executable, "-m", "campaign", "-m", *args, f"hydra.sweep.dir={sweep_dir}"],
        env=lifeline.child_env(),
    )
    try:
        return child.wait()
    except BaseException:  # SIGTERM or Ctrl-C: let the campaign unwind (tiers, locks) before leaving
        child.terminate()
        child.wait(120)
        raise
