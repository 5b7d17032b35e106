"""Grain, JAX's data loader (``framework=jax``), over the same stored image files as the tf.data side and
PyTorch's DataLoader: the engines of the workloads that run on JAX (``jobs/frameworks/jax/grain_reading.py``,
``grain_loop.py``) build their loader here.

- ``Images``: Grain's random-access source; position ``k`` of the run's order (``jobs.data.order``,
  numpy's draw of the same kinds of order) is one file read whole (``open().read()``, as
  ``tf.io.read_file`` reads it); a read that fails fails the run (``jobs.data.read_errors``).
- ``Decode``: a ``grain.transforms.Map`` that decodes with PIL and resizes bilinearly to the run's side; an
  image that does not decode is counted as dropped.
- ``loader``: the ``grain.DataLoader`` of one run: Grain's worker processes (spawned, as Grain starts
  them), one read thread each (``grain.ReadOptions(num_threads=1)``: Grain's default of 16 would make
  "1 worker" 16 readers), batches of the run's size.
- ``shut_down``: the workers ended and joined, so their CPU time and reads are the run's.
"""

from __future__ import annotations

import io
import multiprocessing
import time

import grain
import numpy as np

from jobs.data import formats, read_errors
from jobs.data.datasets import Dataset


class Images:
    """Grain's random-access data source: position ``k`` of the run's order is sample ``order[k]``, its file
    read whole (``dataset.format=npz``: its npz file's ``x``, as DLIO's npz reader loads it). Picklable (a
    spawned worker gets its own copy)."""

    def __init__(self, ds: Dataset, order: list[int], read_delay_ms: float = 0.0):
        from jobs.data.datasets import container_of

        self.ds, self.order, self.delay_s = ds, order, read_delay_ms / 1000
        self.paths = container_of(ds) if ds.format == "npz" else ds.files

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, k: int) -> dict:
        i = self.order[k]
        if self.delay_s:
            time.sleep(self.delay_s)
        try:
            data = self._read(i)
        except OSError as e:
            read_errors.raise_if_failed(self.ds, i, e, self.ds.where(i))
            return {"index": i, "data": b"", "nbytes": 0, "ok": False}
        return {"index": i, "data": data, "nbytes": len(data), "ok": True}

    def _read(self, i: int) -> bytes:
        path = self.paths[i]
        if self.ds.format == "npz":
            try:
                return formats.load_npz(path)
            except ValueError as e:  # no npz of the tool's: dropped, as a damaged image is
                raise OSError(str(e)) from None
        if path in self.ds.skipped:  # a FIFO or a device is never opened
            raise OSError(f"{path} is not a regular file")
        with open(path, "rb", buffering=0) as f:
            return f.read()


class Decode(grain.transforms.Map):
    """JPEG bytes -> float32 (side, side, 3), as tf.image.resize leaves it; an image that does not decode (or
    was not read) is a zero image with ``ok`` false. ``side`` None: read only, no image (the bytes read are
    counted and let go)."""

    def __init__(self, side: int | None):
        self.side = side

    def map(self, r: dict) -> dict:
        out = {"index": r["index"], "nbytes": r["nbytes"], "ok": r["ok"]}
        if self.side:  # every record of a run the same structure: Grain's batch stacks them key by key
            blank = np.zeros((self.side, self.side, 3), np.float32)
            out["ok"], out["image"] = _decoded(r["data"], self.side, blank) if r["ok"] else (False, blank)
        return out


def _decoded(data: bytes, side: int, blank):
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            rgb = img.convert("RGB").resize((side, side), Image.BILINEAR)
    except (OSError, ValueError, SyntaxError):  # PIL's UnidentifiedImageError is an OSError
        return False, blank
    return True, np.asarray(rgb, dtype=np.float32)


def loader(ds: Dataset, s, workers: int, *, decode: bool):
    """The ``grain.DataLoader`` of one run (``s``: its ``PipelineSettings``): one pass over the set in the
    run's order, in batches: each worker batches the samples it reads, and its last batch may be short."""
    from absl import flags

    from jobs.data import order

    if not flags.FLAGS.is_parsed():  # Grain reads absl flags; a program that is not absl's never parsed them
        flags.FLAGS.mark_as_parsed()
    indices = order.indices(ds, shuffle=s.shuffle, shuffle_buffer=s.shuffle_buffer, seed=s.seed)
    source = Images(ds, indices, s.read_delay_ms)
    sampler = grain.samplers.IndexSampler(
        len(source), shuffle=False, num_epochs=1, shard_options=grain.sharding.NoSharding()
    )
    batch = grain.transforms.Batch(s.batch_size, drop_remainder=False)
    return grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[Decode(s.image_side if decode else None), batch],
        worker_count=workers,
        read_options=grain.ReadOptions(num_threads=1, prefetch_buffer_size=s.batch_size),
    )


def shut_down(it, timeout_s: float = 30.0) -> None:
    """End the iterator's workers and wait for them (their resource use is then this process's children's)."""
    import gc

    close = getattr(it, "close", None) or getattr(getattr(it, "_iterator", None), "close", None)
    if close is not None:
        close()
    del it
    gc.collect()
    deadline = time.monotonic() + timeout_s
    for p in multiprocessing.active_children():
        p.join(max(0.0, deadline - time.monotonic()))
    _batches_freed(max(0.0, deadline - time.monotonic()))


def _batches_freed(timeout_s: float) -> None:
    """Wait until Grain has freed the shared memory of the batches this process took: it unlinks a batch's
    arrays in a thread of its own (``SharedMemoryArray``'s asynchronous delete), so a task that ends right
    after its run would leave its last batch in /dev/shm (measured: 38 MB a task and run, 64 images of 224²,
    kept until the campaign's own end). The thread takes its work in order: once a no-op given to it now has
    run, every delete given before it has."""
    from grain._src.python.ipc import shared_memory_array

    deletes = getattr(shared_memory_array.SharedMemoryArray, "_del_thread_pool", None)
    if deletes is not None:
        deletes.apply_async(int).wait(timeout_s)
