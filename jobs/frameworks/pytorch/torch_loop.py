"""The emulated accelerator through PyTorch (``framework=pytorch``): the same step as ``loop`` (take the
next batch, sleep the accelerator's compute time for it) fed by a ``torch.utils.data.DataLoader`` whose
workers load ahead while the step sleeps (``loader.num_workers`` processes, ``loader.prefetch_factor``
batches each), as MLPerf Storage's PyTorch data loader does.

Time runs from the ``iter(loader)`` call, which starts the workers, as for the micro-benchmark
(``jobs.frameworks.pytorch.torch_reading``): the first step's wait holds their start-up, and AU leaves
it out. At the end the workers are joined, so their CPU time and reads count in the run's."""

from __future__ import annotations

import time

from jobs import interrupts
from jobs.data import loading
from jobs.data.datasets import Dataset
from jobs.frameworks.pytorch.loader.build import Loader
from jobs.workloads.emulated.steps import EmulatedSettings, result


def run_once(ds: Dataset, s: EmulatedSettings, lo: Loader, mark=lambda name: None) -> dict:
    """One epoch of full batches (the dataset or the task's shard), each followed by the step's sleep; from
    an object store, each batch's GETs counted."""
    from jobs.frameworks.pytorch.loader import s3map

    # an object store's keys for a client that reads them from the environment only (its workers inherit them)
    with s3map.credentials(ds):
        return _epoch(ds, s, lo, mark, s3map.counted(ds))


def _epoch(ds: Dataset, s: EmulatedSettings, lo: Loader, mark, count) -> dict:
    """The timed epoch; ``count`` takes each batch's GETs (None: the files of a file system)."""
    from jobs.frameworks.pytorch.loader import build
    from jobs.frameworks.pytorch.loader.build import shut_down

    steps = len(ds.files) // s.batch_size
    if steps < 2:
        raise RuntimeError(
            f"{len(ds.files)} images make {steps} batch(es) of {s.batch_size}: AU leaves the first step "
            "out, so a run needs at least two (more images, or fewer accelerators)"
        )
    data, sampler = build.dataset(ds, s, decode=ds.holds_images)  # arrays are read whole, not decoded
    loader = build.loader(data, sampler, s, lo)
    waits, computes, seen, drops, consumed = [], [], [], [], 0
    rb0, rc0 = loading.read_counters()
    mark("start")
    t0 = time.perf_counter()
    it = iter(loader)
    try:
        with interrupts.deferred():
            for _ in range(steps):
                interrupts.check()  # Ctrl-C and SIGTERM end the run here, between steps
                a = time.perf_counter()
                try:
                    batch = interrupts.waiting(next, it)
                except StopIteration:
                    break
                b = time.perf_counter()
                time.sleep(s.step_time_s)  # the accelerator computes; the workers keep reading meanwhile
                computes.append(time.perf_counter() - b)
                waits.append(b - a)
                seen.extend(batch.indices.tolist())
                drops.extend(batch.dropped)
                if count is not None and batch.requests:
                    count(batch.requests)
                consumed += int(batch.nbytes.sum())
            t_end = time.perf_counter()
    except RuntimeError as e:
        dead = build.died(e)
        if dead is None:
            raise
        raise dead from None
    finally:
        shut_down(it, loader, data)  # joined: the workers' reads are in this process's counters now
    mark("end")  # after the join: a worker's CPU time is in RUSAGE_CHILDREN only once it is waited for
    rb1, rc1 = loading.read_counters()
    if len(waits) < 2:
        raise RuntimeError(f"the DataLoader delivered {len(waits)} batch(es) out of {len(ds.files)} files")
    drops = sorted(i for i in drops if i >= 0)
    steps = {
        "waits": waits,
        "computes": computes,
        "seen": seen,
        "consumed": consumed,
        "t0": t0,
        "t_end": t_end,
    }
    return result(ds, s, steps, drops, ((rb0, rc0), (rb1, rc1)))


def run(ctx, s: EmulatedSettings) -> dict:
    """The emulated accelerator's engine call (``Workload.engine``): one run of the cell in ``ctx``, through
    the DataLoader its ``loader.*`` settings describe."""
    return run_once(ctx.ds, s, Loader.from_config(ctx.cfg), mark=ctx.mark)
