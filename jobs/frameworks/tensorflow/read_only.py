"""The paper's read-only pipeline over containers, in blocks: it reads the bytes and keeps nothing.

A read-only run never looks at an image, so over TFRecord shards and HDF5 files it reads
``sources.READ_BLOCK`` images of one container at a time and turns each block into its image
indices and sizes in one step: no record is parsed, no image is handed on, and the pipeline pays a
few operations per block instead of per image (per image it ran at 0.4-0.5 of fio over the same
shards; ``python -m benchmarks.readonly_vs_fio``). The orders are the ``sources`` ones:

- TFRecord: the shards under ``interleave(cycle_length=threads)``, a block of records at a time
  (``sources.ids(..., payload=False)``); a record that fails its checksum ends its shard, as
  before. A shuffle buffer or a read delay works on single images, split from the blocks.
- HDF5 with ``shuffle=none``: consecutive entries of each file, in the stored order, one h5py read
  per block (the other orders read single entries in a random order: ``sources.source``).

Every batch is (empty data, image indices, bytes read), as the per-image pipeline's.
"""

from __future__ import annotations

from jobs.data import order, tfrecord
from jobs.data.datasets import Dataset
from jobs.frameworks.tensorflow import sources


def batches(
    ds: Dataset, *, shuffle: str, shuffle_buffer: int | None, seed: int, threads, batch_size: int, delay=None
):
    """The run's batches read in blocks, or None where this format and order read image by image."""
    if ds.format == "tfrecord":
        return _tfrecord(
            ds,
            shuffle=shuffle,
            shuffle_buffer=shuffle_buffer,
            seed=seed,
            threads=threads,
            batch_size=batch_size,
            delay=delay,
        )
    if ds.format == "hdf5" and shuffle == "none" and delay is None:
        return _hdf5(ds, threads, batch_size)
    return None


def _with_empty_data(tf, batches):
    return batches.map(
        tf.autograph.experimental.do_not_convert(lambda i, nbytes: (tf.fill(tf.shape(i), ""), i, nbytes))
    )


def _tfrecord(
    ds: Dataset, *, shuffle: str, shuffle_buffer: int | None, seed: int, threads, batch_size: int, delay
):
    import tensorflow as tf

    par = sources.num_parallel_calls(threads)
    paths = tf.constant(ds.containers)
    members = tf.ragged.constant([list(g) for g in order.groups(ds)], dtype=tf.int64)

    @tf.autograph.experimental.do_not_convert
    def shard(g):
        @tf.autograph.experimental.do_not_convert
        def block(k, records):
            at = k * sources.READ_BLOCK + tf.range(tf.size(records, out_type=tf.int64), dtype=tf.int64)
            nbytes = tf.cast(tf.strings.length(records, unit="BYTE"), tf.int64) + tfrecord.OVERHEAD
            return tf.gather(members[g], at), nbytes

        return sources.shard_records(tf.gather(paths, g)).batch(sources.READ_BLOCK).enumerate().map(block)

    blocks = sources.group_order(tf, ds, shuffle, seed).interleave(
        shard, cycle_length=par, num_parallel_calls=par, deterministic=True
    )
    buffer = order.buffer_of(ds, shuffle, shuffle_buffer)
    if not buffer and delay is None:
        return _with_empty_data(tf, blocks.rebatch(batch_size))
    images = (delay or (lambda d: d))(blocks.unbatch())
    if buffer:
        images = images.shuffle(buffer, seed=seed, reshuffle_each_iteration=False)
    return _with_empty_data(tf, images.batch(batch_size))


def _hdf5(ds: Dataset, threads, batch_size: int):
    import tensorflow as tf

    spans = [
        (k, a, min(a + sources.READ_BLOCK, len(g)))
        for k, g in enumerate(order.groups(ds))
        for a in range(0, len(g), sources.READ_BLOCK)
    ]
    ids = tf.ragged.constant([list(order.groups(ds)[k][a:b]) for k, a, b in spans], dtype=tf.int64)
    where = tf.constant([list(s) for s in spans], dtype=tf.int64)
    files = sources.hdf5_files(ds)

    def read(k, a, b):
        return files.span(int(k), int(a), int(b))

    @tf.autograph.experimental.do_not_convert
    def block(j):
        nbytes = tf.numpy_function(read, [where[j, 0], where[j, 1], where[j, 2]], tf.int64, stateful=True)
        nbytes.set_shape([None])
        return ids[j], nbytes

    blocks = tf.data.Dataset.range(len(spans)).map(
        block, num_parallel_calls=sources.num_parallel_calls(threads)
    )
    return _with_empty_data(tf, blocks.rebatch(batch_size))
