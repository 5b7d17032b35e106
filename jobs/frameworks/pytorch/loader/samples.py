"""The datasets a ``framework=pytorch`` run's DataLoader reads, over the same stored bytes as the tf.data
side: one ``Sample`` per image, with the bytes read for it; an image that does not decode (or that the
listing found unreadable) is a ``Sample`` with ``ok=False`` (counted as dropped, as tf.data's
``ignore_errors`` drops it); a read that fails raises ``ReadFailed`` in the worker, which the DataLoader
raises in the run (``jobs.data.read_errors``: its storage went away, the run fails).

- ``ImageFiles``: map-style, one file per image read whole and decoded with PIL (torchvision's
  ``ImageFolder`` way: ``Image.open(...).convert("RGB")``, then a bilinear resize to the run's side);
- ``Hdf5Images``: map-style, one slice of the container's byte array per image; every process opens the
  files itself, on first use (an h5py file must not cross a fork);
- ``TFRecordShards``: iterable-style, the shards in the run's shard order, worker ``w`` of ``W`` reading
  shards ``w, w + W, ...`` through, each worker mixing what it read in a buffer of its share of
  ``shuffle_buffer``.
"""

from __future__ import annotations

import io
import os
import time
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset as MapStyle
from torch.utils.data import IterableDataset, get_worker_info

from jobs.data import read_errors
from jobs.data.datasets import Dataset

# PIL loads its format plugins on the first open: done here, before a run, so that no worker reads a
# module from disk inside the timed pass
Image.init()


class Sample(NamedTuple):
    index: int
    image: object  # decoded float32 HxWx3 tensor, the file's bytes' count only (read-only: None)
    nbytes: int  # bytes read for it from the tier
    label: int
    ok: bool  # False: unreadable or not an image (dropped)
    # its GET from an object store (s3map): (start, end on time.monotonic(), bytes, error)
    request: tuple | None = None


class Batch(NamedTuple):
    images: object  # a float32 tensor (N, side, side, 3), or None (read-only, or every sample dropped)
    indices: object  # int64 numpy array of the delivered images' indices
    nbytes: object  # int64 numpy array: bytes read for each delivered image
    labels: object  # int64 numpy array
    dropped: list  # indices of the images of this batch that could not be read or decoded
    # (worker id, time.monotonic() when it was ready to load: started, torch imported, initialised), or
    # None for a batch loaded in the training process; CLOCK_MONOTONIC is the machine's, not the process's
    worker_ready: tuple | None = None
    requests: tuple = ()  # the batch's GETs, as ``Sample.request`` (an object store's; none from files)


_READY: dict = {}  # in a worker: "at", the time.monotonic() at which it was ready (build's worker_init_fn)


def mark_ready() -> None:
    """Called once in each DataLoader worker when it is ready to load (its ``worker_init_fn``)."""
    _READY["at"] = time.monotonic()


def _worker_ready() -> tuple | None:
    info = get_worker_info()
    return None if info is None else (info.id, _READY.get("at"))


def decode(data: bytes, side: int):
    """JPEG (any PIL image) bytes -> float32 tensor (side, side, 3), as tf.image.resize leaves it."""
    with Image.open(io.BytesIO(data)) as img:
        rgb = img.convert("RGB").resize((side, side), Image.BILINEAR)
    return torch.from_numpy(np.asarray(rgb, dtype=np.float32))


def collate(samples: list[Sample]) -> Batch:
    """A DataLoader's ``collate_fn``: the delivered samples stacked, the dropped ones named."""
    from torch.utils.data import default_collate

    ok = [s for s in samples if s.ok]
    # default_collate stacks a worker's batch straight into shared memory: torch.stack would stack it,
    # then copy it there to send it (a second copy of every batch, 0.93 of a bare DataLoader's rate)
    images = default_collate([s.image for s in ok]) if ok and ok[0].image is not None else None
    # the bookkeeping goes as numpy arrays, pickled with the batch: a tensor leaves a worker through a
    # shared-memory file of its own, and three of them a batch took a read-only worker 1.5 ms a batch
    # (0.2 s of a 0.5 s pass over 1 GB of shards at one worker)
    return Batch(
        images,
        np.fromiter((s.index for s in ok), np.int64, len(ok)),
        np.fromiter((s.nbytes for s in ok), np.int64, len(ok)),
        np.fromiter((s.label for s in ok), np.int64, len(ok)),
        [s.index for s in samples if not s.ok],
        _worker_ready(),
        tuple(s.request for s in samples if s.request is not None),
    )


class _Images(MapStyle):
    """What the datasets share: the run's decode side (None: read only) and emulated read latency."""

    def __init__(self, ds: Dataset, side: int | None, read_delay_ms: float = 0.0):
        self.ds, self.side, self.delay_s = ds, side, read_delay_ms / 1000

    def _sample(self, i: int, read) -> Sample:
        if self.delay_s:
            time.sleep(self.delay_s)
        try:
            data = read(i)
        except OSError as e:
            read_errors.raise_if_failed(self.ds, i, e, self.ds.where(i))
            return Sample(i, None, 0, self.ds.labels[i], False)
        if self.side is None:
            return Sample(i, None, len(data), self.ds.labels[i], True)
        try:
            image = decode(data, self.side)
        except (OSError, ValueError, SyntaxError):  # PIL's UnidentifiedImageError is an OSError
            return Sample(i, None, len(data), self.ds.labels[i], False)
        return Sample(i, image, len(data), self.ds.labels[i], True)

    def __len__(self) -> int:
        return len(self.ds.files)


class ImageFiles(_Images):
    """One image per file, read whole (``open().read()``, as ``tf.io.read_file`` reads it)."""

    def __getitem__(self, i: int) -> Sample:
        return self._sample(i, self._read)

    def _read(self, i: int) -> bytes:
        if self.ds.files[i] in self.ds.skipped:  # a FIFO or a device is never opened
            raise OSError(f"{self.ds.files[i]} is not a regular file")
        with open(self.ds.files[i], "rb", buffering=0) as f:
            return f.read()


class Hdf5Images(_Images):
    """One slice of an HDF5 container's byte array per image; the files are opened by each process."""

    def __init__(self, ds: Dataset, side: int | None, read_delay_ms: float = 0.0):
        super().__init__(ds, side, read_delay_ms)
        self.where = {i: (k, r) for k, members in enumerate(ds.members) for r, i in enumerate(members)}
        self._files: dict = {}
        self._pid = 0

    def _opened(self, k: int):
        import h5py

        if self._pid != os.getpid():  # a worker: the parent's handles are not its own
            self._files, self._pid = {}, os.getpid()
        if k not in self._files:
            f = h5py.File(self.ds.containers[k], "r")
            self._files[k] = (f, f["images"], f["offsets"][:])
        return self._files[k]

    def _read(self, i: int) -> bytes:
        k, r = self.where[i]
        try:
            _, images, offsets = self._opened(k)
            return images[offsets[r] : offsets[r + 1]].tobytes()
        except OSError as e:
            if e.errno is None:  # h5py's word for a damaged file and for a failed read alike: the file says
                read_errors.probe(self.ds.containers[k])
            raise

    def __getitem__(self, i: int) -> Sample:
        return self._sample(i, self._read)

    def close(self) -> None:
        if self._pid == os.getpid():
            for f, _, _ in self._files.values():
                f.close()
        self._files = {}

    def __getstate__(self) -> dict:  # a spawned worker gets no open handles
        return {**self.__dict__, "_files": {}, "_pid": 0}


class NpzSamples(_Images):
    """One npz file per sample (DLIO's and MLPerf Storage's unet3d format), its ``x`` loaded whole by
    ``np.load``; the sample's bytes are then decoded as a file's are."""

    def __init__(self, ds: Dataset, side: int | None, read_delay_ms: float = 0.0):
        from jobs.data.datasets import container_of

        super().__init__(ds, side, read_delay_ms)
        self.paths = container_of(ds)

    def _read(self, i: int) -> bytes:
        from jobs.data import formats

        try:
            return formats.load_npz(self.paths[i])
        except ValueError as e:  # no npz of the tool's: what the file holds, dropped as a damaged image is
            raise OSError(str(e)) from None

    def __getitem__(self, i: int) -> Sample:
        return self._sample(i, self._read)


class TFRecordShards(_Images, IterableDataset):
    """The TFRecord shards, iterable-style: worker ``w`` of ``W`` reads shards ``w::W`` of the run's shard
    order through a buffer of ``buffer // W`` samples (at least 1; 0: no buffer)."""

    def __init__(self, ds, side, read_delay_ms=0.0, *, shards: list[int], buffer: int, seed: int):
        super().__init__(ds, side, read_delay_ms)
        self.shards, self.buffer, self.seed = shards, buffer, seed

    def __iter__(self):
        from jobs.data import order, tfrecord

        info = get_worker_info()
        w, n = (info.id, info.num_workers) if info is not None else (0, 1)
        mine = self.shards[w::n]
        rng = np.random.default_rng([self.seed, w])

        def samples():
            for k in mine:
                try:
                    for data, nbytes in tfrecord.records(self.ds.containers[k]):
                        yield self._record(data, nbytes)
                except tfrecord.BadRecord:
                    # the rest of the shard is lost, as for tf.data: its images are never delivered
                    continue
                except OSError as e:  # the shard's storage went away
                    raise read_errors.ReadFailed(
                        f"a read failed ({read_errors.why(e, self.ds.containers[k])})"
                    ) from None

        if self.buffer:
            return order.buffered(samples(), max(1, self.buffer // n), rng)
        return samples()

    def _record(self, data: bytes, nbytes: int) -> Sample:
        from jobs.data import tfrecord

        if self.delay_s:
            time.sleep(self.delay_s)
        try:
            i, label, encoded = tfrecord.example(data, payload=self.side is not None)
        except tfrecord.BadRecord:
            return Sample(-1, None, nbytes, -1, False)
        if self.side is None:
            return Sample(i, None, nbytes, label, True)
        try:
            return Sample(i, decode(encoded, self.side), nbytes, label, True)
        except (OSError, ValueError, SyntaxError):
            return Sample(i, None, nbytes, label, False)
