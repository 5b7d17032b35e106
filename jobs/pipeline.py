"""The paper's tf.data input pipeline, shared by the micro-benchmark and the AlexNet mini-app.

paths -> shuffle -> map(read_file [-> decode -> resize], num_parallel_calls) -> ignore_errors
-> batch -> [prefetch]. Every element carries the file's index and byte count, so what was
delivered, dropped and consumed is known exactly.
"""

from __future__ import annotations

import os

from jobs.datasets import Dataset

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

DROPPED_LISTED = 50  # dropped files named in a run record; the count is always complete


def num_parallel_calls(threads: int | str) -> int:
    import tensorflow as tf

    return tf.data.AUTOTUNE if str(threads) == "autotune" else int(threads)


def build(
    ds: Dataset,
    *,
    threads: int | str,
    batch_size: int,
    prefetch: int,
    seed: int,
    decode: bool = True,
    image_side: int = 224,
    one_hot: bool = False,
    read_delay_ms: float = 0.0,
):
    """The pipeline; elements are (images or file bytes, file indices, file sizes[, one-hot labels]).

    ``read_delay_ms`` adds latency to every file read (emulates a slower tier; 0 = none).
    """
    import tensorflow as tf

    n = len(ds.files)
    index = tf.data.Dataset.from_tensor_slices(
        (tf.range(n, dtype=tf.int64), tf.constant(ds.files), tf.constant(ds.labels, dtype=tf.int32))
    )
    shuffled = index.shuffle(n, seed=seed, reshuffle_each_iteration=False)
    classes = max(1, ds.num_classes)

    def load(i, path, label):
        data = tf.io.read_file(path)
        nbytes = tf.cast(tf.strings.length(data, unit="BYTE"), tf.int64)
        out = data
        if decode:
            img = tf.io.decode_image(data, channels=3, expand_animations=False)
            out = tf.image.resize(img, [image_side, image_side])
        if one_hot:
            return out, i, nbytes, tf.one_hot(label, classes)
        return out, i, nbytes

    if read_delay_ms > 0:
        shuffled = delayed(shuffled, read_delay_ms, threads)
    out = shuffled.map(load, num_parallel_calls=num_parallel_calls(threads)).ignore_errors().batch(batch_size)
    if prefetch > 0:
        out = out.prefetch(prefetch)
    # TF injects a prefetch of its own at the end of a pipeline by default: prefetch=0 must mean none.
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
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
            variant = tf.raw_ops.SleepDataset(input_dataset=input_dataset._variant_tensor,
                                              sleep_microseconds=tf.constant(us, tf.int64),
                                              **self._flat_structure)
            super().__init__(input_dataset, variant)

    return _Sleep(dataset, int(microseconds))


def delayed(index, read_delay_ms: float, threads: int | str):
    """Every element ``read_delay_ms`` later, with as many delays under way at once as map threads:
    the latency of a slower tier. Native sleeps, not ``tf.py_function``: a Python function in the
    map deadlocks TensorFlow's iterator when Ctrl-C interrupts it."""
    import tensorflow as tf

    us = int(read_delay_ms * 1000)
    return index.interleave(lambda *e: sleep(tf.data.Dataset.from_tensors(e), us),
                            cycle_length=num_parallel_calls(threads), num_parallel_calls=num_parallel_calls(threads),
                            deterministic=True)


def shuffled_order(n: int, seed: int) -> list[int]:
    """The order in which the pipeline's shuffle hands out file indices (no file is read)."""
    import tensorflow as tf

    d = tf.data.Dataset.range(n).shuffle(n, seed=seed, reshuffle_each_iteration=False)
    return [int(x) for x in d.as_numpy_iterator()]


def dropped(ds: Dataset, seen: list[int], exhausted: bool, seed: int) -> list[int]:
    """Indices of the files ignore_errors removed among those the pipeline reached.

    When the set was consumed, that is every file not delivered. When the run stopped early, it is
    every file before the last delivered one (in shuffled order) that was not delivered; the map keeps
    order, so nothing after it can have been dropped yet.
    """
    n = len(ds.files)
    if exhausted:
        attempted = range(n)
    else:
        order = shuffled_order(n, seed)
        pos = {f: p for p, f in enumerate(order)}
        last = max((pos[i] for i in seen), default=-1)
        attempted = order[: last + 1]
    got = set(seen)
    return sorted(i for i in attempted if i not in got)


def read_counters() -> tuple[int | None, int | None]:
    """(read_bytes, rchar) of this process from /proc/self/io; None where unavailable."""
    vals: dict[str, int] = {}
    try:
        with open("/proc/self/io") as f:
            for line in f:
                k, _, v = line.partition(":")
                vals[k] = int(v)
    except OSError:
        return None, None
    return vals.get("read_bytes"), vals.get("rchar")
