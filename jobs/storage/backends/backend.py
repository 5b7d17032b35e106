"""What a kind of storage declares (``storage.kind``): one ``Backend`` per module of
``jobs/storage/backends/`` (or of the namespace package ``iocampaign_backends`` on ``PYTHONPATH``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    kind: str
    # its data is reached by requests to a server (S3's PUT and GET) under the tool's own prefix, not as
    # files of a mounted folder: the runs read through an object client, the dataset is put there first
    requests: bool
    every_node: bool  # every node of a Slurm job reaches the same data: a multi-node cell may read it
    evicts: bool  # its reads can be served by the page cache: a cold run needs it evicted
    # this machine's block counters may miss its reads (a network file system): only a positive sighting of
    # the bytes on the device proves a run cold
    sighted_only: bool
    # the settings only this kind has (``storage.<name>``); planning refuses them on any other tier
    settings: tuple[str, ...] = ()
    preset: str = ""  # a preset of this kind, named in messages (``storage=s3``)
    rank: int = 100  # its place where the kinds are listed (the built-in ones first)

    def embedded(self, st) -> bool:
        """Whether the tool serves this tier itself (a server it starts on the tier's root): a request
        store with no ``storage.endpoint`` of the user's."""
        return self.requests and not st.endpoint
