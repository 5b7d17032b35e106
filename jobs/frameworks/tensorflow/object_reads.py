"""The native S3 reader: each sample fetched by a GET inside tf.data's one parallel map, as
``tf.io.read_file`` reads a file there (TensorFlow 2.21 has no S3 file system, and tensorflow-io does
not load on it). ``num_parallel_calls`` map threads keep as many GETs in flight; every GET is counted
by the caller's ``fetch`` (``jobs.storage.objectstore.objects.get``).

A failed GET fails the run (the store's ``end_run``), so after the first one nothing more is asked: a
store that stopped answering would otherwise hold every image left for the client's read timeout (512
images at 60 s each, the map's threads at a time), and Ctrl-C or SIGTERM with them, since the run's loop
checks for a signal between batches: now the run ends within one timeout of the first failure. Nor is
anything raised into TensorFlow, which logs a traceback per element (``unlogged.quietly``): the failed
and the unasked elements are dropped without a word, and the store keeps the failure for the run's end.

A client that GETs many keys in one call (``ObjectClient.get_batch``: s3dlio's) is asked for the keys of
``KEYS_PER_CALL`` x ``threads`` samples at a time, in the run's order, ``threads`` GETs in flight, by
one call running ahead of the map (``batched``): the map's threads then decode only. Every GET is still
counted with its own start and end (``Store.fetch_batch``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence


class _NotAsked(Exception):
    """An image after the first failed GET: dropped, never asked of the store."""


def reader(keys: Sequence[str], labels, fetch: Callable[[str], bytes]):
    """``read(i) -> (i, data, bytes read, label)`` for the pipeline's map (``sources.source``'s
    contract): object ``keys[i]`` fetched by ``fetch``, whose StoreError the store keeps for the run's
    end (``Store.fetch``); ``labels``, a tensor of the samples' labels."""
    import tensorflow as tf

    from jobs.frameworks.tensorflow.unlogged import quietly
    from jobs.storage.objectstore.client import StoreError

    names = list(keys)
    failed: list[str] = []  # the first failed GET's key: no GET is asked after it

    def get(i) -> bytes:
        if failed:
            raise _NotAsked(names[int(i)])
        try:
            return fetch(names[int(i)])
        except StoreError:
            failed.append(names[int(i)])
            raise

    def read(i):
        data = quietly(get, [i], tf.string, (StoreError, _NotAsked))
        return i, data, tf.cast(tf.strings.length(data, unit="BYTE"), tf.int64), tf.gather(labels, i)

    return read


KEYS_PER_CALL = 8  # keys a batched call asks for, per GET it keeps in flight: enough to keep them all open


def batched(order, keys: Sequence[str], labels, fetch_batch: Callable, in_flight: int):
    """(stream, read) for the pipeline (``sources.source``'s contract) where the client GETs a
    batch of keys per call: ``order``'s indices fetched ``KEYS_PER_CALL * in_flight`` at a time by
    ``fetch_batch(keys, in_flight)`` (``Store.fetch_batch``), one call ahead of the map, then one element
    per sample again; after a failed GET nothing more is asked, and the failed and unasked samples are
    dropped without a word, as ``reader``'s."""
    import numpy as np
    import tensorflow as tf

    from jobs.frameworks.tensorflow.unlogged import unread_unless
    from jobs.storage.objectstore.client import StoreError

    names = list(keys)
    failed: list[bool] = []

    def fetch(ids):
        empty = np.array([b""] * len(ids), dtype=object), np.zeros(len(ids), dtype=bool)
        if failed:
            return empty
        try:
            bodies = fetch_batch([names[int(i)] for i in ids], in_flight)
        except StoreError:
            failed.append(True)
            return empty
        return np.array(bodies, dtype=object), np.ones(len(ids), dtype=bool)

    @tf.autograph.experimental.do_not_convert
    def get(ids):
        data, ok = tf.numpy_function(fetch, [ids], (tf.string, tf.bool), stateful=True)
        data.set_shape([None])
        ok.set_shape([None])
        return ids, data, ok

    stream = order.batch(KEYS_PER_CALL * in_flight).map(get).prefetch(1).unbatch()

    def read(i, data, ok):
        data = unread_unless(ok, data)
        return i, data, tf.cast(tf.strings.length(data, unit="BYTE"), tf.int64), tf.gather(labels, i)

    return stream, read
