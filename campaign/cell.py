"""The Hydra task of a cell: run it with the generic loop (``jobs.runner``) and write its record,
completed or failed. A failed cell never leaves anything that looks like a result.

A cell of a sweep was planned (composed and checked) before any ran: ``run_planned`` hands Hydra's
``run_job`` the planned ``Cell`` itself, with a job config built from its planned data, and the task
runs that cell, never composing it again. Before it runs, the same checks look at the machine as it is
then (a cell before it may have filled the tier; a Slurm node is another machine): a cell they refuse
fails in its record. A single run (``python -m campaign`` without ``-m``) is composed by Hydra once
and checked once here.
"""

from __future__ import annotations

import copy
import functools
import logging
import traceback
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from campaign import errors, outputs, validate
from jobs import frameworks, interrupts, records, runner, workloads
from jobs.cell import Cell

log = logging.getLogger(__name__)


def execute(cfg: DictConfig) -> None:
    """Hydra task function of a single run: the cell Hydra composed, checked once, run, recorded."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    job_dir = hc.runtime.output_dir
    cell = Cell.from_composed(cfg, hc.overrides.task)
    platform = cell.config.platform
    if platform.kind == "slurm":
        _refuse(
            f"campaign: platform={platform.name} runs cells as Slurm jobs: add -m (e.g. python -m "
            f"campaign -m platform={platform.name} ...)"
        )
    try:
        validate.check(cell)
    except errors.ConfigError as e:
        _refuse(f"campaign: {e}")
    if platform.dry_run:
        logging.shutdown()
        outputs.remove_new()
        from campaign.estimate import Estimate

        c, est = cell.config, Estimate([cell], local=True)  # the data it needs and its time, as -m says
        line = (
            f"dry run: 1 cell would run here into {job_dir}: workload={c.workload.name} "
            f"storage={c.storage.name} root={c.storage.root} threads={c.threads}{frameworks.described(c)}"
            f"{est.cell(0)} (nothing was run or written)"
        )
        print("\n".join([line, *est.lines()]), flush=True)
        return
    _run(cell, job_dir, planned=False)


def _refuse(message: str) -> None:
    """End a single run before it ran: nothing it made is left behind."""
    logging.shutdown()
    outputs.remove_new()
    raise errors.Stop(message, 2)


def job_config(master: DictConfig, cell: Cell, job_id: Any) -> DictConfig:
    """The config Hydra's ``run_job`` runs a planned cell with: the cell's planned data as the task's
    config, beside the sweep's own Hydra node with the cell's number, id and overrides (what Hydra's
    launcher would compose again, built from the plan instead)."""
    from hydra._internal.config_loader_impl import get_overrides_dirname
    from hydra.core.override_parser.overrides_parser import OverridesParser

    cfg = OmegaConf.create(cell.data)
    naming = master.hydra.job.config.override_dirname
    parsed = OverridesParser.create().parse_overrides(list(cell.overrides))
    with open_dict(cfg):
        cfg.hydra = copy.deepcopy(master.hydra)  # typed (HydraConf), as Hydra's own config is
        cfg.hydra.overrides.task = list(cell.overrides)
        cfg.hydra.job.id = job_id
        cfg.hydra.job.num = cell.num
        cfg.hydra.job.override_dirname = get_overrides_dirname(
            parsed, list(naming.exclude_keys), naming.item_sep, naming.kv_sep
        )
    OmegaConf.copy_cache(from_config=master, to_config=cfg)  # the same ${now:} as the sweep folder's
    return cfg


def run_planned(hydra_context: Any, master: DictConfig, cell: Cell, job_id: Any) -> Any:
    """Hydra's ``run_job`` on the planned ``cell`` (its folder, logs and callbacks as Hydra makes them);
    returns Hydra's JobReturn."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import run_job

    cfg = job_config(master, cell, job_id)
    HydraConfig.instance().set_config(cfg)
    return run_job(
        hydra_context=hydra_context,
        task_function=functools.partial(_planned_task, cell),
        config=cfg,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )


def _planned_task(cell: Cell, _task_cfg: DictConfig) -> None:
    """The task of a planned cell (Hydra passes the job's config too: the cell is already built)."""
    from hydra.core.hydra_config import HydraConfig

    job_dir = HydraConfig.get().runtime.output_dir
    # the machine as it is now: a cell before it may have filled the tier, a Slurm node is another machine
    try:
        validate.check(cell)
    except errors.ConfigError as e:  # said in its record, never silently
        path = _record_failure(e, cell, records.now(), job_dir)
        if cell.config.platform.kind == "slurm":
            raise errors.Stop(f"campaign: the cell failed: {e} (record: {path})", 1) from None
        return
    _run(cell, job_dir, planned=True)


def _run(cell: Cell, job_dir: str, planned: bool) -> None:
    """Measure the cell and write its record; a failure is recorded, then ends a single run (status 1)
    or a Slurm job (FAILED), while a local sweep goes on to its next cell."""
    started = records.now()
    try:
        runs, dataset, prov = runner.measure(cell, Path(job_dir))
    except Exception as e:  # the cell failed: say so in its record, never leave it looking like a result
        interrupts.surface(e)  # unless a signal came: the error it left (TensorFlow's bindings) is the signal
        path = _record_failure(e, cell, started, job_dir)
        if not planned:
            raise errors.Stop(
                f"campaign: the cell failed: {type(e).__name__}: {e} (record: {path})", 1
            ) from None
        if cell.config.platform.kind == "slurm":
            raise  # a Slurm job must end FAILED
        return
    extra = [r for r in runs if r.get("traced_extra")]  # trace.runs=extra: kept apart from the measured runs
    rec = _record(
        cell,
        started,
        status=records.COMPLETED,
        runs=[r for r in runs if not r.get("traced_extra")],
        dataset=dataset,
        provenance=prov,
        traced_run=extra[0] if extra else None,
    )
    log.info("record: %s", records.write(rec, job_dir))


def _record(cell: Cell, started: str, **outcome) -> records.CellRecord:
    """The record of ``cell``, begun at ``started`` and ending now: what the cell is, and ``outcome`` (its
    status, runs, dataset, provenance, and its error or its traced run)."""
    return records.CellRecord(
        cell_id=cell.cell_id,
        config=cell.data,
        overrides=list(cell.overrides),
        started_at=started,
        finished_at=records.now(),
        declared=_declared(cell),
        **outcome,
    )


def _declared(cell: Cell) -> dict | None:
    """What the cell's workload declares for the analysis (None for a kind no longer registered)."""
    try:
        return workloads.get(cell.config.workload.kind).declared()
    except KeyError:
        return None


def _record_failure(e: Exception, cell: Cell, started: str, job_dir: str) -> Path:
    """Write the failed record of a cell that raised ``e``; returns its path."""
    from jobs.observe import provenance

    rec = _record(
        cell,
        started,
        status=records.FAILED,
        runs=[],
        dataset={},
        provenance=provenance.collect(cell.config.storage.root),
        error={"type": type(e).__name__, "message": str(e), "traceback": traceback.format_exc()},
    )
    try:
        path = records.write(rec, job_dir)
    except (OSError, records.RecordError) as w:  # e.g. the disk that filled up holds the run folder too
        raise errors.Stop(
            f"campaign: the cell failed: {type(e).__name__}: {e}; its failed record could not be "
            f"written either ({w})",
            1,
        ) from None
    log.error("cell failed: %s: %s (record: %s)", type(e).__name__, e, path)
    return path
