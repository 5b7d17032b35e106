"""s3torchconnector (Amazon's S3 connector for PyTorch, over the AWS CRT client): PyTorch's native reader,
``S3MapDataset`` in the DataLoader's workers (``jobs.data.loader.s3map``), as MLPerf Storage's and DLIO's
PyTorch S3 readers use it. The CRT client reads its keys from the environment only: the engine lends the
embedded server's there for the pass (``s3map.credentials``)."""

from __future__ import annotations

from jobs.storage.objectstore.clients.base import ObjectClient

CLIENT = ObjectClient(
    "s3torchconnector",
    "s3torchconnector",
    frameworks=("pytorch",),
    install="pip install '.[pytorch]' (make install does it)",
)
