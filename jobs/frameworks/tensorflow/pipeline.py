"""The paper's tf.data input pipeline, which TensorFlow's engines read through (the micro-benchmark, the
AlexNet mini-app, the checkpoint workload, the emulated accelerator).

samples (``sources``: the dataset's format read in the ``shuffle`` order, ``num_parallel_calls`` threads)
-> map([decode -> resize]) -> ignore_errors -> batch -> [prefetch]. Every element carries the image's
index and the bytes read for it, so what was delivered, dropped and consumed is known exactly. What the
frameworks share (the run's settings, the read counters) is ``jobs.data.loading``.
"""

from __future__ import annotations

import os

from jobs.data.datasets import Dataset
from jobs.data.loading import PipelineSettings
from jobs.frameworks.tensorflow.sources import num_parallel_calls

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def build(ds: Dataset, s: PipelineSettings, *, decode: bool = True, one_hot: bool = False):
    """The pipeline of one run set by ``s``; elements are (images or file bytes, image indices, bytes
    read[, one-hot labels]): decoded and resized to ``s.image_side`` (``decode``), or the files' bytes.

    The samples come from ``sources`` (the dataset's format, in the ``s.shuffle`` order);
    ``s.read_delay_ms`` adds latency to every read (emulates a slower tier; 0 = none).
    """
    import tensorflow as tf

    from jobs.frameworks.tensorflow import read_only, sources

    classes, threads = max(1, ds.num_classes), s.threads
    delay = (lambda d: delayed(d, s.read_delay_ms, threads)) if s.read_delay_ms > 0 else None
    how = {"shuffle": s.shuffle, "shuffle_buffer": s.shuffle_buffer, "seed": s.seed, "threads": threads}
    how["delay"] = delay
    blocks = None if decode or one_hot else read_only.batches(ds, batch_size=s.batch_size, **how)
    if blocks is not None:
        return _finish(blocks, threads, s.prefetch)
    stream, read = sources.source(ds, payload=decode or one_hot, **how)

    @tf.autograph.experimental.do_not_convert  # its branches are Python's, on settings (unconverted)
    def load(*element):
        i, data, nbytes, label = read(*element)
        out = data
        if decode:
            img = tf.io.decode_image(data, channels=3, expand_animations=False)
            out = tf.image.resize(img, [s.image_side, s.image_side])
        if one_hot:
            return out, i, nbytes, tf.one_hot(label, classes)
        return out, i, nbytes

    out = stream.map(load, num_parallel_calls=num_parallel_calls(threads)).ignore_errors().batch(s.batch_size)
    return _finish(out, threads, s.prefetch)


def _finish(out, threads: int | str, prefetch: int):
    """``out`` with its prefetch and the options every run's pipeline has."""
    import tensorflow as tf

    if prefetch > 0:
        out = out.prefetch(prefetch)
    # TF injects a prefetch of its own at the end of a pipeline by default: prefetch=0 must mean none.
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    if str(threads) != "autotune":
        # every parallelism and buffer is set: nothing to tune. Its model thread only cost time: the
        # iterator's destructor waited up to 0.63 s for it after one run in three (benchmarks.startup)
        options.autotune.enabled = False
    if isinstance(threads, int) and threads > len(os.sched_getaffinity(0)):
        # map calls run on TensorFlow's inter-op pool, one thread per core: past the cores, threads=N would
        # not keep N reads in flight (8 threads on 2 cores kept 1.9). A private pool of N threads does,
        # as the paper's 8 threads did on its 8 cores.
        options.threading.private_threadpool_size = threads
    return out.with_options(options)


def sleep(dataset, microseconds: int):
    """``dataset`` with a native sleep before each element (TensorFlow's SleepDataset kernel; the
    Python-level ``tf.data.experimental.sleep`` is gone from this TensorFlow). Wrapped here, pinned
    by a test, because it is a raw op."""
    import tensorflow as tf
    from tensorflow.python.data.ops import dataset_ops

    class _Sleep(dataset_ops.UnaryUnchangedStructureDataset):
        def __init__(self, input_dataset, us):
            self._input_dataset = input_dataset
            variant = tf.raw_ops.SleepDataset(
                input_dataset=input_dataset._variant_tensor,
                sleep_microseconds=tf.constant(us, tf.int64),
                **self._flat_structure,
            )
            super().__init__(input_dataset, variant)

    return _Sleep(dataset, int(microseconds))


def delayed(index, read_delay_ms: float, threads: int | str):
    """Every element ``read_delay_ms`` later, with as many delays under way at once as map threads:
    the latency of a slower tier. Native sleeps, not ``tf.py_function``: a Python function in the
    map deadlocks TensorFlow's iterator when Ctrl-C interrupts it."""
    import tensorflow as tf

    us = int(read_delay_ms * 1000)

    # not converted by autograph: a lambda here was once converted as the map's ``load`` (its cache of
    # converted functions mixed the two up: "name 'read' is not defined" under pytest-xdist)
    @tf.autograph.experimental.do_not_convert
    def one(*e):
        return sleep(tf.data.Dataset.from_tensors(e), us)

    return index.interleave(
        one,
        cycle_length=num_parallel_calls(threads),
        num_parallel_calls=num_parallel_calls(threads),
        deterministic=True,
    )


def shuffled_order(n: int, seed: int) -> list[int]:
    """The order in which the default pipeline (one file per image, global shuffle) hands out file
    indices (no file is read)."""
    from jobs.frameworks.tensorflow import sources

    return sources.order(
        Dataset("", "", "", ("",) * n, (0,) * n, (0,) * n, 1),
        shuffle="global",
        shuffle_buffer=None,
        seed=seed,
        threads=1,
    )


def dropped(ds: Dataset, seen: list[int], exhausted: bool, seed: int, **how) -> list[int]:
    """Indices of the images ignore_errors removed among those the pipeline reached; ReadFailed when one
    of them was lost to a failed read, not to its content (``jobs.data.read_errors.judge``: read again,
    and decoded again unless the run read only, ``payload=False``).

    When the set was consumed, that is every image not delivered. When the run stopped early, it is
    every image before the last delivered one (in the run's order, ``sources.order``) that was
    not delivered; the map keeps order, so nothing after it can have been dropped yet. (TFRecord: the
    order without drops; a dropped record shifts the buffer's later picks, so the early-stop count
    there is an estimate.)
    """
    from jobs.data import read_errors
    from jobs.frameworks.tensorflow import sources

    n = len(ds.files)
    if exhausted:
        attempted = range(n)
    else:
        order = sources.order(
            ds, seed=seed, **{"shuffle": "global", "shuffle_buffer": None, "threads": 1, **how}
        )
        pos = {f: p for p, f in enumerate(order)}
        last = max((pos[i] for i in seen), default=-1)
        attempted = order[: last + 1]
    got = set(seen)
    drops = sorted(i for i in attempted if i not in got)
    read_errors.judge(ds, drops, decodes if how.get("payload", True) else None)
    return drops


def decodes(data: bytes) -> bool:
    """Whether ``data`` decodes as the pipeline's map decodes an image (``build``)."""
    import tensorflow as tf

    try:
        tf.io.decode_image(data, channels=3, expand_animations=False)
    except tf.errors.OpError:  # any error of the op: what it holds is no image TensorFlow decodes
        return False
    return True


def through_service(dataset, address: str):
    """``dataset`` read through the tf.data service at ``address`` (``jobs.execution.service`` starts it):
    ``distributed_epoch`` mode, so the dispatcher hands each element to one worker, once per pass."""
    import tensorflow as tf

    return dataset.apply(
        tf.data.experimental.service.distribute(processing_mode="distributed_epoch", service=address)
    )
