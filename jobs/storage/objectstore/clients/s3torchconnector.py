"""s3torchconnector (Amazon's S3 connector for PyTorch, over the AWS CRT client): PyTorch's native reader,
``S3MapDataset`` in the DataLoader's workers (``jobs.frameworks.pytorch.loader.s3map``), as MLPerf
Storage's and DLIO's PyTorch S3 readers use it. The CRT client reads its keys from the environment only:
the engine lends the embedded server's there for the pass (``s3map.credentials``)."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.storage.objectstore.clients.base import ObjectClient


def _read_all(reader) -> bytes:
    """S3MapDataset's transform: the object's bytes, read whole (one GET, no HEAD)."""
    return reader.read()


@dataclass(frozen=True)
class S3torchconnector(ObjectClient):
    def indexed(self, endpoint, keys: tuple[str, ...]):
        import logging

        from s3torchconnector import S3ClientConfig, S3MapDataset

        # its INFO line on every dataset it builds ("Building S3MapDataset from_objects"), once a run: not the
        # terminal's business; its warnings and errors still show
        logging.getLogger("s3torchconnector").setLevel(logging.WARNING)
        return S3MapDataset.from_objects(
            [f"s3://{endpoint.bucket}/{key}" for key in keys],
            region=endpoint.region,
            endpoint=endpoint.url,
            transform=_read_all,
            # path-style: an S3-compatible store on one host has no bucket subdomains; no retry: a failed
            # GET is counted, never hidden
            s3client_config=S3ClientConfig(force_path_style=True, max_attempts=1),
        )


CLIENT = S3torchconnector(
    "s3torchconnector",
    "s3torchconnector",
    frameworks=("pytorch",),
    install="pip install '.[pytorch]' (make install does it)",
)
