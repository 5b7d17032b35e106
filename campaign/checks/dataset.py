"""The cell's dataset: a user's folder or list holds images (listed once per planning pass), a synthetic
set is not given a path it would ignore, a batch fits in it, and a set of arrays is read only as arrays."""

from __future__ import annotations

import os

from campaign.checks import Checking
from campaign.errors import ConfigError
from jobs.storage.roots import elsewhere, memoised


def images(c: Checking) -> None:
    """The dataset is there and holds a batch; ``c.images``: the images a run reads, for the later checks."""
    c.images = _read(c)


def _read(c: Checking) -> int | None:
    """Images a run reads (None: the workload reads no dataset); raises ConfigError where the dataset is
    missing, empty, or smaller than a batch."""
    cfg = c.cfg
    if cfg.dataset is None:
        if c.workload.needs_dataset:
            raise ConfigError(
                f"workload={cfg.workload.name} reads a dataset and has none: add dataset=imagenet_subset "
                "(or caltech101, or dataset.source=folder dataset.path=...)"
            )
        return None
    n = memoised(c.memo, ("dataset", elsewhere(cfg), repr(cfg.dataset)), lambda: _listed(cfg))
    if cfg.batch_size > n:
        raise ConfigError(
            f"batch_size={cfg.batch_size} is larger than the dataset ({n} images; see dataset.num_images"
            + ("" if cfg.dataset.source == "synthetic" else f" and dataset.path={cfg.dataset.path}")
            + ")"
        )
    return n


def _listed(cfg) -> int:
    """Images the cell will read, listing a real dataset (raises ConfigError for an empty one)."""
    from jobs.data import datasets

    source = cfg.dataset.source
    n = cfg.dataset.num_images
    if source == "synthetic":
        path = cfg.dataset.path
        if path:
            what = (
                "a folder: add dataset.source=folder"
                if os.path.isdir(path)
                else "a file: add dataset.source=filelist"
                if os.path.isfile(path)
                else "not there: fix it, or add dataset.source=folder|filelist"
            )
            raise ConfigError(
                f"dataset.path={path} is set, but dataset.source=synthetic would measure generated "
                f"images instead; the path is {what}"
            )
        return n
    if elsewhere(cfg) and cfg.dataset.path:
        return n  # the nodes' folder, not this machine's: listed on the nodes
    try:
        if not cfg.dataset.path:
            raise datasets.DatasetError(f"dataset.path is required with dataset.source={source}")
        items = (datasets.from_folder if source == "folder" else datasets.from_filelist)(cfg.dataset.path)
        if not datasets.has_images(items):
            raise datasets.DatasetError(f"dataset.path={cfg.dataset.path} holds no images")
    except datasets.DatasetError as e:
        raise ConfigError(str(e)) from None
    return min(n, len(items))


def samples(c: Checking) -> None:
    """A set of arrays (``dataset.samples=arrays``: raw volumes) that is not a synthetic set, or that a
    workload that decodes images would read."""
    cfg, dataset = c.cfg, c.cfg.dataset
    if dataset is None or str(dataset.samples) != "arrays":
        return
    if str(dataset.source) != "synthetic":
        raise ConfigError(
            f"dataset.samples=arrays: dataset.source={dataset.source} holds your own files, read as they "
            "are; arrays are a synthetic set's (dataset.samples=images, or dataset.source=synthetic)"
        )
    if c.workload.decodes(cfg):
        raise ConfigError(
            f"dataset.samples=arrays: workload={cfg.workload.name} decodes images, and arrays are read "
            "whole, never decoded (workload=readonly or workload=emulated reads them)"
        )
