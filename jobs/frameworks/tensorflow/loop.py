"""TensorFlow's engine of an accelerator emulated by its step time (MLPerf Storage's and DLIO's method):
each step takes the next batch from the tf.data pipeline, then sleeps the accelerator's compute time for
that batch. What is measured is whether the storage and the client's CPU keep the accelerator busy: AU =
compute time ÷ runtime, the first step left out."""

from __future__ import annotations

import time

from jobs import interrupts
from jobs.data import loading
from jobs.data.datasets import Dataset
from jobs.frameworks.tensorflow import pipeline, sources
from jobs.workloads.emulated.steps import EmulatedSettings, result


def run_once(ds: Dataset, s: EmulatedSettings, mark=lambda name: None) -> dict:
    """One epoch of full batches (the dataset or the task's shard), each followed by the step's sleep."""
    import tensorflow as tf

    data = pipeline.build(ds, s, decode=ds.holds_images)  # arrays (unet3d's volumes) are read, not decoded
    steps = len(ds.files) // s.batch_size
    if steps < 2:
        raise RuntimeError(
            f"{len(ds.files)} images make {steps} batch(es) of {s.batch_size}: AU leaves the first step "
            "out, so a run needs at least two (more images, or fewer accelerators)"
        )
    with tf.device("/CPU:0"):
        it = iter(data.take(steps))
    waits, computes, seen, consumed, exhausted = [], [], [], 0, False
    rb0, rc0 = loading.read_counters()
    mark("start")
    t0 = time.perf_counter()
    with interrupts.deferred():
        for _ in range(steps):
            interrupts.check()  # Ctrl-C and SIGTERM end the run here, between steps
            a = time.perf_counter()
            try:
                _, idx, nbytes = interrupts.waiting(next, it)
            except StopIteration:
                exhausted = True
                break
            b = time.perf_counter()
            time.sleep(s.step_time_s)  # the accelerator computes; the pipeline keeps reading meanwhile
            computes.append(time.perf_counter() - b)
            waits.append(b - a)
            seen.extend(int(i) for i in idx.numpy())
            consumed += int(nbytes.numpy().sum())
        t_end = time.perf_counter()
        mark("end")
        del it
    sources.close_all()
    rb1, rc1 = loading.read_counters()
    drops = pipeline.dropped(ds, seen, exhausted, s.seed, **s.order)  # first: a failed read is the reason
    if len(waits) < 2:
        raise RuntimeError(f"the pipeline delivered {len(waits)} batch(es) out of {len(ds.files)} files")
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
    """The emulated accelerator's engine call (``Workload.engine``): one run of the cell in ``ctx``."""
    return run_once(ctx.ds, s, mark=ctx.mark)
