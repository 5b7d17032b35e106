"""Benchmark: does each emulated tier behave like the device it stands for? (root)

    python -m benchmarks.tiers [--tiers emulated_hdd,emulated_ssd,emulated_optane] [--seconds 5]

Builds each emulated tier as a campaign cell does (loop device, ext4, a cgroup's throttles on
bandwidth and, where the preset sets them, on requests per second: cgroup v1's blkio or cgroup v2's
io.max, whichever the machine has, printed in the header; this is the real-kernel check of either),
then, inside the tier's cgroup, runs fio on a 1 GB file with O_DIRECT (no page cache): random 4 KB
and 112 KB reads (the paper's median image) at queue depth 1 and 8, and sequential 1 MiB reads.
Prints IOPS and MB/s beside the range a real device of that class delivers (datasheets and published
fio figures; ``REFERENCE`` below), and the same tests on the disk under the tiers (``--under``),
which no emulation can exceed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from jobs import owned

TESTS = (  # name, fio rw, block size, queue depth
    ("rand 4K qd1", "randread", "4k", 1),
    ("rand 4K qd8", "randread", "4k", 8),
    ("rand 112K qd1", "randread", "112k", 1),
    ("rand 112K qd8", "randread", "112k", 8),
    ("seq 1M qd1", "read", "1m", 1),
)
# (low, high) of a real device of the class: IOPS for the random tests, MB/s for the sequential one
REFERENCE = {
    "emulated_hdd": {
        "rand 4K qd1": (75, 200),
        "rand 4K qd8": (100, 400),
        "rand 112K qd1": (60, 180),
        "rand 112K qd8": (80, 300),
        "seq 1M qd1": (120, 250),
    },
    "emulated_ssd": {
        "rand 4K qd1": (3000, 15000),
        "rand 4K qd8": (15000, 90000),
        "rand 112K qd1": (1000, 4000),
        "rand 112K qd8": (2000, 5000),
        "seq 1M qd1": (250, 560),
    },
    "emulated_optane": {
        "rand 4K qd1": (50000, 90000),
        "rand 4K qd8": (250000, 575000),
        "rand 112K qd1": (10000, 25000),
        "rand 112K qd8": (14000, 24000),
        "seq 1M qd1": (1600, 2700),
    },
}
FILE_BYTES = 1 << 30


def fio(
    folder: Path, rw: str, bs: str, depth: int, seconds: float, size: int = FILE_BYTES
) -> tuple[float, float]:
    """(IOPS, MB/s) of one fio job on ``folder/fio.dat`` (``size`` bytes, written before) with O_DIRECT."""
    cmd = [
        "fio",
        "--name=t",
        "--filename=fio.dat",
        f"--size={size}",
        f"--rw={rw}",
        f"--bs={bs}",
        f"--iodepth={depth}",
        "--ioengine=libaio",
        "--direct=1",
        f"--runtime={seconds}",
        "--time_based",
        "--randrepeat=0",
        "--output-format=json",
    ]
    out = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, check=True).stdout
    job = json.loads(out[out.index("{") :])["jobs"][0]["read"]
    return float(job["iops"]), float(job["bw_bytes"]) / 1e6


def _matrix(folder: Path, seconds: float) -> dict[str, tuple[float, float]]:
    subprocess.run(
        [
            "fio",
            "--name=lay",
            "--filename=fio.dat",
            f"--size={FILE_BYTES}",
            "--rw=write",
            "--bs=1m",
            "--direct=1",
            "--output-format=json",
        ],
        cwd=folder,
        capture_output=True,
        check=True,
    )
    return {name: fio(folder, rw, bs, depth, seconds) for name, rw, bs, depth in TESTS}


def measure_tier(name: str, seconds: float) -> dict[str, tuple[float, float]]:
    """The fio matrix on emulated tier ``name`` (its preset in conf/storage), inside its cgroup."""
    from benchmarks.presets import cell
    from jobs.storage import locks, tiers

    cfg = cell([f"storage={name}"])
    st, em = cfg["storage"], cfg["storage"]["emulate"]
    lock = locks.tier_lock_path(cfg["platform"]["lock_dir"], name)
    with locks.all_of({lock: f"emulated tier {name}"}, float(cfg["platform"]["lock_timeout_min"]) * 60):
        t = tiers.setup(
            name,
            em["image_dir"],
            st["root"],
            em["size_gb"],
            em["read_mb_s"],
            em["write_mb_s"],
            int(em.get("read_iops") or 0),
            int(em.get("write_iops") or 0),
        )
        folder = owned.under_tool_folder(st["root"], setting="storage.root") / f"bench-{os.getpid()}"
        try:
            folder.mkdir()
            cg = tiers.join_all([t])
            try:
                return _matrix(folder, seconds)
            finally:
                tiers.leave_all(cg)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            tiers.teardown(t)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tiers", description=__doc__.split("\n")[0])
    p.add_argument("--tiers", default="emulated_hdd,emulated_ssd,emulated_optane")
    p.add_argument("--seconds", type=float, default=5.0, help="time per fio test")
    p.add_argument("--under", default="/var/tmp", help="a folder on the disk under the tiers, measured alike")
    args = p.parse_args(argv)
    from jobs.storage import tiers

    why = tiers.available() or (None if shutil.which("fio") else "fio is not on PATH (apt-get install fio)")
    if why:
        print(f"benchmark: {why}", file=sys.stderr)
        return 2
    rows = {}
    with tempfile.TemporaryDirectory(prefix="iocampaign-bench-", dir=args.under) as d:
        rows["disk under the tiers"] = _matrix(Path(d), args.seconds)
    for name in args.tiers.split(","):
        rows[name] = measure_tier(name, args.seconds)
    from jobs.storage import throttle

    print(
        f"fio, O_DIRECT, 1 GB file, {args.seconds:g} s per test; throttle: {throttle.current()[0].name}; "
        "reference: a real device of the class"
    )
    print(f"{'tier':<20} {'test':<14} {'IOPS':>9} {'MB/s':>8}   {'reference':>18}  in range")
    for name, got in rows.items():
        for test, (iops, mb) in got.items():
            lo_hi = REFERENCE.get(name, {}).get(test)
            value, unit = (mb, "MB/s") if test.startswith("seq") else (iops, "IOPS")
            ref = f"{lo_hi[0]:,}-{lo_hi[1]:,} {unit}" if lo_hi else ""
            ok = (
                ""
                if not lo_hi
                else ("yes" if lo_hi[0] <= value <= lo_hi[1] else ("below" if value < lo_hi[0] else "above"))
            )
            print(f"{name:<20} {test:<14} {iops:>9.0f} {mb:>8.1f}   {ref:>18}  {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
