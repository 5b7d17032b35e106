"""The native S3 reader of ``framework=pytorch``: one GET per image read whole in a DataLoader worker
through the cell's object client (``ds.client``: s3torchconnector's ``S3MapDataset`` by default, the AWS
CRT client under PyTorch's map-style dataset, as MLPerf Storage's and DLIO's PyTorch S3 readers use it;
or s3dlio), then decoded as ``ImageFiles`` decodes a file.

A worker's GETs are not in the training process, so each sample carries its request back with the batch:
(start and end on the machine's monotonic clock, bytes, the error's first line or None). The training
process folds them into the open store's counters (``counted``): requests, bytes, GET latency, requests
in flight (intervals of every worker on one clock), and the first error, which fails the run naming the
endpoint. The client retries nothing (``max_attempts=1``): a failed GET is counted, never hidden.

Both clients take their keys from the environment or a profile only: for the embedded server the
training process puts them in its environment for the pass (``credentials``), its workers inherit them
there, and nothing is written to a file."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from jobs.data.datasets import Dataset
from jobs.frameworks.pytorch.loader.samples import Sample, _Images

OWN = "pytorch"  # the framework whose DataLoader this reader feeds: its own client when a dataset names none


class S3Images(_Images):
    """One object per image (``ds.objects``, in the store ``ds.store``), fetched by the cell's object
    client (``ds.client``; a task process's dataset names none: PyTorch's own)."""

    def __init__(self, ds: Dataset, side: int | None, read_delay_ms: float = 0.0):
        from jobs.storage.objectstore import clients

        super().__init__(ds, side, read_delay_ms)
        client = clients.get(ds.client) if ds.client else clients.own(OWN, ds.store.service)
        self.objects = client.indexed(ds.store, ds.objects)

    failed: str | None = None  # in a worker: its first failed GET; it asks for nothing more after one

    def __getitem__(self, i: int) -> Sample:
        request: list = []

        def get(j: int) -> bytes:
            if self.failed is not None:  # the run fails on the first: no more GETs of a dead store to wait on
                raise OSError(f"not asked: an earlier GET failed ({self.failed})")
            start = time.monotonic()
            try:
                data = self.objects[j]
            except Exception as e:  # noqa: BLE001 - S3Exception and the like: counted, the run fails on it
                self.failed = str(e).splitlines()[0] if str(e) else repr(e)
                request.append((start, time.monotonic(), 0, self.failed))
                raise OSError(str(e)) from None
            request.append((start, time.monotonic(), len(data), None))
            return data

        return self._sample(i, get)._replace(request=request[0] if request else None)


def counted(ds: Dataset) -> Callable | None:
    """What takes each batch's requests into the counters of the open store ``ds`` is read from (None for
    a dataset on a file system)."""
    if ds.store is None:
        return None
    from jobs.storage.objectstore import tier

    return tier.opened(ds.store).record


@contextlib.contextmanager
def credentials(ds: Dataset):
    """The embedded server's keys in this process's environment for the pass (its workers inherit them;
    the CRT client reads no other way): ``clients.lent``. A user's endpoint keeps the usual AWS environment
    or profile."""
    from jobs.storage.objectstore.clients import lent

    keys, names = None, None
    if ds.store is not None:
        from jobs.storage.objectstore import services, tier

        keys, names = tier.opened(ds.store).keys(), services.of(ds.store).key_env
    with lent(keys, *([names] if names else [])):
        yield
