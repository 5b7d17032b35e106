"""The interface every object client implements (``ObjectClient``), and the lending of the embedded
server's keys to a process's environment (``lent``) for a client that reads them there only."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ObjectClient:
    name: str  # storage.client=<name>
    distribution: str  # whose version goes into provenance; checked as installed at planning
    frameworks: tuple[str, ...]  # the frameworks whose readers read through it
    install: str  # how a user installs it, for the planning line
    kinds: tuple[str, ...] = ("object",)  # the kinds of storage it reaches (jobs.storage.backends)
    services: tuple[str, ...] = ("s3",)  # the services it speaks (storage.service: objectstore.services)
    module: str = ""  # the module it is imported as, where not its distribution's name with '_' for '-'
    mounts: bool = False  # it mounts the bucket (storage.reader=fuse): the runs read the objects as files
    # the tool's own requests go through it: the upload, listings, deletes, and a workload's own GETs and
    # PUTs (workload=baseline's); one client has it
    tools: bool = False
    # its state does not survive a fork (a runtime of threads): a DataLoader's workers reading through it
    # are started fresh (spawn), never forked from a process where it may have run
    fresh_workers: bool = False
    # one client per process, configured once: it cannot be pointed at a second endpoint in that process
    process_wide: bool = False

    def installed(self) -> bool:
        try:
            return importlib.util.find_spec(self.module or self.distribution.replace("-", "_")) is not None
        except ModuleNotFoundError:  # a dotted module whose parent package is missing
            return False

    def get(self, store) -> Callable[[str], bytes] | None:
        """One GET of a key of ``store`` (``jobs.storage.objectstore.tier.Store``) by this client, uncounted
        (``Store.fetch`` counts it), for a reader that asks key by key (tf.data's map); None for a client
        its framework's engine reads through on its own (s3torchconnector's ``S3MapDataset``, s3fs's
        mount)."""
        return None

    def get_batch(self, store) -> Callable[[list[str], int], list[tuple]] | None:
        """Many GETs of keys of ``store`` at once, for a reader that asks for a batch of keys per call:
        ``(keys, in_flight)`` -> one (start, end on the machine's monotonic clock, the object's bytes or
        None, the error's first line or None) per key, in order, at most ``in_flight`` requests open at
        once; uncounted (``Store.fetch_batch`` counts them). None: this client GETs one key a call."""
        return None

    def indexed(self, endpoint, keys: tuple[str, ...]):
        """The objects ``keys`` at ``endpoint`` as a sequence a DataLoader's workers index (``[j]``: the
        bytes of ``keys[j]``, one GET), picklable and made without a request: each worker GETs through its
        own. None: this client serves no worker processes."""
        return None

    @contextlib.contextmanager
    def reading(self, store, ds, prefix: str, root: str) -> Iterator[tuple[object, dict]]:
        """Around a cell's runs: (the dataset as the runs read it, what the record says of the client).
        ``prefix``: the dataset's key prefix; ``root``: the tier's root (where a mount point may go)."""
        yield self.named(ds), {}

    def named(self, ds):
        """The stored dataset ``ds`` as read through this client (``Dataset.client``: what a DataLoader's
        workers index through, ``indexed``)."""
        return replace(ds, client=self.name) if ds is not None and ds.store is not None else ds


AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
_AWS_OTHERS = ("AWS_SESSION_TOKEN", "AWS_PROFILE")  # what would otherwise take the lent keys' place


@contextlib.contextmanager
def lent(keys: tuple[str, str] | None, names: tuple[str, str] = AWS):
    """The embedded server's ``keys`` in this process's environment while the block lasts, as ``names``
    (its service's: ``Service.key_env``), for a client that reads them there only (a DataLoader's workers
    inherit them); the earlier values put back after, nothing written to a file. None (a user's endpoint):
    the usual environment or profile, left as it is."""
    if keys is None:
        yield
        return
    every = (*names, *(_AWS_OTHERS if names == AWS else ()))
    saved = {k: os.environ.get(k) for k in every}
    try:
        for k in every:
            os.environ.pop(k, None)
        os.environ[names[0]], os.environ[names[1]] = keys
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
