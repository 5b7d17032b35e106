"""A ``framework=pytorch`` run's sample order, as numpy draws it from the run's seed, with the same
meaning of ``shuffle`` as the tf.data side (``jobs.frameworks.tensorflow.sources``): over the dataset's
groups (the images of one TFRecord shard or HDF5 file, or consecutive files of about ``dataset.shard_mb``)

- ``global``: a full permutation every run (or the stored order through a buffer of ``shuffle_buffer``);
- ``local``: the group order shuffled, each group read through, mixed by a buffer of one group's images
  (or ``shuffle_buffer``);
- ``none``: the stored order.

The permutation is numpy's, not TensorFlow's: the two frameworks read the same set in the same kind of
order, not in the same sequence."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from jobs.data.datasets import Dataset


def groups(ds: Dataset) -> tuple[tuple[int, ...], ...]:
    """The dataset's groups: the images of each container, or one group of them all."""
    return ds.members or (tuple(range(len(ds.files))),)


def buffer_of(ds: Dataset, shuffle: str, shuffle_buffer: int | None) -> int:
    """Samples in the shuffle buffer (0: no sample buffer)."""
    if shuffle == "none":
        return 0
    if shuffle_buffer:
        return int(shuffle_buffer)
    return len(ds.files) if shuffle == "global" else max(len(g) for g in groups(ds))


def buffered(stream: Iterable[int], size: int, rng: np.random.Generator) -> Iterator[int]:
    """``stream`` through a shuffle buffer of ``size`` (tf.data's ``shuffle``: fill, then hand out a
    random slot and refill it from the stream)."""
    buf: list[int] = []
    for x in stream:
        if len(buf) < size:
            buf.append(x)
            continue
        k = int(rng.integers(len(buf)))
        yield buf[k]
        buf[k] = x
    while buf:
        yield buf.pop(int(rng.integers(len(buf))))


def group_order(n_groups: int, shuffle: str, rng: np.random.Generator) -> list[int]:
    return list(range(n_groups)) if shuffle == "none" else [int(g) for g in rng.permutation(n_groups)]


def indices(ds: Dataset, *, shuffle: str, shuffle_buffer: int | None, seed: int) -> list[int]:
    """The image indices of one run of a map-style dataset (files, HDF5), in reading order."""
    rng = np.random.default_rng(seed)
    members = groups(ds)
    buffer = buffer_of(ds, shuffle, shuffle_buffer)
    if shuffle == "global" and buffer >= len(ds.files):
        return [int(i) for i in rng.permutation(len(ds.files))]
    if shuffle == "global":
        stream = [i for g in members for i in g]
    else:
        stream = [i for g in group_order(len(members), shuffle, rng) for i in members[g]]
    return list(buffered(stream, buffer, rng)) if buffer else stream
