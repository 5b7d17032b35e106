"""TensorFlow's engine of the Section III-A micro-benchmark and its read-only variant: one timed run
over a dataset.

The pipeline (``pipeline``) is iterated until the set is consumed (or ``batches``) without any
compute; time runs from the first iterator call to the return of the last.
"""

from __future__ import annotations

import time

from jobs import interrupts
from jobs.data import loading
from jobs.data.datasets import Dataset
from jobs.frameworks.tensorflow import cancel, pipeline, sources
from jobs.metrics import MB
from jobs.workloads.microbench.run import RunResult, RunSettings


def build(ds: Dataset, s: RunSettings):
    """The tf.data pipeline of the paper; elements are (batch, file indices, file bytes)."""
    p = pipeline.build(ds, s, decode=s.pipeline == "decode_resize")
    return pipeline.through_service(p, s.service) if s.service else p


shuffled_order = pipeline.shuffled_order


def run_once(ds: Dataset, s: RunSettings, mark=None) -> RunResult:
    """One timed pass: from the first iterator call to the return of the last one. ``mark(name)``,
    when given, is called with "start" and "end" at the edges of that interval."""
    it = iter(build(ds, s))  # creating the iterator reads nothing: parallel map starts on the first call
    read = cancel.next_of(it)  # through the tf.data service: a read its watcher can cancel
    seen: list[int] = []
    consumed = 0
    nb = 0
    exhausted = False
    rb0, rc0 = loading.read_counters()
    if mark is not None:
        mark("start")
    t0 = time.perf_counter()
    t_first = t_last = t0
    with interrupts.deferred():
        while s.batches is None or nb < s.batches:
            interrupts.check()  # Ctrl-C and SIGTERM end the run here, between batches
            try:
                _, idx, nbytes = interrupts.waiting(read)
            except StopIteration:
                exhausted = True
                break
            t_last = time.perf_counter()
            if nb == 0:
                t_first = t_last
            nb += 1
            seen.extend(int(i) for i in idx.numpy())
            consumed += int(nbytes.numpy().sum())
        if mark is not None:
            mark("end")
        del it, read  # stop read-ahead before the counters are read
    sources.close_all()
    rb1, rc1 = loading.read_counters()
    seconds = t_last - t0
    drops = pipeline.dropped(ds, seen, exhausted, s.seed, **s.order)
    if seconds <= 0 or not seen:
        raise RuntimeError(
            f"the pipeline delivered no image out of {len(ds.files)} "
            f"({len(drops)} dropped as unreadable or not images)"
        )
    return RunResult(
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
    )


def run(ctx, s: RunSettings) -> RunResult:
    """The micro-benchmark's engine call (``Workload.engine``): one run of the cell in ``ctx``."""
    return run_once(ctx.ds, s, mark=ctx.mark)
