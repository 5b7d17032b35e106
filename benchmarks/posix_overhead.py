"""Benchmark: what tracing every POSIX call (``trace.posix=true``, dftracer's preload) costs a run.

    python -m benchmarks.posix_overhead [--storage-root /var/tmp] [--num-images 2048] [--threads 1,4]
                                        [--workloads readonly,microbench] [--rounds 7] [--repeats 2]
                                        [--modes all,extra] [--cache cold|warm]

The same cell is measured without and with tracing, side by side: for each mode, in every round,
``--repeats`` runs untraced and traced (the order alternating between rounds, ``benchmarks.rounds``)
through the campaign's own run loop, the traced ones in the child process the campaign starts for them.
Modes (``trace.runs``): ``all``, every measured run traced; ``extra``, the measured runs untraced and
one more run traced. Prints, per mode, the median images/s of the measured runs, the median of the
per-round ratios traced ÷ untraced with its interval, the machine's load, the CPU share other processes
took and each side's CPU per image, what the cell's whole measurement took against the untraced cell's
(the extra run and its child's start-up), the calls traced per second, the trace's size per call and
the traced runs' coverage.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import rounds
from benchmarks.presets import cell, dataset, quiet
from jobs.execution import tfstart

Runs = list[dict]  # run records, as the runner returns them
UNTRACED = "untraced"  # the side without tracing


def _measure(config: dict, mode: str | None, repeats: int, seed: int) -> tuple[Runs, Runs, float]:
    """(measured runs, traced runs, seconds the whole measurement took, waits for the device's lock left
    out) of one cell; ``mode`` None: untraced."""
    from jobs import runner
    from jobs.cell import Cell
    from jobs.observe import posix

    trace = {"posix": False} if mode is None else {"posix": True, "runs": mode}
    config = {**config, "trace": trace, "repeats": repeats, "warmup": 0, "seed": seed}
    with tempfile.TemporaryDirectory(prefix="iocampaign-bench-") as job_dir:
        t0 = time.perf_counter()
        runs, _, prov = runner.measure(Cell.from_data(config), Path(job_dir))
        # the measurement's own time: not the wait for another campaign's cell on the same device
        took = time.perf_counter() - t0 - prov.get("device_lock_wait_s", 0.0)
        traced = [r for r in runs if "posix_calls" in r]
        if traced:
            size = sum(f.stat().st_size for f in posix.trace_files(Path(job_dir) / posix.SUBDIR))
            for r in traced:  # the trace also holds the eviction's calls between runs: an upper bound
                r["bytes_per_call"] = size / max(1, sum(x["posix_calls"] for x in traced))
    return [r for r in runs if not r.get("traced_extra")], traced, took


def _rows(config: dict, workload: str, n: int, modes: list[str], args) -> list[tuple]:
    """One row per mode, each against its own untraced runs: ``--rounds`` rounds of untraced and traced
    measurements, the order alternating (one mode's rounds end before the next mode's start, so a traced
    child's after-effects on the machine never fall on another mode's runs)."""
    rows = []
    for mode in modes:
        got: dict[tuple[int, str], tuple[Runs, Runs, float]] = {}

        def measure(r: int, side: str, mode=mode, got=got) -> rounds.Pass:
            load1 = os.getloadavg()[0]
            # the last measurement's writes (a trace, a generated set) are not flushed during this one
            os.sync()
            got[r, side] = measured, _, _ = _measure(
                config, None if side == UNTRACED else mode, args.repeats, args.seed + r
            )
            others = [x["other_cpu_share"] for x in measured if x.get("other_cpu_share") is not None]
            return rounds.Pass(
                f"{workload}/{n}/{mode}",
                r,
                side,
                statistics.median(x["images_per_s"] for x in measured),
                sum(x["images"] for x in measured),
                sum(x["cpu_s"] for x in measured),  # the measured runs' own (a traced one's in its child)
                statistics.median(others) if others else None,
                load1,
            )

        s = rounds.summarize(rounds.run((UNTRACED, mode), measure, [(mode, UNTRACED)], args), mode, UNTRACED)
        time_ratios = [got[r, mode][2] / got[r, UNTRACED][2] for r in {r for r, _ in got}]
        untraced = [x for (_, side), v in got.items() if side == UNTRACED for x in v[0]]
        traced = [x for (_, side), v in got.items() if side == mode for x in v[1]]
        rows.append(
            (
                workload,
                n,
                mode,
                statistics.median(x["images_per_s"] for x in untraced),
                s,
                statistics.median(time_ratios),
                statistics.median(x["posix_calls"] / x["seconds"] for x in traced),
                statistics.median(x["bytes_per_call"] for x in traced),
                min(x["posix_coverage"] or 0 for x in traced),
                sum(not x["posix_complete"] for x in traced),
                len(traced),
            )
        )
    return rows


@quiet  # TensorFlow's and CUDA's lines in a file, not on the terminal
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.posix_overhead", description=__doc__.split("\n")[0]
    )
    p.add_argument("--storage-root", default="/var/tmp", help="directory on the device to measure")
    p.add_argument("--dataset", default="imagenet_subset", help="dataset preset (conf/dataset)")
    p.add_argument("--num-images", type=int, default=2048)
    p.add_argument("--threads", default="1,4", help="comma-separated thread counts")
    p.add_argument("--workloads", default="readonly,microbench", help="comma-separated workload presets")
    rounds.add_arguments(p, "--rounds")
    p.add_argument("--repeats", type=int, default=2, help="runs of each mode per round")
    p.add_argument(
        "--cache",
        default="cold",
        choices=["cold", "warm"],
        help="warm: the set in the page cache, so the disk's swings leave the tracer's CPU cost alone",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--modes", default="all,extra", help="trace.runs values to compare with untraced runs: all, extra"
    )
    args = p.parse_args(argv)
    modes = args.modes.split(",")
    if not modes or not set(modes) <= {"all", "extra"}:
        p.error(f"--modes={args.modes}: give all, extra or both")
    tfstart.import_under(args.storage_root, keras="alexnet" in args.workloads)  # start-up lines in a file
    ds = dataset(args.storage_root, args.dataset, args.num_images, args.seed)
    rows = []
    for workload in args.workloads.split(","):
        base = cell(
            [
                f"workload={workload}",
                f"dataset={args.dataset}",
                f"dataset.num_images={args.num_images}",
                f"storage.root={args.storage_root}",
                f"cache={args.cache}",
                "batch_size=64",
                "prefetch=0",
            ]
        )
        for n in [int(t) for t in args.threads.split(",")]:
            rows += _rows({**base, "threads": n}, workload, n, modes, args)
    from jobs.observe.provenance import mount_of

    mount = mount_of(ds.location)
    print(
        f"dataset {ds.name}: {len(ds.files)} files, {ds.total_bytes / 1e6:.0f} MB "
        f"on {mount.source} ({mount.fs_type}); at least {args.rounds} rounds x {args.repeats} "
        f"{args.cache}-cache measured runs of each mode, order alternating"
    )
    print(
        f"{'workload':>10} {'threads':>7} {'trace.runs':>10} {'untraced':>9} {'measured':>9} "
        f"{'measured/untraced':>17} {rounds.HEADER} {'cell time':>9} {'calls/s':>9} {'B/call':>7} "
        f"{'min coverage':>12} {'incomplete':>10}"
    )
    for w, n, mode, off, s, took, calls, per_call, cov, bad, traced in rows:
        print(
            f"{w:>10} {n:>7} {mode:>10} {off:>9.0f} {s.rate_a:>9.0f} {s.ratio:>17.3f} {rounds.columns(s)} "
            f"{took:>8.2f}x {calls:>9.0f} {per_call:>7.1f} {cov:>12.3f} {f'{bad} of {traced}':>10}"
        )
    print(rounds.legend("CPU ms per image of the measured runs", "the traced cell", "the untraced one"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
