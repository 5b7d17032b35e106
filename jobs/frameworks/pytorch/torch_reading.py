"""The micro-benchmark through PyTorch (``framework=pytorch``): the same dataset, sample order kind and
stop rule as ``reading`` (TensorFlow), read by a ``torch.utils.data.DataLoader`` without compute.

Time runs from the ``iter(loader)`` call, which starts the workers, to the return of the last batch:
``startup_s`` is the part until the last worker was ready to load (its process started, torch imported
in a spawned one, the dataset unpickled, ``worker_init_fn`` run; as each worker's first batch reports it),
``first_batch_s`` the wait for the first batch. At the end the workers are
joined, so their CPU time and their reads (``/proc/self/io`` of a waited-for child) count in the run's."""

from __future__ import annotations

import time
from dataclasses import dataclass

from jobs import interrupts
from jobs.data import loading
from jobs.data.datasets import Dataset
from jobs.frameworks.pytorch.loader.build import Loader
from jobs.metrics import MB
from jobs.workloads.microbench.run import RunResult, RunSettings


@dataclass(frozen=True)
class TorchResult(RunResult):
    startup_s: float
    workers: int
    start_method: str


def run_once(ds: Dataset, s: RunSettings, lo: Loader, mark=None) -> TorchResult:
    """One timed pass over the set (or ``s.batches``) through the DataLoader ``lo`` describes."""
    from jobs.frameworks.pytorch.loader import s3map

    # an object store's keys for a client that reads them from the environment only (its workers inherit them)
    with s3map.credentials(ds):
        return _pass(ds, s, lo, mark, s3map.counted(ds))


def _pass(ds: Dataset, s: RunSettings, lo: Loader, mark, count) -> TorchResult:
    """The timed pass; ``count`` takes each batch's GETs (None: the files of a file system)."""
    from jobs.frameworks.pytorch.loader import build

    data, sampler = build.dataset(ds, s, decode=s.pipeline == "decode_resize")
    loader = build.loader(data, sampler, s, lo)
    seen: list[int] = []
    drops: list[int] = []
    consumed = nb = 0
    rb0, rc0 = loading.read_counters()
    if mark is not None:
        mark("start")
    t0, t0_machine = time.perf_counter(), time.monotonic()
    it = iter(loader)
    t_started = time.perf_counter()
    t_first = t_last = t_started
    ready: dict[int, float] = {}  # worker id -> time.monotonic() it was ready to load
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
                seen.extend(batch.indices.tolist())
                drops.extend(batch.dropped)
                if count is not None and batch.requests:
                    count(batch.requests)
                consumed += int(batch.nbytes.sum())
                if batch.worker_ready is not None and batch.worker_ready[1] is not None:
                    ready.setdefault(*batch.worker_ready)
    except RuntimeError as e:
        dead = build.died(e)
        if dead is None:
            raise
        raise dead from None
    finally:
        build.shut_down(it, loader, data)
    if mark is not None:
        # after the join: a worker's CPU time is in RUSAGE_CHILDREN only once it is waited for (a pass cut
        # short at workload.batches, or persistent workers, would leave it out)
        mark("end")
    rb1, rc1 = loading.read_counters()
    seconds = t_last - t0
    if seconds <= 0 or not seen:
        raise RuntimeError(
            f"the DataLoader delivered no image out of {len(ds.files)} ({len(drops)} dropped as unreadable "
            "or not images)"
        )
    unnamed = sum(1 for i in drops if i < 0)  # records that were not Examples: no index to name
    named = {i for i in drops if i >= 0}
    if _full_pass_of_shards(ds, s):  # every image not delivered was lost with the rest of its shard
        named, unnamed = named | (set(range(len(ds.files))) - set(seen)), 0
    drops = sorted(named)
    return TorchResult(
        images=len(seen),
        images_dropped=len(drops) + unnamed,
        dropped_files=[ds.where(i) for i in drops[: loading.DROPPED_LISTED]],
        batches=nb,
        seconds=seconds,
        first_batch_s=t_first - t0,
        images_per_s=len(seen) / seconds,
        mb_per_s=consumed / seconds / MB,
        bytes_consumed=consumed,
        bytes_read_device=loading.delta(rb0, rb1),
        bytes_read_syscall=loading.delta(rc0, rc1),
        # workers: until the last one that delivered was ready; none: the iterator's own start
        startup_s=max(ready.values()) - t0_machine if ready else t_started - t0,
        workers=lo.num_workers,
        start_method=lo.start_method,
    )


def _full_pass_of_shards(ds: Dataset, s: RunSettings) -> bool:
    """A whole pass over TFRecord shards: an image not delivered was lost with the rest of a shard cut
    short (counted as dropped, as the tf.data side counts it). A run stopped at ``batches`` says nothing."""
    return s.batches is None and ds.format == "tfrecord"


def run(ctx, s: RunSettings) -> TorchResult:
    """The micro-benchmark's engine call (``Workload.engine``): one run of the cell in ``ctx``, through the
    DataLoader its ``loader.*`` settings describe."""
    return run_once(ctx.ds, s, Loader.from_config(ctx.cfg), mark=ctx.mark)
