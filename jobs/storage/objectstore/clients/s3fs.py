"""s3fs-fuse: ``storage.reader=fuse`` mounts the dataset's prefix with s3fs, and any framework's reader of
files reads the objects as files there (``jobs.storage.objectstore.fuse``); the server counts its
requests, as the client's own are not the tool's to count."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

from jobs.storage.objectstore.clients.base import ObjectClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class S3fs(ObjectClient):
    def installed(self) -> bool:
        from jobs.storage.objectstore import fuse

        return fuse.program() is not None

    @contextlib.contextmanager
    def reading(self, store, ds, prefix: str, root: str) -> Iterator[tuple[object, dict]]:
        from jobs.storage.objectstore import fuse, tier

        with fuse.mounted(store, prefix, root) as point:
            log.info("%s mounted at %s by s3fs", ds.location, point)
            yield tier.as_files(ds, point), {"mount": str(point), "s3fs": fuse.version()}


CLIENT = S3fs(
    "s3fs",
    "s3fs",
    frameworks=("tensorflow", "pytorch", "jax"),  # any reader of files
    install="Debian: apt-get install s3fs",
    mounts=True,
)
