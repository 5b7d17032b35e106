"""Benchmark: do the modelled tiers behave like what they model? (FUSE; root or fusermount3)

    python -m benchmarks.modeled_disk [--seconds 5] [--file-mb 1024] [--depths 1,4,8,32]
    python -m benchmarks.modeled_disk --tier modeled_lustre [--jobs 1,2,4,8] [--file-mb 256]

Mounts the modelled tier (``conf/storage/modeled_hdd.yaml``'s drive) in a folder of its own, lays
out one file through it and runs fio with O_DIRECT (no page cache): random 4 KiB and 112 KiB reads
(the paper's median image) at each queue depth, and sequential 1 MiB reads. Two placements:

- ``full stroke``: the drive's capacity is set to the file's size, so random offsets seek across the
  whole stroke, as the published figures (whole-disk random I/O) do;
- ``1 GB of 4 TB``: the file where a fresh file system puts it on the 4 TB drive, as a dataset sits;
  seeks are short and rotation dominates.

Prints IOPS, MB/s and the mean latency beside the published range of the drive class (``REFERENCE``;
docs/storage.md, "Modelled tiers", gives the sources).

``--tier modeled_lustre`` mounts ``conf/storage/modeled_lustre.yaml``'s file system instead and runs
fio with N jobs, each reading its own file (random 112 KiB reads, queue depth 1: one reader thread
each, as the micro-benchmark's), then one job reading one file in order (1 MiB). Prints the total
IOPS and MB/s, the speed-up over one job, how many OSTs served at once, and what the model's own
figures give for one job (the OST's latency, transfer and round trip), so the layer's overhead shows.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from jobs import owned

# (low, high) of 7,200 rpm drives: IOPS for random reads, MB/s for sequential ones
REFERENCE = {
    "rand 4K qd1": (75, 100),
    "rand 4K qd32": (150, 250),
    "rand 112K qd1": (60, 90),
    "seq 1M qd1": (150, 200),
}


def fio(folder: Path, rw: str, bs: str, depth: int, seconds: float, size: int) -> tuple[float, float, float]:
    """(IOPS, MB/s, mean completion latency in ms) of one fio job on ``folder/fio.dat``, O_DIRECT."""
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
    return float(job["iops"]), float(job["bw_bytes"]) / 1e6, float(job["clat_ns"]["mean"]) / 1e6


def _tests(depths: list[int]) -> list[tuple[str, str, str, int]]:
    tests = [(f"rand 4K qd{d}", "randread", "4k", d) for d in depths]
    tests += [(f"rand 112K qd{d}", "randread", "112k", d) for d in depths]
    return tests + [("seq 1M qd1", "read", "1m", 1)]


def measure(
    capacity_gb: float | None, file_bytes: int, depths: list[int], seconds: float, workdir: Path
) -> dict:
    """The fio matrix on a freshly mounted modelled HDD (``capacity_gb`` None: the preset's)."""
    from jobs.storage.modeled import mount

    preset = _preset("modeled_hdd")
    geometry = preset if capacity_gb is None else dataclasses.replace(preset, capacity_gb=capacity_gb)
    backing, at = workdir / "backing", workdir / "mnt"
    tier = mount.setup("modeled_hdd", str(backing), str(at), geometry)
    try:
        if not (at / "fio.dat").exists():
            subprocess.run(
                [
                    "fio",
                    "--name=lay",
                    "--filename=fio.dat",
                    f"--size={file_bytes}",
                    "--rw=write",
                    "--bs=1m",
                    "--direct=1",
                    "--output-format=json",
                ],
                cwd=at,
                capture_output=True,
                check=True,
            )
        return {name: fio(at, rw, bs, d, seconds, file_bytes) for name, rw, bs, d in _tests(depths)}
    finally:
        mount.teardown(tier)


def _preset(name: str):
    from omegaconf import OmegaConf

    from jobs.cell import typed
    from jobs.schema import ModelConf
    from jobs.storage.modeled import mount

    preset = OmegaConf.load(Path(__file__).resolve().parent.parent / "conf" / "storage" / f"{name}.yaml")
    return mount.geometry_of(typed(ModelConf, OmegaConf.to_container(preset)["model"]))


def measure_lustre(file_bytes: int, jobs: list[int], seconds: float, workdir: Path) -> dict:
    """fio on a freshly mounted modelled Lustre: N jobs of random 112 KiB reads on files of their own,
    and one sequential 1 MiB reader; (IOPS, MB/s, mean latency ms, peak OSTs) per test."""
    from jobs.storage.modeled import mount

    out = {}
    for n in [*jobs, 0]:  # a fresh mount for each test: its counters (peak OSTs) are the test's own
        tier = mount.setup(
            "modeled_lustre", str(workdir / "backing"), str(workdir / "mnt"), _preset("modeled_lustre")
        )
        try:
            rw, bs, k = ("randread", "112k", n) if n else ("read", "1m", 1)
            cmd = [
                "fio",
                "--name=t",
                f"--numjobs={k}",
                "--filename_format=f.$jobnum",
                f"--size={file_bytes}",
                f"--rw={rw}",
                f"--bs={bs}",
                "--iodepth=1",
                "--ioengine=psync",
                "--direct=1",
                "--group_reporting",
                f"--runtime={seconds}",
                "--time_based",
                "--randrepeat=0",
                "--output-format=json",
            ]
            res = subprocess.run(cmd, cwd=tier.mount, capture_output=True, text=True, check=True).stdout
            job = json.loads(res[res.index("{") :])["jobs"][0]["read"]
            c = mount.counters(tier.device)
        finally:
            mount.teardown(tier)
        name = f"rand 112K, {n} job{'s' if n > 1 else ''}" if n else "seq 1M, 1 job"
        out[name] = (
            float(job["iops"]),
            float(job["bw_bytes"]) / 1e6,
            float(job["clat_ns"]["mean"]) / 1e6,
            c["peak_osts"],
            c["late"],
        )
    return out


def main_lustre(args) -> int:
    g = _preset("modeled_lustre")
    jobs = [int(j) for j in args.jobs.split(",")]
    work = owned.ensure(args.workdir, "--workdir", own_from=owned.own_from_of(args.workdir))
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        res = measure_lustre(args.file_mb << 20, jobs, args.seconds, Path(tmp))
    read = 112 << 10  # bytes of one random read, the fio tests' 112K
    one = g.rpc_rtt_ms / 1e3 + g.ost_s(read) + g.link_s(read)
    base = next(iter(res.values()))[0]  # speed-ups are over the first --jobs value, named in the header
    vs = f"{jobs[0]} job{'s' if jobs[0] > 1 else ''}"
    print(f"{'test':<20}{'IOPS':>8}{'MB/s':>8}{'lat ms':>8}{'vs ' + vs:>14}{'peak OSTs':>11}{'late':>6}")
    for name, (iops, mb, lat, peak, late) in res.items():
        up = f"{iops / base:.2f}x" if name.startswith("rand") else ""
        print(f"{name:<20}{iops:>8.0f}{mb:>8.1f}{lat:>8.2f}{up:>14}{peak:>11}{late:>6}")
    transfer_ms, link_ms = g.ost_s(read) * 1e3 - g.ost_latency_ms, g.link_s(read) * 1e3
    print(
        f"model, one job of 112 KiB reads: {1 / one:.0f} IOPS, {one * 1e3:.2f} ms a read "
        f"(OST {g.ost_latency_ms} ms + {transfer_ms:.2f} ms of transfer, link {link_ms:.2f} ms, "
        f"round trip {g.rpc_rtt_ms} ms); one stream: {g.ost_mb_s * g.rate_scale:.0f} MB/s "
        f"(rates x{g.rate_scale})"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.modeled_disk", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="fio run time of each test")
    ap.add_argument("--file-mb", type=int, default=1024, help="size of the test file, MiB")
    ap.add_argument("--depths", default="1,4,8,32", help="queue depths of the random tests")
    ap.add_argument(
        "--tier", default="modeled_hdd", choices=["modeled_hdd", "modeled_lustre"], help="which modelled tier"
    )
    ap.add_argument("--jobs", default="1,2,4,8", help="modeled_lustre: readers at once, each on its own file")
    ap.add_argument(
        "--workdir",
        default="/var/tmp/iocampaign/bench/modeled_disk",
        help="the benchmark's own folder (created; its backing file is kept for the next run)",
    )
    args = ap.parse_args(argv)
    from jobs.storage.modeled import mount

    why = mount.available()
    if why:
        print(f"modelled tier unavailable: {why}", file=sys.stderr)
        return 2
    if args.tier == "modeled_lustre":
        return main_lustre(args)
    depths = [int(d) for d in args.depths.split(",")]
    size = args.file_mb << 20
    work = owned.ensure(args.workdir, "--workdir", own_from=owned.own_from_of(args.workdir))
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        full = measure(size / 1e9, size, depths, args.seconds, Path(tmp))
        packed = measure(None, size, depths, args.seconds, Path(tmp))
    print(f"{'test':<16}{'full stroke':>26}{'1 GB of 4 TB':>26}   published, 7,200 rpm class")
    print(f"{'':<16}{'IOPS    MB/s   lat ms':>26}{'IOPS    MB/s   lat ms':>26}")
    for name in full:
        ref = REFERENCE.get(name)
        unit = "MB/s" if name.startswith("seq") else "IOPS"
        cells = "".join(f"{r[0]:>10.0f}{r[1]:>8.1f}{r[2]:>8.2f}" for r in (full[name], packed[name]))
        print(f"{name:<16}{cells}   {f'{ref[0]}-{ref[1]} {unit}' if ref else ''}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
