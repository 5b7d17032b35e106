"""Benchmark: how completely does prefetch hide the input pipeline behind AlexNet's compute?

    python -m benchmarks.overlap [--storage-root /var/tmp] [--num-images 1024] [--threads 2]
                                 [--read-delay-ms 0,4] [--repeats 7]

Per repeat and input latency, these runs over the same files (cold cache before each), their order
rotating from repeat to repeat (``benchmarks.rounds``):
  input-only    iterate the pipeline (read, decode, resize, one-hot, batch) without training;
  compute-only  train the same number of steps on one cached batch;
  prefetch      train on the pipeline with prefetch(1);
  no-prefetch   train on the pipeline without prefetch.
overlap efficiency = max(compute-only, input-only) / prefetch runtime: 1.0 means prefetch hid the
cheaper of the two completely (the paper's claim), below 1.0 is what overlapping cost. Beside it: its
interval over the repeats, the machine's load, the CPU share other processes took and the CPU per image
of training with prefetch and of the slower of input and compute. The training runs are runs of a
``workload=alexnet_small`` cell through the campaign's run loop. The first step (graph tracing) is
left out of every runtime. ``--read-delay-ms`` adds a sleep to every file
read, making input slower than compute without using CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

from benchmarks import rounds
from benchmarks.presets import cell, dataset, quiet, run
from jobs.execution import tfstart

WHAT = ("input", "compute", "prefetch", "no-prefetch")  # the runs of a repeat, in round 0's order


def _with_slower(passes: list[rounds.Pass]) -> list[rounds.Pass]:
    """``passes`` and, for each round, the slower of input and compute as side ``slower``:
    max(input, compute) / prefetch is prefetch's rate over the slower one's."""
    out = list(passes)
    for r in sorted({p.round for p in passes}):
        both = [p for p in passes if p.round == r and p.side in ("input", "compute")]
        if len(both) == 2:
            out.append(dataclasses.replace(min(both, key=lambda p: p.rate), side="slower"))
    return out


def compute_only(ds, s) -> float:
    """Seconds for one epoch of training steps on one batch in the device's memory, first step excluded."""
    import tensorflow as tf

    from jobs.frameworks.tensorflow import overlap
    from jobs.frameworks.tensorflow import training as alexnet

    model = alexnet.build_model(ds.num_classes, s.image_side, s.width, s.seed)
    device = alexnet.device_name(s.device)
    step = alexnet.make_step(model, device)
    x = tf.random.uniform((s.batch_size, s.image_side, s.image_side, 3), 0, 255, seed=s.seed)
    y = tf.one_hot(tf.zeros(s.batch_size, tf.int32), ds.num_classes)
    step(x, y).numpy()  # graph tracing
    return overlap.compute_only(step, x, y, device, len(ds.files) // s.batch_size - 1)


@quiet  # TensorFlow's and CUDA's lines in a file, not on the terminal
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.overlap", description=__doc__.split("\n")[0])
    p.add_argument("--storage-root", default="/var/tmp")
    p.add_argument("--dataset", default="caltech101")
    p.add_argument("--num-images", type=int, default=1024)
    p.add_argument("--threads", default="2")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-side", type=int, default=128, help="AlexNet input side (224 = the paper)")
    p.add_argument("--width", type=float, default=0.25, help="AlexNet width multiplier (1.0 = the paper)")
    p.add_argument("--read-delay-ms", default="0,4", help="comma-separated per-file read latencies to try")
    rounds.add_arguments(p, "--repeats", help_name="repeats")
    args = p.parse_args(argv)
    tfstart.import_under(args.storage_root)  # its start-up lines in a file, not on the terminal
    from jobs.frameworks.tensorflow import overlap
    from jobs.frameworks.tensorflow import training as alexnet
    from jobs.storage import cache

    ds = dataset(args.storage_root, args.dataset, args.num_images, 0)
    config = cell(
        [
            "workload=alexnet_small",
            f"dataset={args.dataset}",
            f"dataset.num_images={args.num_images}",
            f"storage.root={args.storage_root}",
            f"threads={args.threads}",
            f"batch_size={args.batch_size}",
            f"workload.image_side={args.image_side}",
            f"workload.width={args.width}",
            "cache=cold",
        ]
    )
    threads = args.threads if args.threads == "autotune" else int(args.threads)
    print(
        f"dataset {ds.name}: {len(ds.files)} files, {ds.total_bytes / 1e6:.1f} MB; "
        f"AlexNet {args.image_side} px, width {args.width:g}, batch {args.batch_size}, "
        f"{threads} map threads; at least {args.rounds} repeats, the runs' order rotating, cold cache"
    )
    print(
        f"{'delay ms':>8} {'input s':>8} {'compute s':>9} {'prefetch s':>10} {'no-prefetch s':>13} "
        f"{'efficiency':>10} {rounds.HEADER}"
    )
    images = (len(ds.files) // args.batch_size - 1) * args.batch_size  # the steps every runtime times
    for delay in (float(d) for d in args.read_delay_ms.split(",")):
        times: dict[tuple[int, str], float] = {}
        key = f"delay={delay:g}"

        def measure(r: int, what: str, delay=delay, times=times, key=key) -> rounds.Pass:
            s = alexnet.TrainSettings(
                threads=threads,
                batch_size=args.batch_size,
                prefetch=1,
                image_side=args.image_side,
                width=args.width,
                steps=None,
                seed=r,
                read_delay_ms=delay,
            )
            train = {**config, "workload": {**config["workload"], "read_delay_ms": delay}}
            if what == "input":
                cache.evict(ds.files)
            watch = rounds.Watch()
            if what == "input":
                t = overlap.input_only(ds, s, len(ds.files) // s.batch_size - 1)
            elif what == "compute":
                t = compute_only(ds, s)
            else:
                # seed 0: the seed names the dataset too (jobs.runner), and the set is the one read above
                res = run(train, prefetch=1 if what == "prefetch" else 0, seed=0)  # evicts itself
                t = res["runtime_s"] - res["first_step_s"]
            times[r, what] = t
            return watch.done(key, r, what, images / t, images)

        passes = _with_slower(rounds.run(WHAT, measure, [("prefetch", "slower")], args, _with_slower))
        s = rounds.summarize(passes, "prefetch", "slower")  # efficiency: prefetch's rate / the slower's
        med = [statistics.median(t for (_, w), t in times.items() if w == what) for what in WHAT]
        print(
            f"{delay:>8g} {med[0]:>8.2f} {med[1]:>9.2f} {med[2]:>10.2f} {med[3]:>13.2f} {s.ratio:>10.2f} "
            f"{rounds.columns(s)}"
        )
    print(rounds.legend("CPU ms per image", "training with prefetch", "the slower of input and compute"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
