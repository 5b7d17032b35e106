"""The kinds of storage a tier can be (``storage.kind``, conf/storage/), each declaring what it can do, so
planning, the runner, the workloads and the estimates ask it instead of comparing kind names.

- ``block``: a local block device; a cold cache means the page cache evicted, and this machine's block
  counters see every read.
- ``network``: a file system every node mounts (Lustre, NFS); this machine's counters may not see its reads,
  so only a positive sighting proves a run cold.
- ``memory``: RAM (tmpfs): nothing to evict.
- ``object``: an S3 object store: data is put and read by requests to a server (the tool's own, started on
  the tier's root, or a user's at ``storage.endpoint``), never through a mounted folder of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.errors import ConfigError


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

    def embedded(self, st) -> bool:
        """Whether the tool serves this tier itself (a server it starts on the tier's root): a request
        store with no ``storage.endpoint`` of the user's."""
        return self.requests and not st.endpoint


BACKENDS = {
    "block": Backend("block", requests=False, every_node=False, evicts=True, sighted_only=False),
    "network": Backend("network", requests=False, every_node=True, evicts=True, sighted_only=True),
    "memory": Backend("memory", requests=False, every_node=False, evicts=False, sighted_only=False),
    "object": Backend(
        "object",
        requests=True,
        every_node=True,  # every node's tasks reach the store's endpoint
        evicts=True,  # the server's volumes sit on a disk whose page cache may hold them
        sighted_only=False,
        settings=("service", "endpoint", "bucket", "prefix", "reader", "client"),
        preset="storage=s3",
    ),
}


def get(kind) -> Backend:
    try:
        return BACKENDS[str(kind)]
    except KeyError:
        raise ConfigError(
            f"storage.kind={kind} is not a kind of storage; choose one of {', '.join(BACKENDS)}"
        ) from None


def of(st) -> Backend:
    """The back-end of a tier's config (``cfg.storage``, ``cfg.checkpoint.slow``, ...)."""
    return get(st.kind)


def check_settings(st, key: str) -> None:
    """Refuse a setting that only another kind of storage has (``storage.bucket`` on a file-system tier), in
    one line naming it: ``key`` is where the tier sits in the config (``storage``, ``checkpoint.slow``)."""
    own = of(st)
    for other in BACKENDS.values():
        for name in other.settings:
            if name not in own.settings and getattr(st, name, None) is not None:
                raise ConfigError(
                    f"{key}.{name}={getattr(st, name)}: {key}={st.name} is of kind {st.kind}; {name} belongs "
                    f"to a tier of kind {other.kind} ({other.preset})"
                )


def settings_of_others(st) -> set[str]:
    """The settings (``storage.<name>``) that other kinds of storage have and this tier's kind does not."""
    own = of(st).settings
    return {name for b in BACKENDS.values() for name in b.settings if name not in own}
