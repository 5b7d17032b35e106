"""A tier's root on the file system its preset names (``fs_types`` in conf/storage/<preset>.yaml): a folder on
ext4 given to ``storage=lustre`` would record rows labelled lustre that measured ext4, and the report would
judge the paper's Lustre claim on them. Checked at planning, on the machine where the root is."""

from __future__ import annotations

from jobs.errors import ConfigError
from jobs.schema import StorageConf


def found(root: str) -> str:
    """The type of the file system that holds ``root`` (the last-mounted of the longest mount points above
    it), as each run's record notes it (jobs.observe.provenance, a layer above storage)."""
    import os

    from jobs.storage import mounts

    real, best, fs = os.path.realpath(root), -1, "unknown"
    for point, fs_type, _ in mounts.mounts():
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= best:
            best, fs = len(point), fs_type
    return fs


def check(st: StorageConf, key: str) -> None:
    """ConfigError (one line naming the tier, the root and its file system) when the existing ``st.root``
    is not on one of the file systems the preset declares; nothing when it declares none, or when
    ``<key>.fs_check=false`` (the cell's config records that, and the analysis keeps its rows out of the
    paper's verdicts)."""
    wanted = st.fs_types
    if not wanted:
        return
    root = st.root
    fs = found(root)
    if fs in wanted or not st.fs_check:
        return
    choose = key if key == "storage" else f"storage@{key}"
    raise ConfigError(
        f"{choose}={st.name} needs its root on {' or '.join(wanted)}, but {key}.root={root} is on {fs}: "
        f"give a folder on {wanted[0]}, or {choose}=local for a folder on {fs}; to measure it anyway under "
        f"{st.name}'s name: {key}.fs_check=false (recorded; the report judges no claim of the paper on it)"
    )
