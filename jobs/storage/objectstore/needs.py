"""What a cell on an object store (``storage.kind=object``) must say, checked at planning: one line
naming the setting for each thing that cannot run, before any server starts or any byte is put."""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import urllib.parse

from jobs.errors import ConfigError
from jobs.storage import backends
from jobs.storage.objectstore import clients, services
from jobs.storage.objectstore.services import Abilities

# a host name's labels (RFC 1123, and '_' as /etc/hosts and container names have it): no space, no '-' at
# either end of a label
_HOST_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")


def check(cfg, workload, here: bool, able: str) -> None:
    """Raise ConfigError for the first setting of the cell's object store that cannot run: the checks of
    the object back-end's own ``check`` (``here``: the cell runs on this machine, whose programs are then
    checked too; ``able``: the workloads that read from an object store, for the message)."""
    st = cfg.storage
    _settings(st)
    _service_can(cfg, workload)
    _reach(cfg, workload, able)
    if here:
        _client_here(st)
    # a workload whose framework reads the dataset reads it through the cell's client; the others make their
    # own requests (a baseline's, a sharded checkpoint's writer)
    clients.check(cfg, workload.uses_framework and workload.needs_dataset, here)
    if here and st.reader == "fuse":
        _fuse_here()
    if here and not st.endpoint:
        _embedded_here(st)


def check_others(cfg, workload, here: bool) -> None:
    """The tiers a cell names beside its storage: the burst buffer's slow tier may be a bucket (of a
    workload that declares it, ``Workload.bucket_checkpoints``); the fast tier and the staging tier may
    not."""
    for key, st in (("checkpoint.fast", cfg.checkpoint.fast), ("stage", cfg.stage)):
        if st is not None and backends.of(st).requests:
            raise ConfigError(
                f"{key}={st.name}: an object store is a tier for the dataset and the burst buffer's slow "
                "tier (storage@checkpoint.slow=s3) only"
            )
    slow = cfg.checkpoint.slow
    if slow is not None and backends.of(slow).requests:
        _checkpoint_bucket(cfg, workload, here)


def _checkpoint_bucket(cfg, workload, here: bool) -> None:
    """``storage@checkpoint.slow=s3`` (or another service's preset): the burst buffer drains to a bucket."""
    slow, key = cfg.checkpoint.slow, "checkpoint.slow"
    if not workload.bucket_checkpoints:
        raise ConfigError(
            f"{key}={slow.name}: workload={cfg.workload.name} does not write its checkpoints to a bucket "
            "(workload=checkpoint does, through its burst buffer)"
        )
    if cfg.checkpoint.target != "burst_buffer":
        raise ConfigError(
            f"checkpoint.target={cfg.checkpoint.target} with {key}={slow.name}: a framework writes its "
            "checkpoints as files, which reach a bucket through the burst buffer "
            "(checkpoint.target=burst_buffer)"
        )
    _settings(slow, key)
    service = services.get(slow.service)
    if Abilities.CHECKPOINTS not in service.can:
        able = services.able(Abilities.CHECKPOINTS)
        use = " or ".join(s.preset.replace("storage=", f"storage@{key}=") for s in able) or "a file tier"
        raise ConfigError(
            f"{key}={slow.name}: the burst buffer drains to a store of {' or '.join(s.name for s in able)} "
            f"so far, and {slow.name} is {service.title} ({key}.service={slow.service}); use {use}"
        )
    if slow.client is not None:
        tools = clients.the_tools(str(slow.service)).name
        raise ConfigError(
            f"{key}.client={slow.client}: the burst buffer drains to the bucket and restores from it through "
            f"the tool's own client ({tools}); storage.client is for the runs' readers"
        )
    if here:
        _client_here(slow)
    if here and not slow.endpoint:
        _embedded_here(slow)


def _settings(st, key: str = "storage") -> None:
    """The store's settings (``key``: storage or checkpoint.slow, for the messages)."""
    if st.service is None:
        raise ConfigError(
            f"{key}.service is not set: an object store's tier names the service it speaks "
            f"({', '.join(services.SERVICES)})"
        )
    service = services.get(st.service)
    if st.endpoint:
        _endpoint(st.endpoint, key, service)
        keys = service.keys_problem(os.environ)  # the environment the cells inherit
        if keys:
            raise ConfigError(f"{key}.endpoint={st.endpoint}: {keys}")
    if st.bucket is None:
        raise ConfigError(
            f"{key}.bucket is not set: the tool reads and writes in a {service.container} of the store "
            f"(leave {service.preset or key}'s own, or name one)"
        )
    why = service.bucket_problem(st.bucket)
    if why:
        raise ConfigError(
            f"{key}.bucket={st.bucket} is not an {service.title} {service.container} name: {why}"
        )
    parts = (st.prefix or "").split("/")
    if not st.prefix or any(p in ("", ".", "..") for p in parts):
        raise ConfigError(
            f"{key}.prefix={st.prefix} must name a key prefix of its own (e.g. iocampaign): the tool "
            "writes and deletes only below it"
        )
    if key == "storage" and st.reader is None:
        raise ConfigError("storage.reader is not set: storage=s3 reads with storage.reader=native or fuse")


def _endpoint(endpoint: str, key: str, service) -> None:
    """An endpoint URL a client of ``service`` can connect to: http(s), a host name or IP address, a port in
    1-65535, no keys in it (each a line now rather than a client's error once the server is to be
    reached)."""
    bad = (
        f"{key}.endpoint={endpoint} is not an {service.title} endpoint URL (http:// or https://host[:port]); "
        "null: the tool starts its own server"
    )
    try:
        url = urllib.parse.urlsplit(endpoint)
        host = url.hostname
    except ValueError as e:  # an unclosed [ of an IPv6 address
        raise ConfigError(f"{bad} ({str(e)[:1].lower()}{str(e)[1:]})") from None
    try:
        port = url.port
    except ValueError:  # out of range, or not a number
        port = 0
    if url.netloc.count(":") > 1 and not url.netloc.startswith("["):
        raise ConfigError(f"{bad} (an IPv6 address goes in brackets: {url.scheme}://[::1]:9000)")
    if url.scheme not in ("http", "https") or not host:
        raise ConfigError(bad)
    # the URL goes into records: keys belong in the environment, and a query is a SAS token or a signature
    if url.username or url.password or url.query:
        raise ConfigError(
            f"{key}.endpoint carries credentials in its URL; give the URL alone and the keys as "
            f"{' and '.join(service.key_env)} ({service.title}'s usual environment)"
        )
    if not _HOST.fullmatch(host) and not _ip(host):
        raise ConfigError(f"{bad} (host {host!r} is neither a host name nor an IP address)")
    # a host name's last label is never all digits (RFC 1123): dotted numbers are an IPv4 address or nothing
    if host.rsplit(".", 1)[-1].isdigit() and not _ip(host):
        raise ConfigError(f"{bad} (host {host!r} is not an IPv4 address: four numbers, each 0-255)")
    if port == 0:
        raise ConfigError(f"{bad} (its port must be a whole number 1-65535)")


def _ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _reach(cfg, workload, able: str) -> None:
    """What reads from an object store so far: the workloads and frameworks that declare it, one
    process, one object per image."""
    where = f"storage={cfg.storage.name}"
    if not workload.object_readers:
        raise ConfigError(
            f"{where}: workload={cfg.workload.name} does not read from an object store "
            f"(workloads of kind {able} do, so far)"
        )
    if cfg.stage is not None:  # the runs would GET every image and be labelled staged
        raise ConfigError(
            f"{where} with storage@stage={cfg.stage.name}: the runs on an object store read the images "
            "from the store itself, so nothing staged would be read; leave storage@stage out"
        )
    if cfg.dataset is None and cfg.storage.reader == "fuse":
        raise ConfigError(
            f"{where}: workload={cfg.workload.name} reads no dataset; storage.reader=fuse is for the runs "
            "that read one (leave storage.reader=native)"
        )
    if not workload.uses_framework and cfg.storage.reader == "fuse":
        raise ConfigError(
            f"{where}: workload={cfg.workload.name} measures the store's own GETs and PUTs; "
            "storage.reader=fuse is for the runs that read the dataset (use storage.reader=native)"
        )
    if cfg.framework.name not in workload.object_readers:
        raise ConfigError(
            f"{where}: framework={cfg.framework.name} does not read from an object store yet "
            f"(framework={', '.join(workload.object_readers)} does)"
        )
    if cfg.dataset is not None and cfg.dataset.format != "files" and cfg.storage.reader != "fuse":
        raise ConfigError(
            f"{where}: dataset.format={cfg.dataset.format} shards are objects read through the s3fs mount "
            "so far (storage.reader=fuse); the native readers GET one object per image "
            "(dataset.format=files)"
        )
    tasks = cfg.platform.nodes * cfg.platform.tasks_per_node
    _on_nodes(cfg, workload, where)
    for setting, on in (
        ("trace.posix=true", cfg.trace.posix),
        ("input.service=true", cfg.input.service),
        (_tasks_setting(cfg.platform), tasks > 1 and not workload.object_tasks),
    ):
        if on:
            raise ConfigError(
                f"{where}: {setting} is not built for an object store yet (its reads are GETs in one "
                "process); leave it out"
            )


def _service_can(cfg, workload) -> None:
    """What the tier's service declares it cannot do yet (``Service.can``), each refused in one line."""
    st = cfg.storage
    service = services.get(st.service)
    where = f"storage={st.name} (storage.service={service.name})"
    tasks = cfg.platform.nodes * cfg.platform.tasks_per_node
    for ability, asked, setting in (
        (Abilities.USERS, bool(st.endpoint), f"storage.endpoint={st.endpoint}"),
        (Abilities.TASKS, tasks > 1, _tasks_setting(cfg.platform)),
        (Abilities.NODES, cfg.platform.kind != "local" and cfg.platform.nodes > 1, "platform.nodes"),
        (Abilities.OWN_REQUESTS, not workload.uses_framework, f"workload={cfg.workload.name}"),
        (Abilities.SHARDS, cfg.dataset is not None and cfg.dataset.format != "files", "dataset.format"),
    ):
        if asked and ability not in service.can:
            raise ConfigError(
                f"{where}: {setting} is not built for {service.title} yet (what it needs: "
                f"{Abilities.WORDS[ability]}); use {services.get('s3').preset} for it"
            )


def _on_nodes(cfg, workload, where: str) -> None:
    """What a cell over several Slurm nodes can do on an object store so far: every node's tasks GET
    natively (the s3fs mount is the controller's alone); the embedded store spread over the nodes serves
    a dataset's cold reads (its nodes' volumes are evicted by their tasks; nothing warms them)."""
    nodes = cfg.platform.nodes
    if cfg.platform.kind == "local" or nodes < 2:
        return
    if cfg.storage.reader == "fuse":
        raise ConfigError(
            f"{where}: platform.nodes={nodes} with storage.reader=fuse: s3fs mounts the bucket on the "
            "controller's node only, so far; use storage.reader=native"
        )
    if cfg.storage.endpoint:
        return
    if not workload.needs_dataset:
        raise ConfigError(
            f"{where}: platform.nodes={nodes} with workload={cfg.workload.name}: the embedded store's "
            "servers on every node serve a dataset's reads so far; use one node, or your own store "
            "(storage.endpoint)"
        )
    if cfg.cache == "warm":
        raise ConfigError(
            f"{where}: platform.nodes={nodes} with cache=warm: the store spread over the nodes is read cold "
            "so far (each node's task evicts its own volumes; none warms them); use cache=cold, or your "
            "own store (storage.endpoint)"
        )


def _tasks_setting(platform) -> str:
    """The settings that make a run several tasks, as the user wrote them."""
    per_node = f"platform.tasks_per_node={platform.tasks_per_node}"
    return f"platform.nodes={platform.nodes} {per_node}" if platform.nodes > 1 else per_node


def _client_here(st) -> None:
    why = services.get(st.service).client_missing()
    if why:
        raise ConfigError(why)


def _embedded_here(st) -> None:
    """The embedded server can start on this machine (its service says what it needs)."""
    why = services.get(st.service).server_missing()
    if why:
        raise ConfigError(f"storage={st.name}: {why}, or give your store with storage.endpoint=<url>")


def _fuse_here() -> None:
    """storage.reader=fuse: s3fs is installed, and this user may mount with FUSE."""
    from jobs.storage.objectstore import fuse

    if fuse.program() is None:
        raise ConfigError(
            "storage.reader=fuse mounts the bucket with s3fs-fuse, which is not installed "
            "(Debian: apt-get install s3fs), or use storage.reader=native"
        )
    if not os.path.exists("/dev/fuse"):
        raise ConfigError("storage.reader=fuse needs /dev/fuse (FUSE), which this machine lacks")
    if os.geteuid() != 0 and shutil.which("fusermount") is None and shutil.which("fusermount3") is None:
        raise ConfigError(
            "storage.reader=fuse: without root, s3fs mounts through fusermount, which is not installed "
            "(Debian: apt-get install fuse3)"
        )
