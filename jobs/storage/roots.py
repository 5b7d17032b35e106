"""A tier's root folder, checked before anything runs: it exists, is a writable folder, holds no file
where the tool keeps its folders; an emulated tier is buildable here. Each failure is one line
naming the setting (``storage``, ``checkpoint.slow``, ``stage``, ...)."""

from __future__ import annotations

import os

from jobs import owned
from jobs.errors import ConfigError
from jobs.schema import CampaignConf, StorageConf
from jobs.storage import fstype, writable

MISSING = "???"


def memoised(memo: dict | None, key: tuple, fn):
    """``fn()``, or its earlier outcome (value or ConfigError) for ``key`` within one planning pass."""
    if memo is None:
        return fn()
    if key not in memo:
        try:
            memo[key] = (fn(), None)
        except ConfigError as e:
            memo[key] = (None, e)
    value, error = memo[key]
    if error is not None:
        raise error
    return value


def elsewhere(cfg) -> bool:
    """Whether the cell is planned here to run on another machine: a dry run for Slurm's nodes. This
    machine's paths, mounts and tools then say nothing of the nodes'; the real run checks them before it
    submits, and each cell again on its node."""
    return cfg.platform.dry_run and cfg.platform.kind == "slurm"


def runs_here(cfg) -> bool:
    """Whether the cell runs on this machine: not a Slurm cell planned on a login node or for a dry run."""
    slurm = cfg.platform.kind == "slurm"
    return not elsewhere(cfg) and not (slurm and "SLURM_JOB_ID" not in os.environ)


def storage_root(
    cfg: CampaignConf, storage: StorageConf | None = None, key: str = "storage", memo: dict | None = None
) -> str:
    """Check the root of a storage tier (``key`` names it in messages: storage, checkpoint.slow, ...);
    returns it. Workloads that touch more tiers check theirs with this. For another machine
    (``elsewhere``) only what the settings say is checked, nothing of this machine."""
    st = storage if storage is not None else cfg.storage
    here = not elsewhere(cfg)
    return memoised(memo, ("root", key, here, repr(st)), lambda: _check_root(st, key, here))


def _check_root(st: StorageConf, key: str, here: bool = True) -> str:
    if st.root != MISSING and (st.model is not None or st.emulate is not None):
        writable.refuse_system_folder(st.root, f"{key}.root")  # the tier would be mounted over it
    if st.model is not None:
        return _check_modeled(st, key, here)
    if st.emulate is not None:
        from jobs.storage import tiers

        why = tiers.available() if here else None
        if why:
            raise ConfigError(
                f"{key}={st.name}: {why}; without root use storage=local, or a real device with "
                "storage=hdd|ssd|optane storage.root=<its mount point>"
            )
        if st.emulate.read_mb_s <= 0 or st.emulate.write_mb_s <= 0:
            raise ConfigError(f"{key}.emulate of {key}={st.name}: read_mb_s and write_mb_s must be positive")
        for iops in ("read_iops", "write_iops"):
            v = getattr(st.emulate, iops)
            if v is not None and v < 1:
                raise ConfigError(
                    f"{key}.emulate.{iops}={v} must be a positive number of requests per second "
                    f"({key}.emulate.{iops}=null: no limit)"
                )
        if not here:
            return st.root
        image = os.path.join(st.emulate.image_dir, f"{st.name}.img")
        why = tiers.foreign(st.name, image, st.root, key)
        if why:
            raise ConfigError(f"{key}={st.name}: {why}")
        owned.check(
            st.emulate.image_dir,
            f"{key}.emulate.image_dir",
            own_from=owned.own_from_of(st.emulate.image_dir),
        )
        owned.check(st.root, f"{key}.root")
        return st.root  # the tier's mount point: made when the cell starts
    if st.root == MISSING:
        raise ConfigError(
            f"{key}.root is not set: {key}={st.name} needs the directory on that tier, "
            f"e.g. {key}.root=/mnt/{st.name}"
        )
    root = st.root
    if not here:
        writable.refuse_system_folder(root, f"{key}.root")
        return root
    if not os.path.exists(root):
        raise ConfigError(f"{key}.root={root} does not exist ({key}={st.name})")
    if not os.path.isdir(root):
        raise ConfigError(f"{key}.root={root} is not a directory ({key}={st.name})")
    fstype.check(st, key)  # the file system the preset names (skipped with the rest for another machine)
    why = writable.unwritable(root)  # asked, never probed: planning writes nothing into a user's folder
    if why:
        raise ConfigError(f"{key}.root={root} is not writable ({why}) ({key}={st.name})")
    writable.refuse_system_folder(root, f"{key}.root")
    _tool_folders(root, key)
    return root


def _tool_folders(root: str, key: str) -> None:
    """Where the tool keeps its own files on the tier: reached only through folders nobody else can steer,
    and its own (a file there, another user's folder or link: one line now, not a failure late)."""
    owned.check_way(root, f"{key}.root")
    base = owned.tool_folder(root)
    for sub in TOOL_FOLDERS:
        owned.check(base / sub, f"{key}.root", own_from=base)


def _check_modeled(st: StorageConf, key: str, here: bool = True) -> str:
    """A modelled tier: FUSE usable here, a device its figures can describe, a mount point and backing
    folder it may use without touching the user's (the mount is made when the cell starts)."""
    from jobs.storage.modeled import mount

    if st.model.device not in mount.DEVICES:
        raise ConfigError(
            f"{key}.model.device={st.model.device} is not modelled; modelled devices: "
            f"{', '.join(mount.DEVICES)}"
        )
    from jobs.storage.modeled import checks

    why = checks.contradiction(st.model, key) or checks.placement(st.name, st.model, st.root, key)
    if why:
        raise ConfigError(why)
    writable.refuse_system_folder(st.model.backing_dir, f"{key}.model.backing_dir")
    why = mount.available() if here else None
    if why:
        raise ConfigError(
            f"{key}={st.name}: {why}; use storage=local, or a real device with "
            "storage=hdd|ssd|optane storage.root=<its mount point>"
        )
    why = mount.geometry_of(st.model).check()
    if why:
        raise ConfigError(f"{key}.model.{why}")
    if not here:
        return st.root
    why = mount.foreign(st.name, mount.backing_of(st.name, st.model), st.root, key)
    if why:
        raise ConfigError(f"{key}={st.name}: {why}")
    backing = mount.backing_of(st.name, st.model)
    owned.check(backing, f"{key}.model.backing_dir", own_from=owned.own_from_of(st.model.backing_dir))
    owned.check(st.root, f"{key}.root")
    return st.root


# below the tool's folder (jobs.owned)
TOOL_FOLDERS = ("datasets/converted", "staged", "checkpoints", "baseline", "s3servers", "s3mounts")
