"""The micro-benchmark through JAX's data loader, Grain (``framework=jax``): the same stored files, sample
order and stop rule as ``reading`` (TensorFlow), read by a ``grain.DataLoader`` without compute.

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

import io
import multiprocessing
import time
from dataclasses import dataclass

import grain
import numpy as np

from jobs import interrupts
from jobs.data import pipeline, read_errors
from jobs.data.datasets import Dataset
from jobs.metrics import MB
from jobs.workloads.microbench.reading import RunResult, RunSettings


@dataclass(frozen=True)
class GrainResult(RunResult):
    workers: int
    start_method: str


class Images:
    """Grain's random-access data source: position ``k`` of the run's order is image ``order[k]``, its file
    read whole. Picklable (a spawned worker gets its own copy)."""

    def __init__(self, ds: Dataset, order: list[int], read_delay_ms: float = 0.0):
        self.ds, self.order, self.delay_s = ds, order, read_delay_ms / 1000

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, k: int) -> dict:
        i = self.order[k]
        if self.delay_s:
            time.sleep(self.delay_s)
        try:
            if self.ds.files[i] in self.ds.skipped:  # a FIFO or a device is never opened
                raise OSError(f"{self.ds.files[i]} is not a regular file")
            with open(self.ds.files[i], "rb", buffering=0) as f:
                data = f.read()
        except OSError as e:
            read_errors.raise_if_failed(self.ds, i, e, self.ds.where(i))
            return {"index": i, "data": b"", "nbytes": 0, "ok": False}
        return {"index": i, "data": data, "nbytes": len(data), "ok": True}


class Decode(grain.transforms.Map):
    """JPEG bytes -> float32 (side, side, 3), as tf.image.resize leaves it; an image that does not decode (or
    was not read) is a zero image with ``ok`` false. ``side`` None: read only, no image (the bytes read are
    counted and let go)."""

    def __init__(self, side: int | None):
        self.side = side

    def map(self, r: dict) -> dict:
        out = {"index": r["index"], "nbytes": r["nbytes"], "ok": r["ok"]}
        if self.side:  # every record of a run the same structure: Grain's batch stacks them key by key
            blank = np.zeros((self.side, self.side, 3), np.float32)
            out["ok"], out["image"] = _decoded(r["data"], self.side, blank) if r["ok"] else (False, blank)
        return out


def _decoded(data: bytes, side: int, blank):
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            rgb = img.convert("RGB").resize((side, side), Image.BILINEAR)
    except (OSError, ValueError, SyntaxError):  # PIL's UnidentifiedImageError is an OSError
        return False, blank
    return True, np.asarray(rgb, dtype=np.float32)


def loader(ds: Dataset, s, workers: int, *, decode: bool, full_batches: bool = False):
    """The ``grain.DataLoader`` of one run (``s``: its ``PipelineSettings``): one pass over the set in the
    run's order, in batches (``full_batches``: the last, short one left out, as a training step takes)."""
    from absl import flags

    from jobs.data.loader import order

    if not flags.FLAGS.is_parsed():  # Grain reads absl flags; a program that is not absl's never parsed them
        flags.FLAGS.mark_as_parsed()
    indices = order.indices(ds, shuffle=s.shuffle, shuffle_buffer=s.shuffle_buffer, seed=s.seed)
    source = Images(ds, indices, s.read_delay_ms)
    sampler = grain.samplers.IndexSampler(
        len(source), shuffle=False, num_epochs=1, shard_options=grain.sharding.NoSharding()
    )
    batch = grain.transforms.Batch(s.batch_size, drop_remainder=full_batches)
    return grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[Decode(s.image_side if decode else None), batch],
        worker_count=workers,
        read_options=grain.ReadOptions(num_threads=1, prefetch_buffer_size=s.batch_size),
    )


def run_once(ds: Dataset, s: RunSettings, workers: int, mark=None) -> GrainResult:
    """One timed pass over the set (or ``s.batches``) through Grain with ``workers`` worker processes."""
    dl = loader(ds, s, workers, decode=s.pipeline == "decode_resize")
    seen: list[int] = []
    drops: list[int] = []
    consumed = nb = 0
    rb0, rc0 = pipeline.read_counters()
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
        shut_down(it)
    if mark is not None:
        mark("end")  # after the join: the workers' CPU time and reads are the run's
    rb1, rc1 = pipeline.read_counters()
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
        dropped_files=[ds.where(i) for i in drops[: pipeline.DROPPED_LISTED]],
        batches=nb,
        seconds=seconds,
        first_batch_s=t_first - t0,
        images_per_s=len(seen) / seconds,
        mb_per_s=consumed / seconds / MB,
        bytes_consumed=consumed,
        bytes_read_device=None if rb0 is None or rb1 is None else rb1 - rb0,
        bytes_read_syscall=None if rc0 is None or rc1 is None else rc1 - rc0,
        workers=workers,
        start_method="spawn" if workers else "none",
    )


def shut_down(it, timeout_s: float = 30.0) -> None:
    """End the iterator's workers and wait for them (their resource use is then this process's children's)."""
    import gc

    close = getattr(it, "close", None) or getattr(getattr(it, "_iterator", None), "close", None)
    if close is not None:
        close()
    del it
    gc.collect()
    deadline = time.monotonic() + timeout_s
    for p in multiprocessing.active_children():
        p.join(max(0.0, deadline - time.monotonic()))


def run(ctx, s: RunSettings) -> GrainResult:
    """The micro-benchmark's engine call (``Workload.engine``): one run of the cell in ``ctx``."""
    from jobs import frameworks

    return run_once(ctx.ds, s, frameworks.workers(ctx.cfg), mark=ctx.mark)
