"""The native S3 reader: each sample fetched by a GET inside tf.data's one parallel map, as
``tf.io.read_file`` reads a file there (TensorFlow 2.21 has no S3 file system, and tensorflow-io does
not load on it). ``num_parallel_calls`` map threads keep as many GETs in flight; every GET is counted
by the caller's ``fetch`` (``jobs.storage.objectstore.objects.get``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def reader(keys: Sequence[str], labels, fetch: Callable[[str], bytes]):
    """``read(i) -> (i, data, bytes read, label)`` for the pipeline's map (``jobs.data.readers.source``'s
    contract): object ``keys[i]`` fetched by ``fetch``; ``labels``, a tensor of the samples' labels."""
    import tensorflow as tf

    names = list(keys)

    def get(i) -> bytes:
        return fetch(names[int(i)])

    def read(i):
        data = tf.numpy_function(get, [i], tf.string, stateful=True)
        data.set_shape([])
        return i, data, tf.cast(tf.strings.length(data, unit="BYTE"), tf.int64), tf.gather(labels, i)

    return read
