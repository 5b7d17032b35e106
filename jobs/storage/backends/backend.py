"""What a kind of storage declares (``storage.kind``): one ``Backend`` per module of
``jobs/storage/backends/`` (or of the namespace package ``iocampaign_backends`` on ``PYTHONPATH``)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from jobs.errors import ConfigError


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

    # ---- its space: where a tier's files lie and what is free there ----
    def space(self, st) -> tuple[str | None, float | None]:
        """(the folder where tier ``st``'s files lie before any cell runs, the bytes free there); None for
        what planning cannot know. The base: the tier's root (a modelled tier's backing folder; an emulated
        tier, the size of the file system its cell makes)."""
        from jobs.storage import writable

        return writable.files_and_space(st)

    def copies(self, st) -> int:
        """How many copies of a dataset tier ``st`` keeps in that space: one, its files."""
        return 1

    # ---- a run made cold (or warm), and what proves it ----
    def evict(self, files, drop_caches: bool = False) -> int | None:
        """Make the next reads of ``files`` (the dataset's, or the server's under it) come from the device:
        evicted from this machine's page cache, and every cache with ``drop_caches``. Returns the bytes
        still resident after (None: not known)."""
        from jobs.storage import cache

        return cache.evict(files, drop_caches=drop_caches).resident_bytes_after

    def warm(self, files) -> int:
        """Read ``files`` into the page cache; returns the bytes resident after."""
        from jobs.storage import cache

        cache.warm(files)
        return cache.residency(files)[0]

    def cache_state(self, requested: str, fs_type: str, device_bytes: int | None, consumed: int) -> str:
        """The cache state a run had, one of ``jobs.storage.cache.STATES`` (cold, not_cold, warm, not_warm,
        memory, unknown): what the device under ``fs_type`` delivered (``device_bytes``, None: not
        counted) against what the run ``consumed``, where only a positive sighting counts when this
        machine's counters may miss the kind's reads. ``requested``: ``cfg.cache`` (cold or warm)."""
        from jobs.storage import cache

        return cache.classify(requested, self.sighted_only, fs_type, device_bytes, consumed)

    def judged(
        self, requested: str, fs_type: str, device_bytes: int | None, consumed: int, key: str = "storage"
    ) -> str:
        """``cache_state``, as the runner records it: an answer the records and the analysis do not know
        fails the run, naming the kind (a kind's own ``cache_state`` may not invent a state) where the tier
        sits in the config (``key``: storage, stage, checkpoint.slow)."""
        from jobs.storage import cache

        state = self.cache_state(requested, fs_type, device_bytes, consumed)
        if state not in cache.STATES:
            raise ConfigError(
                f"{key}.kind={self.kind}: its cache_state answered {state!r}, which is not a cache state; "
                f"a kind answers one of {', '.join(cache.STATES)} (jobs/storage/cache.py)"
            )
        return state

    def embedded(self, st) -> bool:
        """Whether the tool serves this tier itself (a server it starts on the tier's root): a request
        store with no ``storage.endpoint`` of the user's."""
        return self.requests and not st.endpoint
