"""boto3 (the AWS SDK for Python): TensorFlow's native reader GETs each image with it, inside tf.data's
parallel map (``jobs.frameworks.tensorflow.object_reads``), through the open store's own client
(``tier.Store``). The tool's own requests go through it too: the upload, listings, deletes, and
workload=baseline's GETs and PUTs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jobs.storage.objectstore.clients.base import ObjectClient


@dataclass(frozen=True)
class Boto3(ObjectClient):
    def get(self, store) -> Callable[[str], bytes]:
        bucket, s3 = store.endpoint.bucket, store.client
        return lambda key: s3.get_object(Bucket=bucket, Key=key)["Body"].read()


CLIENT = Boto3(
    "boto3",
    "boto3",
    frameworks=("tensorflow",),
    install="pip install '.[s3]' (make install does it)",
    tools=True,
)
