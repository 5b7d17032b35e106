"""The two sides prefetch overlaps, each measured alone (DS-Analyzer's method): the training step
without an input pipeline (compute-only: one batch held in the training device's memory) and the
input pipeline without training (input-only: drained as the training loop would draw it).

With prefetch, runtime ≈ max(input-only, compute-only) when the overlap is complete; the analysis
divides that by the measured runtime (``overlap_efficiency``, 1.0 = complete).
"""

from __future__ import annotations

import statistics
import time

from jobs import interrupts
from jobs.data.datasets import Dataset
from jobs.frameworks.tensorflow import pipeline, sources


def compute_only(step, x, y, device: str, steps: int, sample: int | None = None) -> float:
    """Seconds of ``steps`` training steps of the compiled ``step`` on one batch (``x``, ``y``) copied
    into ``device``'s memory first. With ``sample``, that many steps are timed (after one untimed) and
    their median time per step is scaled to ``steps``. Synchronised by reading each loss back."""
    import tensorflow as tf

    with tf.device(device):
        x, y = tf.identity(x), tf.identity(y)
    interrupts.waiting(_synced, step, x, y)  # the step is traced already; this one warms the device copy
    timed = steps if sample is None else max(1, min(sample, steps))
    times = []
    for _ in range(timed):
        t = time.perf_counter()
        interrupts.waiting(_synced, step, x, y)  # as the training loop's steps: a signal ends the wait
        times.append(time.perf_counter() - t)
    return sum(times) if sample is None else statistics.median(times) * steps


def _synced(step, x, y):
    """One step, waited for by reading its loss back."""
    return step(x, y).numpy()


def input_only(ds: Dataset, s, steps: int) -> float:
    """Seconds to draw ``steps`` batches after the first from the run's pipeline (``s``: its
    PipelineSettings) without training: what prefetch has to hide, read as the training loop reads."""
    import tensorflow as tf

    data = pipeline.build(ds, s, one_hot=True)
    with tf.device("/CPU:0"):
        it = iter(data.take(steps + 1))
    try:
        interrupts.waiting(next, it)
        t0 = time.perf_counter()
        while True:
            try:
                interrupts.waiting(next, it)  # Ctrl-C and SIGTERM end the wait for a batch
            except StopIteration:
                break
        return time.perf_counter() - t0
    finally:
        del it
        sources.close_all()
