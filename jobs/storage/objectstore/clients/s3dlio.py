"""s3dlio, the object library MLPerf Storage v3.0 requires (its Rust core makes each request outside
Python's GIL): TensorFlow's native reader GETs each image with ``s3dlio.get`` inside tf.data's parallel
map (``storage.client=s3dlio``), in place of boto3.

s3dlio's client is process-wide and reads its keys from the environment only: for the cell's runs the
embedded server's keys are lent to this process's environment and the endpoint configured, and the
earlier environment is put back after (nothing is written to a file). A user's endpoint keeps the usual
AWS environment or profile."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from jobs.storage.objectstore.clients.base import ObjectClient, lent


@dataclass(frozen=True)
class S3dlio(ObjectClient):
    def get(self, store) -> Callable[[str], bytes]:
        import s3dlio

        bucket = store.endpoint.bucket
        return lambda key: bytes(s3dlio.get(f"s3://{bucket}/{key}"))

    @contextlib.contextmanager
    def reading(self, store, ds, prefix: str, root: str) -> Iterator[tuple[object, dict]]:
        import s3dlio

        with lent(store.keys()):
            s3dlio.configure_s3(endpoint_url=store.endpoint.url, region=store.endpoint.region)
            yield ds, {}


CLIENT = S3dlio(
    "s3dlio",
    "s3dlio",
    frameworks=("tensorflow",),
    install="pip install '.[s3]' (make install does it)",
)
