"""Benchmark: what tracing every POSIX call (``trace.posix=true``, dftracer's preload) costs a run.

    python -m benchmarks.posix_overhead [--storage-root /var/tmp] [--num-images 2048] [--threads 1,4]
                                        [--workloads readonly,microbench] [--rounds 3] [--repeats 2]

The same cell is measured without and with tracing, side by side: in every round, ``--repeats``
cold-cache runs of each (the order alternating between rounds) through the campaign's own run
loop, the traced ones in the child process the campaign starts for them. Prints the median
images/s of each, the median of the per-round ratios traced ÷ untraced (with their range), the
calls traced per second and the trace's size per call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.presets import cell, dataset


def _measure(config: dict, traced: bool, repeats: int, seed: int) -> list[dict]:
    from jobs import runner
    from jobs.observe import posix

    config = {**config, "trace": {"posix": traced}, "repeats": repeats, "warmup": 0, "seed": seed}
    with tempfile.TemporaryDirectory(prefix="iocampaign-bench-") as job_dir:
        runs, _, _ = runner.measure(config, Path(job_dir))
        if traced:
            size = sum(f.stat().st_size for f in posix.trace_files(Path(job_dir) / posix.SUBDIR))
            for r in runs:  # the trace also holds the eviction's calls between runs: an upper bound
                r["bytes_per_call"] = size / max(1, sum(x["posix_calls"] for x in runs))
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.posix_overhead", description=__doc__.split("\n")[0])
    p.add_argument("--storage-root", default="/var/tmp", help="directory on the device to measure")
    p.add_argument("--dataset", default="imagenet_subset", help="dataset preset (conf/dataset)")
    p.add_argument("--num-images", type=int, default=2048)
    p.add_argument("--threads", default="1,4", help="comma-separated thread counts")
    p.add_argument("--workloads", default="readonly,microbench", help="comma-separated workload presets")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2, help="runs of each mode per round")
    p.add_argument("--cache", default="cold", choices=["cold", "warm"],
                   help="warm: the set in the page cache, so the disk's swings leave the tracer's CPU cost alone")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    ds = dataset(args.storage_root, args.dataset, args.num_images, args.seed)
    rows = []
    for workload in args.workloads.split(","):
        base = cell([f"workload={workload}", f"dataset={args.dataset}", f"dataset.num_images={args.num_images}",
                     f"storage.root={args.storage_root}", f"cache={args.cache}", "batch_size=64", "prefetch=0"])
        for n in [int(t) for t in args.threads.split(",")]:
            config = {**base, "threads": n}
            got: dict[bool, list[dict]] = {False: [], True: []}
            ratios = []
            for r in range(args.rounds):
                this = {}
                for traced in ((False, True) if r % 2 == 0 else (True, False)):
                    this[traced] = _measure(config, traced, args.repeats, args.seed + r)
                    got[traced] += this[traced]
                ratios.append(statistics.median(x["images_per_s"] for x in this[True])
                              / statistics.median(x["images_per_s"] for x in this[False]))
            traced_runs = got[True]
            calls = statistics.median(x["posix_calls"] / x["seconds"] for x in traced_runs)
            per_call = statistics.median(x["bytes_per_call"] for x in traced_runs)
            rows.append((workload, n, statistics.median(x["images_per_s"] for x in got[False]),
                         statistics.median(x["images_per_s"] for x in traced_runs), statistics.median(ratios),
                         min(ratios), max(ratios), calls, per_call,
                         min(x["posix_coverage"] or 0 for x in traced_runs), sum(not x["posix_complete"] for x in traced_runs)))
    mount = __import__("jobs.observe.provenance", fromlist=["mount_of"]).mount_of(ds.location)
    print(f"dataset {ds.name}: {len(ds.files)} files, {ds.total_bytes / 1e6:.0f} MB on {mount.source} ({mount.fs_type}); "
          f"{args.rounds} rounds x {args.repeats} {args.cache}-cache runs of each mode, order alternating")
    print(f"{'workload':>10} {'threads':>7} {'untraced':>9} {'traced':>9} {'traced/untraced':>15} {'(min-max)':>12} "
          f"{'calls/s':>9} {'B/call':>7} {'min coverage':>12} {'incomplete':>10}")
    for w, n, off, on, ratio, lo, hi, calls, per_call, cov, bad in rows:
        print(f"{w:>10} {n:>7} {off:>9.0f} {on:>9.0f} {ratio:>15.3f} {f'({lo:.2f}-{hi:.2f})':>12} {calls:>9.0f} "
              f"{per_call:>7.1f} {cov:>12.3f} {bad:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
