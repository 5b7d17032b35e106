"""Benchmark: TF's read-only pipeline versus fio over the same files, same parallelism, cold cache.

    python -m benchmarks.readonly_vs_fio [--storage-root /var/tmp] [--num-images 8192] [--threads 1,2,4,8]
                                         [--formats files,tfrecord] [--shard-mb 32]

For every format, thread count and repeat, the dataset is read once by the Section III-A read-only
pipeline (num_parallel_calls = threads; one run of a ``workload=readonly`` cell through the
campaign's run loop: device locks, eviction and cold-cache verification) and, evicted again, once by
fio with one job per thread over the same stored files: the image files (``files``: each job reads
its share whole in 4 KiB calls, buffered as read_file is; kernel readahead makes the device requests
large), or the TFRecord shards / HDF5 files (each job reads its share of the shards sequentially in
256 KiB calls, as TensorFlow's TFRecord reader; the pipeline interleaves ``threads`` shards). The
order of the two alternates between repeats. Prints medians and the median of the per-repeat ratios
TF / fio: the share of the device's rate over those files that the TF pipeline reaches.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

from benchmarks.presets import cell, dataset, run
from jobs import owned
from jobs.data import datasets, formats
from jobs.execution import tfstart
from jobs.storage import iotools


def _compare(ds, config: dict, n: int, farm: Path, args) -> tuple:
    """(TF MB/s, fio MB/s, median, min and max of TF/fio, TF's device/consumed) of ``n`` readers."""
    from jobs.storage import cache

    dirs = iotools.link_farm(list(ds.storage_files), farm, n)
    if len(dirs) < n:
        print(
            f"  ({ds.format}: {len(ds.storage_files)} file(s) for {n} readers: fio reads with {len(dirs)})",
            flush=True,
        )
    bs = "4k" if ds.format == "files" else "256k"
    tf_mb, fio_mb, ratios, cold = [], [], [], []
    try:
        for r in range(args.repeats):
            got = {}
            for who in ("tf", "fio") if r % 2 == 0 else ("fio", "tf"):
                if who == "tf":
                    # the seed names the dataset too (jobs.runner): every repeat reads the bytes fio reads
                    res = run(config, threads=n, seed=args.seed)  # evicts and verifies the cache itself
                    got["tf"] = res["mb_per_s"]
                    cold.append((res["bytes_read_device"] or 0) / res["bytes_consumed"])
                else:
                    cache.evict(ds.storage_files)
                    got["fio"] = iotools.small_files(dirs, bs).mb_per_s
            tf_mb.append(got["tf"])
            fio_mb.append(got["fio"])
            ratios.append(got["tf"] / got["fio"])
    finally:
        shutil.rmtree(farm, ignore_errors=True)
    return (
        statistics.median(tf_mb),
        statistics.median(fio_mb),
        statistics.median(ratios),
        min(ratios),
        max(ratios),
        statistics.median(cold),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.readonly_vs_fio", description=__doc__.split("\n")[0]
    )
    p.add_argument("--storage-root", default="/var/tmp", help="directory on the device to measure")
    p.add_argument("--dataset", default="imagenet_subset", help="dataset preset (conf/dataset)")
    # 8,192 images (about 1 GB): at the 1.5-2 GB/s a local SSD gives cold, 2,048 images read in 0.15 s,
    # and the pipeline's start (its threads, the first opens) was a quarter of what TF / fio measured
    p.add_argument("--num-images", type=int, default=8192)
    p.add_argument("--threads", default="1,2,4,8", help="comma-separated thread counts")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--formats", default="files,tfrecord", help="comma-separated dataset.format values")
    p.add_argument("--shard-mb", type=float, default=32.0, help="dataset.shard_mb of the converted sets")
    p.add_argument(
        "--shuffle",
        default="global",
        choices=["global", "local", "none"],
        help="the pipeline's sample order (fio reads each file front to back)",
    )
    args = p.parse_args(argv)
    if shutil.which("fio") is None:
        print("benchmark: fio is not on PATH (Debian: apt-get install fio)", file=sys.stderr)
        return 2
    tfstart.import_under(args.storage_root)  # its start-up lines in a file, not on the terminal

    source = dataset(args.storage_root, args.dataset, args.num_images, args.seed)
    threads = [int(t) for t in args.threads.split(",")]
    farm = owned.under_tool_folder(args.storage_root, setting="--storage-root") / f"bench-{os.getpid()}"
    rows = []
    try:
        for fmt in args.formats.split(","):
            ds = formats.ensure(
                source, fmt, args.shard_mb, datasets.cache_dir(args.storage_root, formats.CONVERTED)
            )
            config = cell(
                [
                    "workload=readonly",
                    f"dataset={args.dataset}",
                    f"dataset.num_images={args.num_images}",
                    f"dataset.format={fmt}",
                    f"dataset.shard_mb={args.shard_mb}",
                    f"storage.root={args.storage_root}",
                    "cache=cold",
                    "batch_size=64",
                    "prefetch=0",
                    f"shuffle={args.shuffle}",
                ]
            )
            for n in threads:
                rows.append((fmt, n, *_compare(ds, config, n, farm / f"{fmt}{n}", args)))
    finally:
        shutil.rmtree(farm, ignore_errors=True)
    ds = source
    mount = __import__("jobs.observe.provenance", fromlist=["mount_of"]).mount_of(ds.location)
    print(
        f"dataset {ds.name}: {len(ds.files)} files, {ds.total_bytes / 1e6:.0f} MB, median "
        f"{statistics.median(ds.sizes) / 1e3:.0f} KB, on {mount.source} ({mount.fs_type}); "
        f"{args.repeats} repeats, cold cache before every read, shuffle={args.shuffle}"
    )
    print(
        f"{'format':>8} {'threads':>7} {'TF MB/s':>9} {'fio MB/s':>9} {'TF/fio':>7} {'(min-max)':>12} "
        f"{'TF device/consumed':>19}"
    )
    for fmt, n, t, f, ratio, lo, hi, c in rows:
        print(f"{fmt:>8} {n:>7} {t:>9.1f} {f:>9.1f} {ratio:>7.2f} {f'({lo:.2f}-{hi:.2f})':>12} {c:>19.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
