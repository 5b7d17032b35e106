"""Planning checks of a modelled tier that need no FUSE: where its backing folder lies against its mount
point, and whether its figures describe the device it claims. Each returns one line naming the
setting, or None."""

from __future__ import annotations

import os

from jobs.storage.modeled import mount


def _real(path: str) -> str:
    """``path`` with its existing part's links resolved: a folder made later lies where this says."""
    return os.path.realpath(os.path.abspath(path))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _blocked_by_file(path: str) -> str | None:
    """The first existing component of ``path`` that is not a folder (a folder cannot be made there)."""
    probe = "/"
    for part in path.strip("/").split("/"):
        probe = os.path.join(probe, part)
        if not os.path.exists(probe):
            return None
        if not os.path.isdir(probe):
            return probe
    return None


def placement(name: str, model, root: str, key: str = "storage") -> str | None:
    """Why the backing folder of tier ``name`` cannot serve a mount at ``root``: it is empty or relative
    (the current folder, whatever it is when a cell starts), a file, or it and the mount lie one inside
    the other, where the layer would serve its own mount and FUSE deadlocks (a process stuck in D state).
    A mount anywhere in ``backing_dir`` is refused too: that folder holds every modelled tier's files."""
    given = model.backing_dir
    if not given.strip():
        return (
            f"{key}.model.backing_dir is empty: the tier's files would go into the current folder; give an "
            f"absolute folder on a real disk, e.g. {key}.model.backing_dir=/var/tmp/iocampaign/tiers"
        )
    if not os.path.isabs(given):
        return (
            f"{key}.model.backing_dir={given} is a relative path "
            "(it would depend on the folder a cell starts in): give an absolute folder"
        )
    backing = mount.backing_of(name, model)
    blocked = _blocked_by_file(backing)
    if blocked is not None:
        return (
            f"{key}.model.backing_dir={given}: {blocked} is a file, not a folder, "
            f"so the tier's backing folder {backing} cannot be made; choose a folder"
        )
    real_backing, real_root = _real(backing), _real(root)
    if _inside(real_backing, real_root):
        return (
            f"{key}.model.backing_dir={given} puts the tier's files ({backing}) inside its own mount point "
            f"{key}.root={root}: the FUSE layer would serve itself and hang; keep them apart, e.g. "
            f"{key}.model.backing_dir=/var/tmp/iocampaign/tiers"
        )
    if _inside(real_root, _real(given)):  # the folder of every modelled tier's files, this one's among them
        return (
            f"{key}.root={root} lies inside {key}.model.backing_dir={given}, where the tier's files are: "
            "the FUSE layer would serve its own mount and hang; "
            f"keep them apart, e.g. {key}.root=/mnt/iocampaign/{name}"
        )
    return None


def contradiction(model, key: str = "storage") -> str | None:
    """Why ``model`` sets figures of another device than ``model.device`` (``storage=modeled_hdd
    storage.model.device=lustre`` would model a Lustre from defaults and keep the preset's HDD label)."""
    device = model.device
    own = set(mount.DEVICES[device].__dataclass_fields__) if device in mount.DEVICES else set()
    for other, cls in mount.DEVICES.items():
        if other == device:
            continue
        alien = sorted(f for f in cls.__dataclass_fields__ if f not in own and getattr(model, f) is not None)
        if alien:
            return (
                f"{key}.model.device={device}, but {key}.model sets {', '.join(alien)}, "
                f"figures of a modelled {other}: the tier would be measured as a {device} "
                f"and labelled as the preset's {other}; "
                f"choose the preset of a modelled {device} (modeled_{device}) instead of changing the device"
            )
    return None
