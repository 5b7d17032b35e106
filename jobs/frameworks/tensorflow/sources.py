"""Where the input pipeline's samples come from: the reading order (``shuffle``) and the reader of
each dataset format (``dataset.format``), as tf.data stages.

Every stage yields ``(image index, data, bytes read, label)``; ``pipeline`` maps decode and
resize over them. The orders, over the dataset's groups (``Dataset.members``: the images of a
TFRecord shard or HDF5 file, or consecutive files of about ``dataset.shard_mb``):

- ``global``: a full permutation of the images every run (a sample buffer of ``shuffle_buffer``,
  all images when null; TFRecord: the shard order is shuffled too, then the buffer);
- ``local``: the group order is shuffled and each group is read through; a buffer of
  ``shuffle_buffer`` images (one group's when null) mixes what was read, as a reader in a
  distributed job shuffles within its own shards;
- ``none``: the stored order.

Files, HDF5 and npz are read by index: the order is a stream of image indices and every thread of the
map reads one image. HDF5 is read with h5py inside ``tf.numpy_function`` (an indexable reader:
tf.data keeps the order and the parallel map, where ``from_generator`` would read on one Python
thread); h5py serialises its calls behind one lock, so HDF5 reads do not run in parallel within a
process, whatever ``threads`` says. An npz file is one sample, its ``x`` loaded whole by ``np.load``
inside ``tf.numpy_function`` (as DLIO's NPZ reader loads it). TFRecord is read as users do: the shards through
``TFRecordDataset`` under ``interleave(cycle_length=threads, num_parallel_calls=threads)``, then
the buffer, then the parse in the map. A record that fails its checksum ends the reading of its
shard (TensorFlow cannot find the next record after it): the rest of that shard is dropped, and
counted.

A read-only run reads containers in blocks (``read_only``); over TFRecord its order is
therefore the interleave of blocks of ``READ_BLOCK`` records (``ids(..., payload=False)``).
"""

from __future__ import annotations

import os
import threading

from jobs.data import tfrecord
from jobs.data.datasets import Dataset, container_of
from jobs.data.order import buffer_of, groups
from jobs.frameworks.tensorflow.unlogged import quietly

# images a read-only run takes from one container at a time (jobs.frameworks.tensorflow.read_only)
READ_BLOCK = 64
AUTOTUNE_GETS = 16  # GETs in flight of a batched object client at threads=autotune (tf.data tunes no GETs)


def num_parallel_calls(threads: int | str) -> int:
    """tf.data's num_parallel_calls for ``threads`` (an int, or "autotune")."""
    import tensorflow as tf

    return tf.data.AUTOTUNE if str(threads) == "autotune" else int(threads)


def group_order(tf, ds: Dataset, shuffle: str, seed: int):
    n = len(groups(ds))
    order = tf.data.Dataset.range(n)
    return order if shuffle == "none" else order.shuffle(n, seed=seed, reshuffle_each_iteration=False)


def ids(ds: Dataset, *, shuffle: str, shuffle_buffer: int | None, seed: int, threads, payload: bool = True):
    """The image indices in the order a run reads them (exact for files and HDF5; for TFRecord the
    order when no record is dropped). ``payload=False``: a read-only run's order (TFRecord: in blocks)."""
    import tensorflow as tf

    members = tf.ragged.constant([list(g) for g in groups(ds)], dtype=tf.int64)
    if ds.format == "tfrecord":
        out = group_order(tf, ds, shuffle, seed).interleave(
            tf.autograph.experimental.do_not_convert(
                lambda g: tf.data.Dataset.from_tensor_slices(members[g])
            ),
            cycle_length=num_parallel_calls(threads),
            block_length=1 if payload else READ_BLOCK,
            num_parallel_calls=num_parallel_calls(threads),
            deterministic=True,
        )
    elif shuffle == "global":
        out = tf.data.Dataset.from_tensor_slices(members.flat_values)
    else:
        out = group_order(tf, ds, shuffle, seed).flat_map(
            tf.autograph.experimental.do_not_convert(lambda g: tf.data.Dataset.from_tensor_slices(members[g]))
        )
    buffer = buffer_of(ds, shuffle, shuffle_buffer)
    return out.shuffle(buffer, seed=seed, reshuffle_each_iteration=False) if buffer else out


def order(ds: Dataset, **how) -> list[int]:
    """``ids`` as a list (nothing is read)."""
    return [int(i) for i in ids(ds, **how).as_numpy_iterator()]


def source(
    ds: Dataset,
    *,
    shuffle: str,
    shuffle_buffer: int | None,
    seed: int,
    threads,
    delay=None,
    payload: bool = True,
):
    """(stream, read): the stream in the run's order, and the function that turns one of its elements
    into (index, data, bytes read, label), for the pipeline's one parallel map (so reading and
    decoding share its threads, as in the paper's ``map(read_file -> decode -> resize)``). ``delay``,
    when given, is applied to the stream (an emulated tier's latency). ``payload=False`` (a read-only
    run, which never looks at the image): an HDF5 entry is read and counted but not carried on
    (``data`` is empty); a read-only run over containers reads through ``read_only`` where
    it can."""
    import tensorflow as tf

    delay = delay or (lambda d: d)
    if ds.format == "tfrecord":
        return _tfrecord(
            ds, shuffle=shuffle, shuffle_buffer=shuffle_buffer, seed=seed, threads=threads, delay=delay
        )
    order = delay(ids(ds, shuffle=shuffle, shuffle_buffer=shuffle_buffer, seed=seed, threads=threads))
    labels = tf.constant(ds.labels, dtype=tf.int32)
    if ds.format == "hdf5":
        return order, _hdf5_reader(ds, labels, payload)
    if ds.format == "npz":
        return order, _npz_reader(ds, labels)
    if ds.store is not None:  # one object per image, fetched by a GET (storage.kind=object)
        from jobs.frameworks.tensorflow import object_reads
        from jobs.storage.objectstore import tier

        store = tier.opened(ds.store)
        if store.get_batch is not None:  # many GETs a call: threads of them in flight
            in_flight = int(threads) if str(threads) != "autotune" else AUTOTUNE_GETS
            return object_reads.batched(order, ds.objects, labels, store.fetch_batch, in_flight)
        return order, object_reads.reader(ds.objects, labels, store.fetch)
    paths = tf.constant(ds.files)

    def read(i):
        data = tf.io.read_file(tf.gather(paths, i))
        return i, data, tf.cast(tf.strings.length(data, unit="BYTE"), tf.int64), tf.gather(labels, i)

    return order, read


def _tfrecord(ds: Dataset, *, shuffle: str, shuffle_buffer: int | None, seed: int, threads, delay):
    import tensorflow as tf

    par = num_parallel_calls(threads)
    paths = tf.constant(ds.containers)
    records = group_order(tf, ds, shuffle, seed).interleave(
        tf.autograph.experimental.do_not_convert(lambda g: shard_records(tf.gather(paths, g))),
        cycle_length=par,
        num_parallel_calls=par,
        deterministic=True,
    )
    buffer = buffer_of(ds, shuffle, shuffle_buffer)
    spec = {
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/index": tf.io.FixedLenFeature([], tf.int64),
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
    }

    def parse(serialized):
        ex = tf.io.parse_single_example(serialized, spec)
        nbytes = tf.cast(tf.strings.length(serialized, unit="BYTE"), tf.int64) + tfrecord.OVERHEAD
        return ex["image/index"], ex["image/encoded"], nbytes, tf.cast(ex["image/class/label"], tf.int32)

    if buffer:
        records = records.shuffle(buffer, seed=seed, reshuffle_each_iteration=False)
    return delay(records), parse


def _openable(path) -> object:
    import numpy as np

    try:
        os.close(os.open(path, os.O_RDONLY))
    except OSError:
        return np.array([], dtype=object)
    return np.array([path], dtype=object)


def shard_records(path):
    """The records of the TFRecord shard at ``path`` (a string tensor), up to the first one that cannot be
    read. A shard that cannot be opened (gone, its mount dead) is no records: TensorFlow's reader would
    try to open it again at every call, and ``ignore_errors`` would call it for ever (a run over a dead
    s3fs mount spun without end). Its images are then not delivered, and the run's dropped images are
    judged (``jobs.data.read_errors``)."""
    import tensorflow as tf

    opened = tf.numpy_function(_openable, [path], tf.string, stateful=True)
    opened.set_shape([None])
    return tf.data.TFRecordDataset(opened).ignore_errors()


class _Hdf5Files:
    """Open h5py files by container, shared by the map's threads, closed by ``close_all``."""

    def __init__(self, paths: tuple[str, ...]):
        self.paths = paths
        self.files: dict[int, object] = {}
        self.lock = threading.Lock()

    def _opened(self, k: int):
        import h5py

        with self.lock:
            opened = self.files.get(k)
            if opened is None:
                f = h5py.File(self.paths[k], "r")
                opened = self.files[k] = (f, f["images"], f["offsets"][:])
        return opened[1], opened[2]

    def row(self, k: int, r: int):
        """Container ``k``'s entry ``r``, read (a numpy array of its bytes)."""
        images, offsets = self._opened(k)
        return images[offsets[r] : offsets[r + 1]]

    def span(self, k: int, a: int, b: int):
        """Entries ``a`` to ``b - 1`` of container ``k``, read in one call; returns their sizes."""
        images, offsets = self._opened(k)
        images[offsets[a] : offsets[b]]  # noqa: B018 (the read is the point)
        return (offsets[a + 1 : b + 1] - offsets[a:b]).astype("int64")

    def close(self) -> None:
        with self.lock:
            for f, _, _ in self.files.values():
                f.close()
            self.files.clear()


_OPEN: list[_Hdf5Files] = []


def hdf5_files(ds: Dataset) -> _Hdf5Files:
    """The dataset's HDF5 files, opened on first use, closed by ``close_all`` at the end of the run."""
    files = _Hdf5Files(ds.containers)
    _OPEN.append(files)
    return files


def close_all() -> None:
    """Close the HDF5 files the pipelines of this process opened (a run ends; its files are evicted next)."""
    while _OPEN:
        _OPEN.pop().close()


def _hdf5_reader(ds: Dataset, labels, payload: bool):
    import numpy as np
    import tensorflow as tf

    where_k = np.zeros(len(ds.files), dtype=np.int64)
    where_r = np.zeros(len(ds.files), dtype=np.int64)
    for k, members in enumerate(ds.members):
        for r, i in enumerate(members):
            where_k[i], where_r[i] = k, r
    files = hdf5_files(ds)

    def fetch(k, r):
        return files.row(int(k), int(r)).tobytes()

    def size(k, r):  # read, counted, not handed on
        return np.int64(files.row(int(k), int(r)).nbytes)

    empty = tf.constant(b"")

    def read(i):
        where = [tf.gather(where_k, i), tf.gather(where_r, i)]
        if not payload:  # h5py's OSError: a failed read or a damaged file, told apart by the run's judge
            return i, empty, quietly(size, where, tf.int64, (OSError,)), tf.gather(labels, i)
        data = quietly(fetch, where, tf.string, (OSError,))
        return i, data, tf.cast(tf.strings.length(data, unit="BYTE"), tf.int64), tf.gather(labels, i)

    return read


def _npz_reader(ds: Dataset, labels):
    """Each image's npz file, its sample loaded whole; a read-only run counts the sample's bytes too (np.load
    reads the array it is asked for: there is nothing to skip)."""
    import tensorflow as tf

    from jobs.data import formats

    paths = tf.constant(container_of(ds))

    def fetch(path):
        return formats.load_npz(path.decode())

    def read(i):
        data = quietly(fetch, [tf.gather(paths, i)], tf.string, (OSError, ValueError))
        return i, data, tf.cast(tf.strings.length(data, unit="BYTE"), tf.int64), tf.gather(labels, i)

    return read
