"""What a kind of storage declares (``storage.kind``): one ``Backend`` per module of
``jobs/storage/backends/`` (or of the namespace package ``iocampaign_backends`` on ``PYTHONPATH``)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Served:
    """What a kind serves a cell's runs (``Backend.serving``) in place of the dataset's files."""

    ds: Any  # the dataset as the runs read it (``jobs.data.datasets.Dataset``: keys of the store)
    data_dir: str  # where a cold run is counted (the device under the store's server)
    prov: dict = field(default_factory=dict)  # what the record keeps of it (provenance's sections)
    store: Any = None  # the open store the runs GET through (``jobs.storage.objectstore.tier``)


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

    def check(self, cfg, workload, here: bool, able: str) -> None:
        """Raise ConfigError for the first setting of the cell's storage (a tier of this kind) that cannot
        run, beyond a setting only another kind has (refused for every kind: ``backends.check_settings``):
        here, none. ``here``: the cell runs on this machine; ``able``: the workloads that read this kind,
        for a message."""

    @contextlib.contextmanager
    def serving(self, s, where):
        """What this kind serves around a cell's runs (a server, a mount), for all of them: ``None`` where
        the runs read the dataset's files where they lie (or a copy staged on ``cfg.stage``), else what
        they read (``Served``). ``s``: the cell's run session (``jobs.runner.runs.Session``: its config,
        dataset, data folder, cell folder and workload); ``where``: its placement
        (``jobs.execution.placement.Placement``: its nodes)."""
        yield None

    def embedded(self, st) -> bool:
        """Whether the tool serves this tier itself (a server it starts on the tier's root): a request
        store with no ``storage.endpoint`` of the user's."""
        return self.requests and not st.endpoint
