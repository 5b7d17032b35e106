"""A sweep's plan (``plan.json``): which cells it holds and which folder each one writes into; the
cell id that names a cell. This module is the only writer and the only reader of ``plan.json``.

Version 3 keeps each cell's resolved config (``jobs.cell.Cell.data``): what the cell's job runs, read back
as it was planned, never composed again.

A cell's folder is fixed by the cell: re-running into the same sweep folder (resume) finds a cell
of an earlier plan by its id and gives it its old folder; a cell the folder has never seen gets a
number no folder has used yet. A folder is never handed to another cell.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from jobs import jsonfiles

FILENAME = "plan.json"
VERSION = 3  # 3: cells carry their resolved config; 2: their id; plans of versions 1 and 2 are still read
READS = (1, 2, VERSION)


class PlanError(ValueError):
    """A plan.json that cannot be read; the message names the file."""


@dataclass(frozen=True)
class PlannedCell:
    num: int  # the cell's number in the sweep (Hydra's job num)
    dir: str  # its folder, relative to the sweep folder
    overrides: list  # the overrides that make the cell
    cell_id: str | None = None  # hash of its resolved config (None in version-1 plans)
    config: dict | None = None  # its resolved config (None in plans before version 3)


# The workload fields of the one schema all workloads shared before each had its own (ids of version
# 1 and 2 plans and records hashed them all). A field a workload's schema does not have enters the id
# with this value, so a cell keeps its id, its folder and its finished record across the split.
SHARED_WORKLOAD_FIELDS = {
    "kind": "microbench",
    "pipeline": "decode_resize",
    "image_side": 224,
    "batches": None,
    "width": 1.0,
    "steps": None,
    "device": "auto",
    "trace_interval_s": 1.0,
    "read_delay_ms": 0.0,
    "file_gb": 5.0,
    "small_file_threads": [1, 2, 4, 8],
    "description": "",
}


# Settings added later, with the default that keeps what a cell measures as before: at that value they
# stay out of the id, so earlier cells keep their ids (a different value makes a different cell).
ADDED_SETTINGS = {
    ("checkpoint", "keep"): False,
    ("checkpoint", "restore"): False,
    ("checkpoint", "model"): None,
    ("checkpoint", "ranks_written"): None,
    ("dataset", "format"): "files",
    ("dataset", "shard_mb"): 128.0,
    ("shuffle",): "global",
    ("shuffle_buffer",): None,
    ("trace", "runs"): "all",  # before ("trace",): a cell without it compares as before
    ("trace",): {"posix": False},
    ("stage",): None,
    ("input",): {"service": False, "workers": 1},
    ("prefetch_to",): "host",
    ("accelerator",): None,
    ("accelerator", "sample_kb"): 112.0,
    ("accelerator", "sample_spread"): 0.5,
    ("accelerator", "samples"): "images",
    ("dataset", "samples"): "images",
    ("replay",): {"trace": None, "mode": "fast", "concurrency": None},
    ("workload", "compute_only_steps"): 5,
    ("workload", "input_only"): True,
    **{
        (*where, "emulate", rw): None
        for where in (("storage",), ("checkpoint", "fast"), ("checkpoint", "slow"))
        for rw in ("read_iops", "write_iops")
    },
    # an object store's client (null: the framework's own), in every place a tier sits
    **{
        (*where, "client"): None
        for where in (("storage",), ("stage",), ("checkpoint", "fast"), ("checkpoint", "slow"))
    },
}


# Defaults that became null, each with the value a null stands for: a cell that leaves the setting null
# hashes as it did when the default was that value, so it keeps its id, its folder and its record
# (loader.prefetch_factor: PyTorch's 2; null since PyTorch refuses a prefetch_factor without workers).
NULLED_DEFAULTS = {("loader", "prefetch_factor"): 2}


def _at(config: dict, path: tuple):
    """The value at ``path`` in ``config`` (None where the path ends early)."""
    for key in path:
        config = config.get(key) if isinstance(config, dict) else None
    return config


def _private(config: dict, parents: tuple, mine: set) -> dict | None:
    """The dict at ``parents`` in ``config``, ready to edit: it and each dict above it copied the first time
    (``mine`` holds the paths copied so far), so that an edit never reaches the data it came from; None where
    the path ends early."""
    node = config
    for depth in range(1, len(parents) + 1):
        child = node.get(parents[depth - 1])
        if not isinstance(child, dict):
            return None
        if parents[:depth] not in mine:
            child = node[parents[depth - 1]] = dict(child)
            mine.add(parents[:depth])
        node = child
    return node


def with_values(data: dict, values) -> dict:
    """``data`` with each (dotted key, value) of ``values`` set: the dicts on the way to a value are copied,
    every other section is shared with ``data`` (plain config data is read-only once planned)."""
    out, mine = dict(data), set()
    for dotted, value in values:
        *parents, key = dotted.split(".")
        _private(out, tuple(parents), mine)[key] = value
    return out


def _fill(config: dict, parents: tuple, key: str, value, mine: set) -> None:
    """Put ``value`` at ``parents`` + ``key`` in ``config`` where the setting there is null."""
    node = _at(config, parents)
    if isinstance(node, dict) and node.get(key, 0) is None:
        _private(config, parents, mine)[key] = value


def _drop(config: dict, parents: tuple, key: str, default, mine: set) -> None:
    """Remove the setting at ``parents`` + ``key`` from ``config`` when it holds ``default``."""
    node = _at(config, parents)
    if isinstance(node, dict) and key in node and node[key] == default:
        del _private(config, parents, mine)[key]


def _by_section(settings: dict) -> tuple:
    """``settings`` (path -> default) as runs of one section each, in their order, which matters: a
    section's own default is compared after the settings in it listed before it.
    Returns ((section's path, ((key, default), ...)), ...)."""
    runs: list = []
    for path, default in settings.items():
        if runs and runs[-1][0] == path[:-1]:
            runs[-1][1].append((path[-1], default))
        else:
            runs.append((path[:-1], [(path[-1], default)]))
    return tuple((parents, tuple(keys)) for parents, keys in runs)


_ADDED = _by_section(ADDED_SETTINGS)  # each section found once per run of its settings

# A tier's settings that only planning's checks and the run's watch read (jobs/storage/fstype.py: the file
# systems its root may be on, and the opt-out the record keeps; how long a modelled layer may leave a probe
# unanswered): what a cell measures is the same, so a cell keeps its id and its record. Paths in the tier.
CHECK_ONLY = (("fs_types",), ("fs_check",), ("model", "answer_s"))
TIERS = (("storage",), ("stage",), ("checkpoint", "fast"), ("checkpoint", "slow"))


def cell_id(config: dict, memo: dict | None = None) -> str:
    """Stable id of a cell: a hash of what it measures (its resolved config; of the platform only the
    name, so resuming with other launch settings such as platform.wait still finds finished cells;
    of the workload its fields over ``SHARED_WORKLOAD_FIELDS``).

    What a section contributes depends on that section alone, so the JSON of each top-level section is
    made apart and joined as ``json.dumps(..., sort_keys=True)`` joins them. ``memo``: a dict kept across
    one planning pass, holding each section's JSON by identity; the cells of a grid share every section
    their values do not change (planning 10,000 cells hashes 10,000 configs)."""
    parts = []
    for key in sorted({*config, "platform"} - {"hydra"}):
        parts.extend(_part(key, config.get(key), memo))
    return hashlib.sha256(("{" + ", ".join(parts) + "}").encode()).hexdigest()[:12]


def _part(key: str, value, memo: dict | None) -> list[str]:
    """``'"key": <JSON>'`` of what the top-level setting ``key`` holding ``value`` adds to a cell's id (none
    where it adds nothing)."""
    slot = _slot(key, value) if memo is not None else None
    held = memo.get(slot) if slot is not None else None
    if held is not None and held[0] is value:
        return held[1]
    measured = _measured({key: value})
    part = [f"{json.dumps(k)}: {json.dumps(v, sort_keys=True, default=str)}" for k, v in measured.items()]
    if slot is not None:
        memo[slot] = (value, part)  # the value held, so a section's id is not reused while memo lasts
    return part


def _slot(key: str, value) -> tuple | None:
    """Where ``cell_id``'s memo keeps the part of ``key`` holding ``value``: a section by identity, a plain
    value by type and value; None for a list (rare at the top level)."""
    if isinstance(value, dict):
        return (key, id(value))
    if value is None or type(value) in (str, int, float, bool):
        return (key, type(value), value)
    return None


def _measured(config: dict) -> dict:
    """The settings of ``config`` (a cell's config, or some of its top-level sections) that a cell's id
    hashes: Hydra's node and launch settings out, added settings at their old defaults out."""
    # a copy of its top level; a dict below it is copied only where an edit reaches it
    what, mine = {k: v for k, v in config.items() if k not in ("platform", "hydra")}, set()
    if isinstance(what.get("input"), dict) and not what["input"].get("service"):
        del what["input"]  # no service: its worker count measures nothing
    for parents, defaults in _ADDED:
        node = _at(what, parents)
        if not isinstance(node, dict):
            continue
        doomed = [key for key, default in defaults if key in node and node[key] == default]
        if doomed:
            node = _private(what, parents, mine)
            for key in doomed:
                del node[key]
    for path, value in NULLED_DEFAULTS.items():
        _fill(what, path[:-1], path[-1], value, mine)
    for tier in TIERS:
        for *inner, name in CHECK_ONLY:
            where = (*tier, *inner)
            _drop(what, where, name, _at(what, (*where, name)), mine)  # whatever it holds
    if "platform" in config:
        plat = config.get("platform") or {}
        tasks = (plat.get("nodes") or 1, plat.get("tasks_per_node") or 1)
        # a multi-task cell differs
        what["platform"] = plat.get("name") if tasks == (1, 1) else [plat.get("name"), *tasks]
    if isinstance(what.get("workload"), dict):
        what["workload"] = {**SHARED_WORKLOAD_FIELDS, **what["workload"]}
    return what


def resolved(cfg) -> dict:
    """A cell's config (a DictConfig, with or without Hydra's own node) as plain JSON-able data,
    enums as their names, without the hydra node."""
    from omegaconf import OmegaConf

    task = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]) if "hydra" in cfg else cfg
    return OmegaConf.to_container(task, resolve=True, enum_to_str=True)  # type: ignore[return-value]


def id_of(cfg) -> str:
    """The cell id of a composed config."""
    return cell_id(resolved(cfg))


def read(sweep_dir: str | Path) -> list[PlannedCell]:
    """The cells of the plan in ``sweep_dir`` ([] when there is none); raises PlanError when damaged."""
    path = Path(sweep_dir) / FILENAME
    if not os.path.lexists(path):
        return []
    try:
        raw = jsonfiles.read_json(path)  # a FIFO or link planted under the name is refused, never waited on
        if raw.get("plan_version") not in READS:
            raise PlanError(
                f"{path}: plan version {raw.get('plan_version')}, this project reads "
                f"{', '.join(map(str, READS[:-1]))} and {VERSION}"
            )
        return [
            PlannedCell(int(c["num"]), str(c["dir"]), list(c["overrides"]), c.get("cell_id"), c.get("config"))
            for c in raw["cells"]
        ]
    except PlanError:
        raise
    except jsonfiles.NotAFile as e:
        raise PlanError(f"{e} (not read as a plan)") from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise PlanError(f"{path}: not a readable plan ({type(e).__name__}: {e})") from None


def assign(sweep_dir: str | Path, cells: list) -> tuple[list[PlannedCell], list[PlannedCell]]:
    """Folders for this sweep's cells (each with its ``overrides``, ``cell_id`` and resolved config
    ``data``: a ``jobs.cell.Cell``), keeping those of an earlier plan in the same folder; returns (this
    sweep's cells in order, every cell the plan now holds)."""
    sweep_dir = Path(sweep_dir)
    earlier = read(sweep_dir)
    by_id = {c.cell_id: c for c in earlier if c.cell_id}
    used = {c.num for c in earlier}
    if sweep_dir.is_dir():
        used |= {int(p.name) for p in sweep_dir.iterdir() if p.name.isdigit()}
    nxt = max(used, default=-1) + 1
    mine: list[PlannedCell] = []
    seen: set[str] = set()
    for cell in cells:
        overrides, cid = list(cell.overrides), cell.cell_id
        if cid in seen:
            continue  # the same cell twice in one grid (e.g. threads=1,1): measured once
        seen.add(cid)
        if cid in by_id:
            old = by_id[cid]
            mine.append(PlannedCell(old.num, old.dir, overrides, cid, cell.data))
        else:
            mine.append(PlannedCell(nxt, str(nxt), overrides, cid, cell.data))
            nxt += 1
    mine_nums = {c.num for c in mine}
    every = sorted([c for c in earlier if c.num not in mine_nums] + mine, key=lambda c: c.num)
    return mine, every


def write(sweep_dir: str | Path, cells: list[PlannedCell]) -> Path:
    """Write the plan atomically."""
    path = Path(sweep_dir) / FILENAME
    data = {"plan_version": VERSION, "argv": sys.argv, "cells": [asdict(c) for c in cells]}
    tmp = path.with_suffix(f".json.{os.getpid()}.part")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)
    return path
