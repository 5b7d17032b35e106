"""``python -m benchmarks.plan``: how fast a campaign is planned. Runs the dry run of grids of
1,000 and 10,000 cells (``threads`` x ``batch_size``, Slurm, nothing submitted) as a user would, and
prints the wall time, the CPU time (the command's, user and system: what a busy machine does not
change much), cells per second and the peak memory of each. Needs no Slurm here: a dry run never
calls it (campaign/slurm/preview.py).

  python -m benchmarks.plan [--cells 1000,10000] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def grid(cells: int) -> list[str]:
    """A threads x batch_size grid of exactly ``cells`` cells (10 thread counts)."""
    if cells % 10:
        raise SystemExit(f"--cells {cells}: give multiples of 10")
    return [f"threads=range(1,{10 + 1})", f"batch_size=range(1,{cells // 10 + 1})"]


def plan_once(cells: int) -> tuple[float, int, int, float]:
    """(seconds, peak RSS in KiB, cells printed, CPU seconds) of one dry run of ``cells`` cells."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as cwd:
        t0 = time.perf_counter()
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "campaign",
                "-m",
                *grid(cells),
                "platform=slurm",
                "platform.dry_run=true",
                "dataset.num_images=1000",
            ],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"the dry run failed: {p.stderr.strip()[-500:]}")
        left = list(Path(cwd).iterdir())
        if left:
            raise SystemExit(f"the dry run left {left} behind")
    printed = sum(1 for line in p.stdout.splitlines() if line.startswith("  #"))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return seconds, after.ru_maxrss, printed, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.plan", description=__doc__.split("\n")[0])
    ap.add_argument("--cells", default="1000,10000", help="comma-separated grid sizes (multiples of 10)")
    ap.add_argument("--repeats", type=int, default=1, help="dry runs per size; the median is printed")
    args = ap.parse_args(argv)
    print(f"{'cells':>8} {'seconds':>9} {'CPU s':>9} {'cells/s':>9} {'peak MiB':>9}")
    for n in (int(c) for c in args.cells.split(",")):
        runs = [plan_once(n) for _ in range(args.repeats)]
        if any(r[2] != n for r in runs):
            raise SystemExit(f"the dry run printed {runs[0][2]} cells, not {n}")
        s = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[3] for r in runs)
        peak = max(r[1] for r in runs) / 1024
        print(f"{n:>8} {s:>9.2f} {cpu:>9.2f} {n / s:>9.0f} {peak:>9.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
