"""The micro-benchmark through JAX's data loader, Grain (``framework=jax``): the same stored files, sample
order and stop rule as ``reading`` (TensorFlow), read by a ``grain.DataLoader`` without compute
(``jobs.frameworks.jax.grain_loader``).

- Its workers are Grain's worker processes (``worker_count``: ``loader.num_workers``, else ``threads``; 0
  reads in the run's own process), started the way Grain starts them (multiprocessing's spawn). Each reads
  with one thread (``grain.ReadOptions(num_threads=1)``), so that the workers are the run's only parallel
  readers, as a DataLoader's are; Grain's default of 16 read threads per worker would make "1 worker" 16.
- A sample is its file read whole (``open().read()``, as ``tf.io.read_file`` reads it) in the data source,
  then decoded with PIL and resized bilinearly to the run's side in a ``grain.transforms.Map``; an image
  that does not decode is counted as dropped, a read that fails fails the run (``jobs.data.read_errors``).
- Batches stay in host memory (NumPy arrays, as the DataLoader's stay on the CPU): the micro-benchmark is
  the input pipeline, not a step.

Time runs from the ``iter(loader)`` call, which starts the workers, to the return of the last batch. At the
end the workers are joined, so their CPU time and their reads count in the run's (a waited-for child's)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from jobs import interrupts
from jobs.data import loading
from jobs.data.datasets import Dataset
from jobs.frameworks.jax import grain_loader
from jobs.metrics import MB
from jobs.workloads.microbench.run import RunResult, RunSettings


@dataclass(frozen=True)
class GrainResult(RunResult):
    workers: int
    start_method: str


def run_once(ds: Dataset, s: RunSettings, workers: int, mark=None) -> GrainResult:
    """One timed pass over the set (or ``s.batches``) through Grain with ``workers`` worker processes."""
    dl = grain_loader.loader(ds, s, workers, decode=s.pipeline == "decode_resize")
    seen: list[int] = []
    drops: list[int] = []
    consumed = nb = 0
    rb0, rc0 = loading.read_counters()
    if mark is not None:
        mark("start")
    t0 = time.perf_counter()
    it = iter(dl)
    t_first = t_last = time.perf_counter()
    try:
        with interrupts.deferred():
            while s.batches is None or nb < s.batches:
                interrupts.check()
                try:
                    batch = interrupts.waiting(next, it)
                except StopIteration:
                    break
                t_last = time.perf_counter()
                if nb == 0:
                    t_first = t_last
                nb += 1
                ok = np.asarray(batch["ok"], bool)
                index = np.asarray(batch["index"])
                seen.extend(int(i) for i in index[ok])
                drops.extend(int(i) for i in index[~ok])
                consumed += int(np.asarray(batch["nbytes"])[ok].sum())
                del batch  # its shared memory goes back before the workers end
    finally:
        grain_loader.shut_down(it)
    if mark is not None:
        mark("end")  # after the join: the workers' CPU time and reads are the run's
    rb1, rc1 = loading.read_counters()
    seconds = t_last - t0
    if seconds <= 0 or not seen:
        raise RuntimeError(
            f"Grain delivered no image out of {len(ds.files)} ({len(drops)} dropped as unreadable or not "
            "images)"
        )
    drops = sorted(set(drops))
    return GrainResult(
        images=len(seen),
        images_dropped=len(drops),
        dropped_files=[ds.where(i) for i in drops[: loading.DROPPED_LISTED]],
        batches=nb,
        seconds=seconds,
        first_batch_s=t_first - t0,
        images_per_s=len(seen) / seconds,
        mb_per_s=consumed / seconds / MB,
        bytes_consumed=consumed,
        bytes_read_device=loading.delta(rb0, rb1),
        bytes_read_syscall=loading.delta(rc0, rc1),
        workers=workers,
        start_method="spawn" if workers else "none",
    )


def run(ctx, s: RunSettings) -> GrainResult:
    """The micro-benchmark's engine call (``Workload.engine``): one run of the cell in ``ctx``."""
    from jobs import frameworks

    return run_once(ctx.ds, s, frameworks.workers(ctx.cfg), mark=ctx.mark)
