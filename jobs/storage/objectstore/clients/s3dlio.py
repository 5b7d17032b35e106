"""s3dlio, the object library MLPerf Storage v3.0 requires (its Rust core makes each request outside
Python's GIL), as ``storage.client=s3dlio``: TensorFlow's native reader asks it for a batch of keys per
call (``get_batch``: ``s3dlio.get_async`` under asyncio, ``threads`` GETs in flight, each timed), in place
of boto3's GET per image inside tf.data's map, which holds the GIL around every call; PyTorch's DataLoader
workers GET theirs with it, in place of s3torchconnector's ``S3MapDataset``.

s3dlio's client is process-wide and reads its keys from the environment only: for the cell's runs the
embedded server's keys are lent to this process's environment and the endpoint configured, and the
earlier environment is put back after (nothing is written to a file). A user's endpoint keeps the usual
AWS environment or profile. Its runtime does not survive a fork (a DataLoader worker forked from a process
that had used it hung on its first GET), so a DataLoader's workers reading through it are spawned, and
each configures its own client on its first GET."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from jobs.storage.objectstore.clients.base import ObjectClient, lent


@dataclass(frozen=True)
class S3dlio(ObjectClient):
    def get(self, store) -> Callable[[str], bytes]:
        import s3dlio

        bucket = store.endpoint.bucket
        return lambda key: bytes(s3dlio.get(f"s3://{bucket}/{key}"))

    def get_batch(self, store) -> Callable[[list[str], int], list[tuple]]:
        bucket = store.endpoint.bucket
        return lambda keys, in_flight: asyncio.run(_many([f"s3://{bucket}/{k}" for k in keys], in_flight))

    @contextlib.contextmanager
    def reading(self, store, ds, prefix: str, root: str) -> Iterator[tuple[object, dict]]:
        import s3dlio

        at = (store.endpoint.url, store.endpoint.region)
        if _CONFIGURED and _CONFIGURED[0] != at:
            from jobs.storage.objectstore.client import StoreError

            # a second configure_s3 in one process does not re-point its client (checked: its GETs went to the
            # first server): reading on would read another store's objects. Planning refuses such a grid
            # (clients.one_endpoint_each); this holds for a process planning did not see
            raise StoreError(
                f"storage.client=s3dlio: this process's s3dlio client points at {_CONFIGURED[0][0]}, and "
                f"s3dlio cannot be pointed at {at[0]} in the same process; run the cells on that endpoint "
                "in a campaign of their own"
            )
        with lent(store.keys()):
            s3dlio.configure_s3(endpoint_url=at[0], region=at[1])
            _CONFIGURED[:] = [at]
            yield self.named(ds), {}

    def indexed(self, endpoint, keys: tuple[str, ...]):
        return _Objects(endpoint.url, endpoint.region, endpoint.bucket, tuple(keys))


_CONFIGURED: list = []  # the (endpoint, region) this process's s3dlio client was configured for


async def _many(uris: list[str], in_flight: int) -> list[tuple]:
    """Every GET of ``uris`` at once, ``in_flight`` at most open (a semaphore), each timed from when it
    was sent to when its bytes were in hand."""
    gate = asyncio.Semaphore(max(1, in_flight))
    return await asyncio.gather(*(_one(uri, gate) for uri in uris))


async def _one(uri: str, gate: asyncio.Semaphore) -> tuple:
    import s3dlio

    async with gate:
        start = time.monotonic()
        try:
            body = bytes(await s3dlio.get_async(uri))
        except Exception as e:  # noqa: BLE001 - counted; the run fails on it, naming the endpoint
            return start, time.monotonic(), None, (str(e).splitlines() or [repr(e)])[0]
        return start, time.monotonic(), body, None


class _Objects:
    """``[j]``: the bytes of ``keys[j]``, one ``s3dlio.get``; picklable (a spawned worker gets a copy) and
    configured in the process that first indexes it."""

    def __init__(self, url: str, region: str, bucket: str, keys: tuple[str, ...]):
        self.url, self.region, self.bucket, self.keys = url, region, bucket, keys
        self._ready = False

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, j: int) -> bytes:
        import s3dlio

        if not self._ready:
            s3dlio.configure_s3(endpoint_url=self.url, region=self.region)
            self._ready = True
        return bytes(s3dlio.get(f"s3://{self.bucket}/{self.keys[j]}"))

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_ready": False}  # a new process configures its own


CLIENT = S3dlio(
    "s3dlio",
    "s3dlio",
    frameworks=("tensorflow", "pytorch"),
    install="pip install '.[s3]' (make install does it)",
    fresh_workers=True,
    process_wide=True,
)
