"""A read that failed against an image that could not be decoded.

A run drops an image that reads but does not decode (a truncated JPEG, a text file named ``.jpg``): a
defect of the set, counted as dropped. A read that fails (ENOTCONN from a FUSE mount whose daemon died,
EIO, ENOENT for a file the listing found, a GET that failed) is not a property of the set: its storage
went away, and a run that went on would report the images it read before as the tier's speed. So such a
run fails (``ReadFailed``), naming the tier (``named``, by the runner) and what failed.

What the listing already found unreadable stays a defect of the set: a FIFO or a device (never opened,
``Dataset.skipped``), and a file it could not stat or that was empty (a dangling or looping link, a
listed path that was never there: ``Dataset.sizes`` 0), counted as dropped as before.

TensorFlow's pipeline drops both kinds alike (``ignore_errors`` sees only an error), so its dropped
images are judged after the run (``judge``): each read again, and decoded again where the run decoded.
PyTorch's datasets know at the read, and raise there (``raise_if_failed``)."""

from __future__ import annotations

import errno as errnos
import os
from collections.abc import Callable, Sequence

from jobs.data.datasets import Dataset

_TORCH_WRAPPED = "Caught ReadFailed"  # how a DataLoader re-raises a worker's error, with its traceback


class ReadFailed(RuntimeError):
    """A read of a listed image failed: its storage went away; the run's numbers are no measurement.

    A DataLoader re-raises a worker's ReadFailed as ``ReadFailed("Caught ReadFailed in DataLoader
    worker process 0.\\nOriginal Traceback ...")``: the worker's own one line is taken back out of it."""

    def __init__(self, message: str):
        if message.startswith(_TORCH_WRAPPED):
            last = [line for line in message.splitlines() if line.strip()][-1]
            message = last.split(f"{ReadFailed.__name__}: ", 1)[-1]
        super().__init__(message)


def why(e: OSError, path: str) -> str:
    """One line for a failed read: the errno's name, its text and the path."""
    if not e.errno:
        return f"{e}: {path}"
    name = errnos.errorcode.get(e.errno, f"errno {e.errno}")
    return f"{name}: {os.strerror(e.errno)}: {path}"  # the errno's own text, not a library's long line


def listed_unreadable(ds: Dataset, i: int) -> bool:
    """Whether image ``i`` was unreadable when the set was listed (a defect of the set, not a failure of
    its storage): not a regular file, or nothing to stat or an empty file (its listed size 0)."""
    if ds.format != "files" or ds.store is not None:
        return False
    return ds.files[i] in ds.skipped or ds.sizes[i] == 0


def failed(ds: Dataset, i: int, e: OSError) -> bool:
    """Whether ``e``, raised reading image ``i``, is a failed read of its storage. An OSError without an
    errno is a library's word for content it could not parse (PIL, h5py), or a skipped file never opened."""
    return e.errno is not None and not listed_unreadable(ds, i)


def raise_if_failed(ds: Dataset, i: int, e: OSError, path: str) -> None:
    """Raise ReadFailed when ``e``, raised reading image ``i`` at ``path``, is a failed read."""
    if failed(ds, i, e):
        raise ReadFailed(f"a read failed ({why(e, path)})") from None


def judge(ds: Dataset, dropped: Sequence[int], decodes: Callable[[bytes], bool] | None) -> None:
    """Raise ReadFailed when one of the images a run ``dropped`` was lost to a failed read, not to its
    content: read again now, it fails, or (``decodes``: the run's own decode, None for a read-only run)
    it reads and decodes, so it was the run's read that failed. A container (TFRecord, HDF5) that reads
    whole now lost its images to what it holds. Images in an object store are judged by the store's
    counted GETs instead (``jobs.storage.objectstore.tier.Store.end_run``)."""
    if not dropped or ds.store is not None:
        return
    lost = f"{len(dropped)} of {len(ds.files)} images were not delivered"
    if ds.format != "files":
        held = set(dropped)
        for path, members in zip(ds.containers, ds.members):
            if held.intersection(members):
                _reread(path, lost)
        return
    for i in dropped:
        if listed_unreadable(ds, i):
            continue
        data = _reread(ds.files[i], lost)
        if decodes is not None and not decodes(data):
            continue  # it reads and does not decode: dropped for what it holds
        now = "reads and decodes" if decodes is not None else "reads"
        raise ReadFailed(f"{lost}; the run's read of {ds.files[i]} failed (it {now} now)")


def probe(path: str) -> None:
    """Raise the OSError of reading ``path``'s first byte, if it fails (a container a library could not
    read, asked whether its storage still answers)."""
    with open(path, "rb", buffering=0) as f:
        f.read(1)


def _reread(path: str, lost: str) -> bytes:
    try:
        with open(path, "rb", buffering=0) as f:
            return f.read()
    except OSError as e:
        raise ReadFailed(f"{lost} and reads failed ({why(e, path)})") from None


def named(e: ReadFailed, storage: str, run: int) -> ReadFailed:
    """``e`` as the runner says it: the tier and the run (a warm-up when <= 0) it happened in."""
    what = f"run {run}" if run > 0 else f"warm-up {1 - run}"
    return ReadFailed(f"storage={storage}: {e} during {what}; its numbers are dropped")
