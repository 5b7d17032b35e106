"""The object clients a cell's runs read an object store through (``storage.client``, and
``storage.reader=fuse`` for the s3fs mount), one module each, behind one interface (``ObjectClient``).

A client declares what it serves instead of being compared by name: the frameworks whose readers take
it, the kinds of storage it reaches, whether it mounts the bucket (the runs then read files), and the
distribution whose version the record keeps. The runner enters ``reading`` around a cell's runs: the
client gets ready (keys lent to the environment for a client that reads them there, a mount made) and
says which dataset the runs read. A reader that makes its own GETs (tf.data's map) asks the open store's
``fetch``, which goes through the client's ``get``, so every request of every client is counted the same
way (``objects.counted``); a DataLoader's workers index the objects through the client's ``indexed``.

Adding a client: a module here declaring ``CLIENT``, and its line in ``CLIENTS`` (docs/extending.md).
"""

from __future__ import annotations

from jobs.errors import ConfigError
from jobs.storage.objectstore.clients.base import ObjectClient, lent

__all__ = [
    "CLIENTS",
    "ObjectClient",
    "check",
    "get",
    "lent",
    "mounting",
    "of",
    "one_endpoint_each",
    "own",
    "serving",
    "the_tools",
]


def _clients() -> dict[str, ObjectClient]:
    from jobs.storage.objectstore.clients import azure_blob, boto3, s3dlio, s3fs, s3torchconnector

    every = (boto3.CLIENT, s3torchconnector.CLIENT, s3dlio.CLIENT, s3fs.CLIENT, azure_blob.CLIENT)
    return {c.name: c for c in every}


CLIENTS = _clients()


def get(name: str) -> ObjectClient:
    try:
        return CLIENTS[str(name)]
    except KeyError:
        raise ConfigError(
            f"storage.client={name} is not an object client; choose one of "
            f"{', '.join(n for n, c in CLIENTS.items() if not c.mounts)}"
        ) from None


def serving(framework: str, service: str = "s3") -> list[ObjectClient]:
    """The clients a framework's native reader can GET with from a store of ``service``
    (``storage.client``), its own first."""
    return [
        c for c in CLIENTS.values() if not c.mounts and framework in c.frameworks and service in c.services
    ]


def own(framework: str, service: str = "s3") -> ObjectClient | None:
    """The client a framework's native reader uses when ``storage.client`` is null: the first that serves
    it for ``service`` (S3: TensorFlow's boto3, PyTorch's s3torchconnector; Azure Blob:
    azure-storage-blob); None for a framework that reads no such store."""
    return next(iter(serving(framework, service)), None)


def mounting() -> ObjectClient:
    """The client ``storage.reader=fuse`` mounts the bucket with."""
    return next(c for c in CLIENTS.values() if c.mounts)


def the_tools(service: str = "s3") -> ObjectClient:
    """The client the tool's own requests go through on a store of ``service``."""
    return next(c for c in CLIENTS.values() if c.tools and service in c.services)


def of(cfg, framework_reads: bool = True) -> ObjectClient | None:
    """The client a cell's runs read its object store through (None: a framework that reads none).
    ``framework_reads`` False: a workload that makes its own requests (``Workload.uses_framework``)."""
    st = cfg.storage
    service = str(st.service)
    if not framework_reads:
        return the_tools(service)
    if str(st.reader) == "fuse":
        return mounting()
    if st.client is not None:
        return get(st.client)
    from jobs import frameworks

    return own(frameworks.of(cfg).name, service)


def check(cfg, framework_reads: bool, here: bool) -> None:
    """``storage.client`` on a store the cell's runs read: a client of a native reader, serving the cell's
    framework, installed where the cell runs here (``framework_reads``: the workload's framework reads the
    dataset, which it reads through the client)."""
    st, fw = cfg.storage, cfg.framework.name
    if st.client is not None and not framework_reads:
        raise ConfigError(
            f"storage.client={st.client}: workload={cfg.workload.name} makes its own requests; "
            "storage.client chooses the client a framework's reader reads the dataset with"
        )
    if st.client is not None:
        chosen = get(st.client)
        if chosen.mounts or str(st.reader) == "fuse":
            raise ConfigError(
                f"storage.client={st.client} with storage.reader={st.reader}: storage.client chooses the "
                f"native reader's client; storage.reader=fuse reads through {mounting().name}'s mount"
            )
        if fw not in chosen.frameworks:
            raise ConfigError(
                f"storage.client={st.client} does not serve framework={fw} "
                f"(it serves framework={', '.join(chosen.frameworks)})"
            )
    client = of(cfg)
    kind, service = str(st.kind), str(st.service)
    if client is not None and kind not in client.kinds:
        raise ConfigError(f"storage={st.name}: {client.name} reaches no storage of kind {kind}")
    if client is not None and service not in client.services:
        said = f"storage.client={st.client}" if st.client is not None else f"storage.reader={st.reader}"
        raise ConfigError(
            f"{said}: {client.name} speaks {', '.join(client.services)}, and storage={st.name} is "
            f"storage.service={service}"
        )
    if client is not None and client is not own(fw, service) and not client.mounts and _tasks(cfg) > 1:
        raise ConfigError(
            f"storage.client={client.name} with {_tasks(cfg)} tasks: a cell's task processes GET with the "
            f"framework's own client ({own(fw, service).name}) so far; use one task"
        )
    if client is not None and client.fresh_workers and str(cfg.loader.multiprocessing_context) == "fork":
        raise ConfigError(
            f"loader.multiprocessing_context=fork with storage.client={client.name}: its runtime does not "
            "survive a fork, so its DataLoader workers are spawned; leave loader.multiprocessing_context "
            "null (spawn) or give spawn or forkserver"
        )
    if client is None or not framework_reads or not here or client.mounts:
        return  # a framework that reads none is refused with the workload's frameworks; s3fs: needs.py
    if not client.installed():
        raise ConfigError(
            f"storage=s3 framework={fw}: the native reader needs {client.distribution}: "
            f"{client.install}, or use storage.reader=fuse"
        )


def _tasks(cfg) -> int:
    return cfg.platform.nodes * cfg.platform.tasks_per_node


def one_endpoint_each(cfgs) -> None:
    """The cells that one process runs (a local campaign's, one after another), read through a client that
    is process-wide (``ObjectClient.process_wide``: s3dlio), all read one endpoint: the client cannot be
    pointed at a second one in that process, and would read the first store's objects."""
    endpoints: dict[str, list[str]] = {}
    for cfg in cfgs:
        st = cfg.storage
        if st.client is not None and st.client in CLIENTS and CLIENTS[st.client].process_wide:
            where = st.endpoint or "the embedded server"
            endpoints.setdefault(st.client, [])
            if where not in endpoints[st.client]:
                endpoints[st.client].append(where)
    for name, where in endpoints.items():
        if len(where) > 1:
            raise ConfigError(
                f"storage.client={name} on {len(where)} endpoints ({', '.join(map(str, where))}): its "
                "client is one per process and points at one endpoint, and this campaign's cells run in one "
                "process; run each endpoint's cells in a campaign of their own (or on Slurm, where each cell "
                "is a job)"
            )
