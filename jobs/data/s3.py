"""The native S3 reader: each sample fetched by a GET inside tf.data's one parallel map, as
``tf.io.read_file`` reads a file there (TensorFlow 2.21 has no S3 file system, and tensorflow-io does
not load on it). ``num_parallel_calls`` map threads keep as many GETs in flight; every GET is counted
by the caller's ``fetch`` (``jobs.storage.objectstore.objects.get``).

A failed GET fails the run (the store's ``end_run``), so after the first one nothing more is asked: a
store that stopped answering would otherwise hold every image left for the client's read timeout (512
images at 60 s each, the map's threads at a time), and Ctrl-C or SIGTERM with them, since the run's loop
checks for a signal between batches: now the run ends within one timeout of the first failure. Nor is
anything raised into TensorFlow, which logs a traceback per element (``read_errors.quietly``): the failed
and the unasked elements are dropped without a word, and the store keeps the failure for the run's end."""

from __future__ import annotations

from collections.abc import Callable, Sequence


class _NotAsked(Exception):
    """An image after the first failed GET: dropped, never asked of the store."""


def reader(keys: Sequence[str], labels, fetch: Callable[[str], bytes]):
    """``read(i) -> (i, data, bytes read, label)`` for the pipeline's map (``jobs.data.readers.source``'s
    contract): object ``keys[i]`` fetched by ``fetch``, whose StoreError the store keeps for the run's
    end (``Store.fetch``); ``labels``, a tensor of the samples' labels."""
    import tensorflow as tf

    from jobs.data.read_errors import quietly
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
