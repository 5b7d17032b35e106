"""The DataLoader of one ``framework=pytorch`` run, from the cell's ``loader.*`` settings, over the same
dataset and the same kind of order as the tf.data pipeline (``jobs.frameworks.tensorflow.pipeline``)."""

from __future__ import annotations

import functools
import logging
import os
import warnings
from dataclasses import dataclass

from jobs.data.datasets import Dataset
from jobs.data.loading import PipelineSettings

log = logging.getLogger(__name__)

# PyTorch's warning, on every iterator, that there are more workers than usable cores: the cell's log says it
# once instead (``_shared``), and the record has both numbers
_MORE_WORKERS = r"This DataLoader will create \d+ worker processes in total"

PREFETCH_FACTOR = 2  # PyTorch's default: batches each worker loads ahead (loader.prefetch_factor=null)


@dataclass(frozen=True)
class Loader:
    """``torch.utils.data.DataLoader``'s settings of a cell (``jobs.schema.LoaderConf``, typed once)."""

    num_workers: int
    prefetch_factor: int | None
    pin_memory: bool
    persistent_workers: bool
    multiprocessing_context: str | None

    @classmethod
    def from_config(cls, cfg) -> Loader:
        from jobs import frameworks

        lo = cfg.loader
        context = str(lo.multiprocessing_context) if lo.multiprocessing_context is not None else None
        workers = frameworks.workers(cfg)
        ahead = lo.prefetch_factor if lo.prefetch_factor is not None or not workers else PREFETCH_FACTOR
        if context is None and workers and _fresh_workers(cfg):
            context = "spawn"
        return cls(workers, ahead, lo.pin_memory, lo.persistent_workers, context)

    @property
    def start_method(self) -> str:
        """How the workers start: the setting, or PyTorch's default for this platform."""
        if self.num_workers == 0:
            return "none"
        import multiprocessing

        return self.multiprocessing_context or multiprocessing.get_start_method()


def _fresh_workers(cfg) -> bool:
    """The cell's object client must have its workers started fresh (``ObjectClient.fresh_workers``)."""
    from jobs.storage import backends
    from jobs.storage.objectstore import clients

    if not backends.of(cfg.storage).requests:
        return False
    client = clients.of(cfg)
    return client is not None and client.fresh_workers


def dataset(ds: Dataset, s: PipelineSettings, *, decode: bool):
    """(the torch dataset of the run, its sampler: the order of a map-style one; None for TFRecord)."""
    from jobs.data import order
    from jobs.data.order import buffer_of, groups
    from jobs.frameworks.pytorch.loader import samples

    side = s.image_side if decode else None
    if ds.format == "tfrecord":
        import numpy as np

        shards = order.group_order(len(groups(ds)), s.shuffle, np.random.default_rng(s.seed))
        buffer = buffer_of(ds, s.shuffle, s.shuffle_buffer)
        return samples.TFRecordShards(
            ds, side, s.read_delay_ms, shards=shards, buffer=buffer, seed=s.seed
        ), None
    if ds.store is not None:  # one object per image in an object store (storage.kind=object)
        from jobs.frameworks.pytorch.loader.s3map import S3Images as kind
    else:
        kind = {"hdf5": samples.Hdf5Images, "npz": samples.NpzSamples}.get(ds.format, samples.ImageFiles)
    sampler = order.indices(ds, shuffle=s.shuffle, shuffle_buffer=s.shuffle_buffer, seed=s.seed)
    return kind(ds, side, s.read_delay_ms), sampler


def loader(data, sampler, s: PipelineSettings, lo: Loader):
    """The DataLoader over ``data`` in ``sampler``'s order (None: the dataset's own, iterable)."""
    from torch.utils.data import DataLoader

    from jobs.frameworks.pytorch.loader import samples

    kw = {}
    usable = len(os.sched_getaffinity(0))
    if lo.num_workers > usable:
        _shared(lo.num_workers, usable)
    if lo.num_workers > 0:
        kw = {
            "prefetch_factor": lo.prefetch_factor,
            "persistent_workers": lo.persistent_workers,
            "multiprocessing_context": lo.multiprocessing_context,
            "worker_init_fn": _worker_init,
        }
    kind = DataLoader
    if lo.start_method == "fork":
        import gc

        gc.collect()  # here, before the run's time starts: nothing left for a forked worker to collect
        kind = _forked_apart(DataLoader)
    return kind(
        data,
        batch_size=s.batch_size,
        sampler=sampler,
        num_workers=lo.num_workers,
        collate_fn=samples.collate,
        pin_memory=lo.pin_memory,
        **kw,
    )


@functools.cache
def _forked_apart(base):
    """PyTorch's ``DataLoader`` whose workers, forked when it is iterated, never collect this process's
    objects: the garbage collector's objects are frozen while they start (``gc.freeze``), and the loader
    collected this process's garbage when it was built. A worker forked from a process that ran TensorFlow
    (a benchmark's alternating rounds) once collected an iterator of TensorFlow's there, whose thread
    pool's destructor waited for threads the fork does not copy: the worker hung, its run with it, and
    the device lock it had inherited with it (a CI run beside a CPU hog, 2026-11-29)."""
    import gc

    class DataLoader(base):
        def __iter__(self):
            gc.freeze()
            try:
                return super().__iter__()
            finally:
                gc.unfreeze()

    return DataLoader


@functools.cache
def _shared(workers: int, usable: int) -> None:
    """Say once per process that the workers outnumber the cores, and keep PyTorch's own warning of it
    (on every iterator) quiet from then on."""
    warnings.filterwarnings("ignore", message=_MORE_WORKERS, category=UserWarning)
    log.info("loader.num_workers=%d on %d usable cores: the workers share them", workers, usable)


def _worker_init(_worker_id: int) -> None:
    """A worker reads whole samples on one thread, as tf.data's map threads do: torch's own intra-op
    threads (a resize, a stack) would compete with the other workers for the same cores."""
    import torch

    from jobs.frameworks.pytorch.loader import samples

    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    samples.mark_ready()


def worker_pids(iterator) -> list[int]:
    """The pids of a DataLoader iterator's worker processes (none when it loads in this process)."""
    return [w.pid for w in getattr(iterator, "_workers", ()) if w.pid is not None]


class WorkerDied(RuntimeError):
    """A DataLoader worker process died during a run; the message names it."""


def died(error: BaseException) -> WorkerDied | None:
    """The typed error for a DataLoader's "worker ... exited unexpectedly", or None for any other error."""
    text = str(error)
    if "DataLoader worker" in text and ("exited unexpectedly" in text or "killed by signal" in text):
        return WorkerDied(f"framework=pytorch: {text.splitlines()[0]}; the run's numbers are dropped")
    return None


def shut_down(it, loader, data) -> None:
    """Join the run's workers (persistent ones too: a run ends with its pass) and close what it opened."""
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()
    loader._iterator = None  # a persistent_workers loader keeps its iterator: let it go with the run
    close = getattr(data, "close", None)
    if close is not None:
        close()
