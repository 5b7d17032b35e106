"""Benchmark: each framework's read-only pipeline versus fio over the same files, same parallelism, cold.

    python -m benchmarks.readonly_vs_fio [--storage-root /var/tmp] [--num-images 8192] [--threads 1,2,4,8]
                                         [--formats files,tfrecord] [--shard-mb 32] [--repeats 7]
                                         [--frameworks tensorflow,pytorch]

For every format, reader count and repeat, the dataset is read once by the Section III-A read-only
pipeline of each framework (``framework=tensorflow``: num_parallel_calls = threads;
``framework=pytorch``: a DataLoader of that many workers; one run of a ``workload=readonly`` cell
through the campaign's run loop: device locks, eviction and cold-cache verification) and, evicted
again, once by fio with one job per reader over the same stored files: the image files (``files``:
each job reads its share whole in 4 KiB calls, buffered as read_file is; kernel readahead makes the
device requests large), or the TFRecord shards / HDF5 files (each job reads its share of the shards
sequentially in 256 KiB calls, as TensorFlow's TFRecord reader; the pipeline interleaves ``threads``
shards, the DataLoader's workers read every ``workers``-th shard). The order of the readers rotates
between repeats (``benchmarks.rounds``). Prints medians and the median of the per-repeat ratios
framework / fio with its interval: the share of the device's rate over those files that the framework's
pipeline reaches; beside it the machine's load, the CPU share other processes took and each side's CPU
per MB: a pipeline decodes and parses on CPU that fio does not need, so on a busy machine its ratio
falls with the CPU it could not get.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

from benchmarks import rounds
from benchmarks.presets import cell, dataset, quiet, run
from jobs import owned
from jobs.data import datasets, formats
from jobs.execution import tfstart
from jobs.schema import PlatformConf
from jobs.storage import iotools, locks

LOCK_DIR = PlatformConf.lock_dir  # the campaign's device locks (platform.lock_dir)


def _compare(ds, configs: dict, n: int, farm: Path, args) -> list[tuple]:
    """For each framework of ``configs`` (name -> its cell): (framework, its ``rounds.Summary`` against fio,
    its device/consumed) of ``n`` readers, the readers' order rotating from round to round."""
    from jobs.storage import cache

    dirs = iotools.link_farm(list(ds.storage_files), farm, n)
    if len(dirs) < n:
        print(
            f"  ({ds.format}: {len(ds.storage_files)} file(s) for {n} readers: fio reads with {len(dirs)})",
            flush=True,
        )
    bs = "4k" if ds.format == "files" else "256k"
    key = f"{ds.format}/{n}"
    cold: dict[str, list[float]] = {fw: [] for fw in configs}

    def measure(r: int, who: str) -> rounds.Pass:
        if who == "fio":
            # under the campaign's device lock, as the frameworks' runs are: no other cell reads
            with locks.device_lock(LOCK_DIR, ds.storage_files[0]):
                cache.evict(ds.storage_files)
                watch = rounds.Watch()
                got = iotools.small_files(dirs, bs)  # fio is a waited-for child: its CPU is counted
                return watch.done(key, r, who, got.mb_per_s, got.bytes / 1e6)
        load1 = os.getloadavg()[0]
        # the seed names the dataset too (jobs.runner): every round reads the bytes fio reads
        res = run(configs[who], threads=n, seed=args.seed)  # evicts and verifies the cache itself
        cold[who].append((res["bytes_read_device"] or 0) / res["bytes_consumed"])
        # the run's own usage window: its timed interval, its DataLoader workers' CPU included
        mb = res["bytes_consumed"] / 1e6
        return rounds.Pass(key, r, who, res["mb_per_s"], mb, res["cpu_s"], res["other_cpu_share"], load1)

    try:
        passes = rounds.run([*configs, "fio"], measure, [(fw, "fio") for fw in configs], args)
    finally:
        shutil.rmtree(farm, ignore_errors=True)
    return [(fw, rounds.summarize(passes, fw, "fio"), statistics.median(cold[fw])) for fw in configs]


@quiet  # TensorFlow's and CUDA's lines in a file, not on the terminal
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.readonly_vs_fio", description=__doc__.split("\n")[0]
    )
    p.add_argument("--storage-root", default="/var/tmp", help="directory on the device to measure")
    p.add_argument("--dataset", default="imagenet_subset", help="dataset preset (conf/dataset)")
    # 8,192 images (about 1 GB): at the 1.5-2 GB/s a local SSD gives cold, 2,048 images read in 0.15 s,
    # and the pipeline's start (its threads, the first opens) was a quarter of what TF / fio measured
    p.add_argument("--num-images", type=int, default=8192)
    p.add_argument("--threads", default="1,2,4,8", help="comma-separated reader counts (threads, workers)")
    rounds.add_arguments(p, "--repeats", "--rounds", help_name="repeats (rounds)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--formats", default="files,tfrecord", help="comma-separated dataset.format values")
    p.add_argument("--shard-mb", type=float, default=32.0, help="dataset.shard_mb of the converted sets")
    p.add_argument(
        "--shuffle",
        default="global",
        choices=["global", "local", "none"],
        help="the pipeline's sample order (fio reads each file front to back)",
    )
    p.add_argument(
        "--frameworks",
        default="tensorflow",
        help="comma-separated framework presets (conf/framework), each measured against the same fio",
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
            configs = {
                fw: cell(
                    [
                        f"framework={fw}",
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
                for fw in args.frameworks.split(",")
            }
            for n in threads:
                rows += [(fmt, n, *row) for row in _compare(ds, configs, n, farm / f"{fmt}{n}", args)]
    finally:
        shutil.rmtree(farm, ignore_errors=True)
    ds = source
    mount = __import__("jobs.observe.provenance", fromlist=["mount_of"]).mount_of(ds.location)
    print(
        f"dataset {ds.name}: {len(ds.files)} files, {ds.total_bytes / 1e6:.0f} MB, median "
        f"{statistics.median(ds.sizes) / 1e3:.0f} KB, on {mount.source} ({mount.fs_type}); at least "
        f"{args.rounds} repeats, the readers' order rotating, cold cache before every read, "
        f"shuffle={args.shuffle}"
    )
    print(
        f"{'format':>8} {'readers':>7} {'framework':>10} {'MB/s':>9} {'fio MB/s':>9} {'/fio':>5} "
        f"{rounds.HEADER} {'device/consumed':>15}"
    )
    for fmt, n, fw, s, c in rows:
        print(
            f"{fmt:>8} {n:>7} {fw:>10} {s.rate_a:>9.1f} {s.rate_b:>9.1f} {s.ratio:>5.2f} {rounds.columns(s)} "
            f"{c:>15.2f}"
        )
    print(rounds.legend("CPU ms per MB", "the framework", "fio"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
