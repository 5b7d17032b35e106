"""Benchmark: the campaign's PyTorch path against a bare hand-written DataLoader loop, same cold files.

    python -m benchmarks.pytorch_vs_dataloader [--storage-root /var/tmp] [--num-images 2048]
                                               [--workers 1,2,4] [--rounds 7] [--max-rounds N]
                                               [--batch-size 64] [--log passes.csv]

For every worker count and round, the dataset's image files are evicted from the page cache (the tool's
own ``jobs.storage.cache.evict``) and read once by each of

- ``campaign``: ``jobs.frameworks.pytorch.torch_reading.run_once``, the micro-benchmark's timed loop of
  a ``framework=pytorch`` cell (decode_resize, shuffle=global), and
- ``bare``: what a user writes: a ``torch.utils.data.Dataset`` whose ``__getitem__`` opens the file,
  reads it and decodes it with PIL (``convert("RGB")``, a bilinear resize to the same side, a float32
  tensor), ``DataLoader(shuffle=True)`` with the same batch size, workers and prefetch factor, and the
  default collate;

in an order that alternates between rounds (``benchmarks.rounds``). Both are timed the same way, from
``iter(loader)`` to the last batch. Prints each one's median images/s and the median of the per-round
ratios campaign / bare with its interval: what the campaign's bookkeeping (sample records, dropped-image
accounting, counters) costs against the plainest loop (goal: at least 0.95); beside it, the machine's
load, the CPU share other processes took and each side's CPU per image, so that a ratio taken on a busy
machine says so. The campaign's runs also say how much of what they consumed came from the device
(cold: about 1).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from benchmarks.presets import quiet


class BareImages:
    """The plainest map-style dataset: open, read, decode, resize, a float32 tensor, and the label."""

    def __init__(self, files, labels, side: int):
        self.files, self.labels, self.side = list(files), list(labels), side

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        import io

        import torch
        from PIL import Image

        with open(self.files[i], "rb") as f:
            data = f.read()
        with Image.open(io.BytesIO(data)) as img:
            rgb = img.convert("RGB").resize((self.side, self.side), Image.BILINEAR)
        return torch.from_numpy(np.asarray(rgb, dtype=np.float32)), self.labels[i]


def bare(ds, workers: int, batch_size: int, side: int, seed: int) -> float:
    """Images/s of one pass of the hand-written loop (from ``iter`` to the last batch)."""
    import gc

    import torch
    from torch.utils.data import DataLoader

    # what this process left to collect is collected here, before the workers fork: a worker that collects
    # an iterator of TensorFlow's (a test process's earlier tests) hangs on its thread pool, and a
    # collection inside the timed pass is not the loader's time
    gc.collect()

    loader = DataLoader(
        BareImages(ds.files, ds.labels, side),
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
        num_workers=workers,
        prefetch_factor=2 if workers else None,
    )
    n = 0
    t0 = time.perf_counter()
    for images, _ in loader:
        n += len(images)
    seconds = time.perf_counter() - t0
    assert n == len(ds.files), (n, len(ds.files))
    return n / seconds


def campaign(ds, workers: int, batch_size: int, side: int, seed: int) -> tuple[float, float]:
    """(images/s, device bytes / consumed) of one run of the micro-benchmark's PyTorch loop."""
    from jobs.frameworks.pytorch import torch_reading
    from jobs.frameworks.pytorch.loader.build import Loader
    from jobs.workloads.microbench.run import RunSettings

    s = RunSettings(
        pipeline="decode_resize",
        threads=workers,
        batch_size=batch_size,
        prefetch=0,
        image_side=side,
        batches=None,
        seed=seed,
    )
    r = torch_reading.run_once(ds, s, Loader(workers, 2 if workers else None, False, False, None))
    assert r.images == len(ds.files) and r.images_dropped == 0, r
    return r.images_per_s, (r.bytes_read_device or 0) / r.bytes_consumed


@quiet  # TensorFlow's and CUDA's lines in a file, not on the terminal
def main(argv: list[str] | None = None) -> int:
    from benchmarks import rounds

    p = argparse.ArgumentParser(
        prog="python -m benchmarks.pytorch_vs_dataloader", description=__doc__.split("\n")[0]
    )
    p.add_argument("--storage-root", default="/var/tmp", help="directory on the device to measure")
    p.add_argument("--dataset", default="imagenet_subset", help="dataset preset (conf/dataset)")
    p.add_argument("--num-images", type=int, default=2048)
    p.add_argument("--workers", default="1,2,4", help="comma-separated DataLoader worker counts")
    rounds.add_arguments(p, "--rounds")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-side", type=int, default=224)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    from benchmarks.presets import dataset
    from jobs.schema import PlatformConf
    from jobs.storage import cache, locks

    ds = dataset(args.storage_root, args.dataset, args.num_images, args.seed)
    rows = []
    for n in (int(w) for w in args.workers.split(",")):
        cold: list[float] = []

        def measure(r: int, who: str, n=n, cold=cold) -> rounds.Pass:
            # under the campaign's device lock: no campaign's cell reads the device meanwhile
            with locks.device_lock(PlatformConf.lock_dir, ds.files[0]):
                cache.evict(ds.files)
                watch = rounds.Watch()
                if who == "campaign":
                    rate, device = campaign(ds, n, args.batch_size, args.image_side, args.seed + r)
                    cold.append(device)
                else:
                    rate = bare(ds, n, args.batch_size, args.image_side, args.seed + r)
                return watch.done(f"workers={n}", r, who, rate, len(ds.files))

        passes = rounds.run(("campaign", "bare"), measure, [("campaign", "bare")], args)
        rows.append((n, rounds.summarize(passes, "campaign", "bare"), statistics.median(cold)))
    print(
        f"dataset {ds.name}: {len(ds.files)} files, {ds.total_bytes / 1e6:.0f} MB, decode_resize to "
        f"{args.image_side}x{args.image_side}, batch {args.batch_size}; at least {args.rounds} rounds, "
        "cold cache before every pass, the order alternating"
    )
    print(
        f"{'workers':>7} {'campaign img/s':>14} {'bare img/s':>10} {'campaign/bare':>13} {rounds.HEADER} "
        f"{'device/consumed':>15}"
    )
    for n, s, dev in rows:
        print(f"{n:>7} {s.rate_a:>14.1f} {s.rate_b:>10.1f} {s.ratio:>13.2f} {rounds.columns(s)} {dev:>15.2f}")
    print(rounds.legend("CPU ms per image", "campaign", "bare"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
