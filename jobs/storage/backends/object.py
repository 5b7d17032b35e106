"""``object``: an object store (S3, Azure Blob: ``storage.service``): data is put and read by requests to a
server (the tool's own, started on the tier's root, or a user's at ``storage.endpoint``), never through a
mounted folder of its own."""

from jobs.storage.backends.backend import Backend

BACKEND = Backend(
    "object",
    requests=True,
    every_node=True,  # every node's tasks reach the store's endpoint
    evicts=True,  # the server's volumes sit on a disk whose page cache may hold them
    sighted_only=False,
    settings=("service", "endpoint", "bucket", "prefix", "reader", "client"),
    preset="storage=s3",
    rank=3,
)
