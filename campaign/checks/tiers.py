"""The cell's tiers: each root usable, where the data and a stage lie against each other (a user's
images on the tier the cell names, a stage on another device than the data, no two modelled tiers mounted
one on or in the other), an object store's service and needs, and the space a synthetic set takes."""

from __future__ import annotations

import os

from campaign import limits
from campaign.checks import Checking
from campaign.errors import ConfigError
from jobs.cell import select
from jobs.storage import backends
from jobs.storage.objectstore import needs as objectstore
from jobs.storage.roots import elsewhere, memoised, storage_root

# where a tier's service may be set: a preset's own YAML only (storage=s3, storage=azure)
_SERVICE_KEYS = ("storage.service", "checkpoint.slow.service")


def kinds(c: Checking) -> None:
    """Every tier the cell names is of a kind of storage this tool has a back-end for, named where it sits
    (``checkpoint.slow.kind=tape``)."""
    for key, st in _named_tiers(c.cfg).items():
        if st is not None:
            backends.get(st.kind, key)


def _named_tiers(cfg) -> dict:
    """The tiers a cell names, by where they sit in its config (None where it names none)."""
    named = {"storage": cfg.storage, "checkpoint.slow": cfg.checkpoint.slow}
    return {**named, "checkpoint.fast": cfg.checkpoint.fast, "stage": cfg.stage}


def service_is_the_presets(c: Checking) -> None:
    """An object store's service is its preset's: ``storage=azure storage.service=s3`` would measure
    SeaweedFS through boto3 and label the rows azure (found by a red team). A store of another service is
    another preset, chosen by its name."""
    for o in c.cell.overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        if key in _SERVICE_KEYS:
            raise ConfigError(
                f"{o}: the service an object store speaks is its preset's; choose the preset instead "
                "(storage=s3 or storage=azure; storage@checkpoint.slow=s3)"
            )


def its_kinds_own(c: Checking) -> None:
    """The checks of the storage's own kind (``Backend.check``: an object store's service, endpoint and
    client), after where the other tiers may be an object store and the settings of other kinds."""
    from campaign.checks.workload import able

    here = not elsewhere(c.cfg)
    objectstore.check_others(c.cfg, c.workload, here)
    backends.check_settings(c.cfg.storage, "storage")
    backends.of(c.cfg.storage).check(c.cfg, c.workload, here=here, able=able("object_readers"))


def space(c: Checking) -> None:
    """A synthetic set's images still to generate fit in the space its tier has free (this machine's
    free space says nothing of the nodes')."""
    if not elsewhere(c.cfg):
        memoised(c.memo, limits.space_key(c.cell), lambda: limits.dataset_fits(c.cfg))


def _tier_keys(c: Checking) -> tuple[str, ...]:
    """The settings that hold the tiers a cell builds (its workload's, and the stage), when one is
    modelled."""
    cfg, named = c.cfg, _named_tiers(c.cfg)
    if not any(t is not None and t.model is not None for t in named.values()):
        return ()  # most cells: nothing to compare, and planning stays cheap
    built = {id(st) for st in c.workload.tiers(cfg)}
    keys = [k for k, st in named.items() if k != "stage" and id(st) in built]
    return (*keys, "stage") if cfg.stage is not None else tuple(keys)


def data_where_it_lies(c: Checking) -> None:
    """A folder of the user's images is read where it lies: on the file system of ``storage.root``,
    or the cell's ``storage`` would name a tier its runs never read (a folder on tmpfs labelled ssd)."""
    cfg = c.cfg
    if cfg.dataset is None or cfg.dataset.source != "folder":
        return
    if cfg.dataset.format != "files":
        return  # converted once into TFRecord or HDF5 under storage.root: the runs read that copy
    st, path = cfg.storage, os.path.realpath(str(cfg.dataset.path))
    if st.emulate is not None or st.model is not None:
        raise ConfigError(
            f"dataset.source=folder reads dataset.path={cfg.dataset.path} where it lies, "
            f"but storage={st.name} "
            "is a tier the tool builds at storage.root for each cell: leave dataset.source unset (the set "
            f"is generated on the tier), or read the folder where it is with storage=<its tier> and copy it "
            f"onto {st.name} with storage@stage={st.name}"
        )
    if elsewhere(cfg):
        return  # the nodes' folders: where they lie is seen on the nodes
    from jobs.observe.provenance import mount_of

    data, root = mount_of(path), mount_of(str(st.root))
    if os.stat(path).st_dev != os.stat(str(st.root)).st_dev:
        raise ConfigError(
            f"dataset.path={cfg.dataset.path} is on {data.fs_type} {data.source} ({data.mount_point}), "
            "not on "
            f"the file system of storage.root={st.root} ({root.fs_type} {root.source}): its runs would read "
            f"{data.fs_type} and be labelled storage={st.name}; keep the images under storage.root, or set "
            "storage=<the tier they are on> storage.root=<a folder there>"
        )


def apart(c: Checking) -> None:
    """The data's tier and the stage's, each usable, and never one and the same device."""
    cfg, memo = c.cfg, c.memo
    storage_root(cfg, memo=memo)
    if cfg.stage is None:
        return
    storage_root(cfg, cfg.stage, key="stage", memo=memo)
    if (
        cfg.stage.name == cfg.storage.name
        or os.path.realpath(str(cfg.stage.root)) == os.path.realpath(str(cfg.storage.root))
        or _same_device(cfg.stage, cfg.storage)
    ):
        raise ConfigError(
            f"storage@stage={cfg.stage.name} is the tier the data is on (storage={cfg.storage.name}, "
            f"root {cfg.storage.root}): stage on another tier, e.g. storage@stage=tmpfs"
        )


def _same_device(a, b) -> bool:
    """Whether two real tiers' roots are on one device (an emulated tier gets its own when the cell
    starts)."""
    if a.emulate is not None or b.emulate is not None:
        return False
    try:
        return os.stat(str(a.root)).st_dev == os.stat(str(b.root)).st_dev
    except OSError:
        return False


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def modelled(c: Checking) -> None:
    """Two modelled tiers of one cell (those it builds: storage, checkpoint tiers, the stage) never share
    a mount point or sit one inside the other: the second would be mounted on top of the first, or the
    first would serve the second's mount. One tier named twice keeps one root."""
    cfg, keys = c.cfg, _tier_keys(c)
    seen: list[tuple[str, str, str]] = []
    for key in keys:
        st = select(cfg, key)
        if st is None or st.model is None or st.root in (None, "???"):
            continue
        root = os.path.realpath(os.path.abspath(str(st.root)))
        for other_key, other_name, other_root in seen:
            if other_name == str(st.name) and root != other_root:  # a tier is set up once, at its first root
                raise ConfigError(
                    f"{key}.root={st.root} and {other_key}.root name two mount points of one modelled "
                    f"tier {st.name}, which is mounted once: give them one root, or use two tiers"
                )
            if other_name != str(st.name) and (_inside(root, other_root) or _inside(other_root, root)):
                raise ConfigError(
                    f"{key}.root={st.root} ({key}={st.name}) and {other_key}.root ({other_key}="
                    f"{other_name}) are {'one folder' if root == other_root else 'one inside the other'}: "
                    "two modelled tiers would be mounted on top of each other; give each its own root"
                )
        seen.append((key, str(st.name), root))
