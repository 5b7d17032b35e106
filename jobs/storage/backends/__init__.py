"""The kinds of storage a tier can be (``storage.kind``, conf/storage/): one module each in this package,
declaring what the kind can do (its ``BACKEND``, a ``jobs.storage.backends.backend.Backend``), so planning,
the runner, the workloads and the estimates ask it instead of comparing kind names. A kind outside the tool
is a module of the namespace package ``iocampaign_backends`` on ``PYTHONPATH`` (docs/extending.md: Adding a
kind of storage).

- ``block``: a local block device; a cold cache means the page cache evicted.
- ``network``: a file system every node mounts (Lustre, NFS); only a positive sighting proves a run cold.
- ``memory``: RAM (tmpfs): nothing to evict.
- ``object``: an object store, reached by requests to a server, never through a mounted folder of its own.
"""

from __future__ import annotations

import functools

from jobs.errors import ConfigError
from jobs.storage.backends.backend import Backend

EXTERNAL = "iocampaign_backends"  # the namespace package of kinds of storage outside the tool, on sys.path


@functools.cache
def declared() -> dict[str, Backend]:
    """Every kind's declaration, the tool's and those of the ``iocampaign_backends`` namespace package, in
    their ``rank``: found on first use (``BACKENDS``), with the ``sys.path`` of the process that uses them,
    not at import (a warm server's children each find their own)."""
    from jobs import owned

    found = owned.declarations(__name__, __path__, EXTERNAL, "BACKEND", Backend, packages=False)
    named: dict[str, Backend] = {}
    for backend in sorted(found, key=lambda b: b.rank):
        if backend.kind in named:
            raise ConfigError(f"storage.kind={backend.kind} is declared twice (a module of {EXTERNAL} too)")
        named[backend.kind] = backend
    return named


def __getattr__(name: str):
    if name == "BACKENDS":  # {kind: its Backend}, found on first use (``declared``)
        return declared()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get(kind, key: str = "storage") -> Backend:
    """The back-end of a kind's name; ``key`` is where the tier sits in the config, named in the error."""
    try:
        return declared()[str(kind)]
    except KeyError:
        raise ConfigError(
            f"{key}.kind={kind} is not a kind of storage; choose one of {', '.join(declared())}"
        ) from None


def of(st) -> Backend:
    """The back-end of a tier's config (``cfg.storage``, ``cfg.checkpoint.slow``, ...)."""
    return get(st.kind)


def check_settings(st, key: str) -> None:
    """Refuse a setting that only another kind of storage has (``storage.bucket`` on a file-system tier), in
    one line naming it: ``key`` is where the tier sits in the config (``storage``, ``checkpoint.slow``)."""
    own = get(st.kind, key)
    for other in declared().values():
        for name in other.settings:
            if name not in own.settings and getattr(st, name, None) is not None:
                raise ConfigError(
                    f"{key}.{name}={getattr(st, name)}: {key}={st.name} is of kind {st.kind}; {name} belongs "
                    f"to a tier of kind {other.kind} ({other.preset})"
                )


def settings_of_others(st) -> set[str]:
    """The settings (``storage.<name>``) that other kinds of storage have and this tier's kind does not."""
    own = of(st).settings
    return {name for b in declared().values() for name in b.settings if name not in own}
