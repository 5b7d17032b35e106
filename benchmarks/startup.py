"""Benchmark: how much of a micro-benchmark cell's time is its runs, and how much is starting up?

    python -m benchmarks.startup [--repeats 5] [--num-images 512] [--cells 1,3] [--storage local]

Runs ``python -m campaign -m workload=microbench`` the way a user does, once per number of cells
(``threads=1`` for one cell, ``threads=1,2,4`` for three), each cell with ``--repeats`` measured runs and
no warm-up, on a dataset generated before the timing starts. Prints, per campaign:

- measured: the sum of the runs' timed intervals (``seconds`` in results.csv);
- cell: the sum of each cell's recorded time (started_at to finished_at: tiers, dataset listing,
  evictions, the runs);
- process: the wall time of the whole command (Python, Hydra, TensorFlow's import, planning,
  the cells, the analysis);

and the ratios cell / measured and process / measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _campaign(overrides: list[str], out: Path) -> float:
    """Wall seconds of one campaign command (its output discarded)."""
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "campaign", "-m", *overrides, f"hydra.sweep.dir={out}"],
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise RuntimeError(f"the campaign failed (exit {p.returncode}): {p.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - t0


def _times(out: Path) -> tuple[float, float]:
    """(sum of measured run seconds, sum of cell seconds) over the campaign's records."""
    measured = cell = 0.0
    for rec in out.glob("*/record.json"):
        r = json.loads(rec.read_text())
        measured += sum(run["seconds"] for run in r["runs"] if not run["warmup"])
        cell += (
            datetime.fromisoformat(r["finished_at"]) - datetime.fromisoformat(r["started_at"])
        ).total_seconds()
    return measured, cell


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--num-images", type=int, default=512)
    ap.add_argument("--cells", default="1,3", help="numbers of cells per campaign (threads 1, 2, 4, ...)")
    ap.add_argument("--storage", default="local", help="storage preset (its root holds the generated set)")
    args = ap.parse_args(argv)
    base = [
        "workload=microbench",
        f"storage={args.storage}",
        f"dataset.num_images={args.num_images}",
        f"repeats={args.repeats}",
        "warmup=0",
    ]
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        _campaign([*base, "threads=1", "repeats=1"], Path(tmp) / "generate")  # the set exists before timing
        print(
            f"{'cells':>5} {'measured s':>11} {'cell s':>8} {'process s':>10} {'cell/measured':>14} "
            f"{'process/measured':>17}"
        )
        for n in (int(c) for c in args.cells.split(",")):
            threads = ",".join(str(2**k) for k in range(n))
            out = Path(tmp) / f"cells{n}"
            wall = _campaign([*base, f"threads={threads}"], out)
            measured, cell = _times(out)
            print(
                f"{n:>5} {measured:>11.2f} {cell:>8.2f} {wall:>10.2f} "
                f"{cell / measured:>14.2f} {wall / measured:>17.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
