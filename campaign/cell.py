"""The Hydra task of a cell: check it, run it with the generic loop (``jobs.runner``), and write its
record, completed or failed. A failed cell never leaves anything that looks like a result."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

from omegaconf import DictConfig

from campaign import errors, outputs, validate
from jobs import interrupts, records, runner
from jobs.plan import cell_id, resolved

log = logging.getLogger(__name__)


def execute(cfg: DictConfig) -> None:
    """Hydra task function: run the cell whose config Hydra composed, and write its record."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    job_dir = hc.runtime.output_dir
    multirun = hc.mode == RunMode.MULTIRUN
    overrides = list(hc.overrides.task)
    on_slurm = str(getattr(cfg.platform.kind, "value", cfg.platform.kind)) == "slurm"
    if on_slurm and not multirun:
        logging.shutdown()
        outputs.remove_new()
        raise errors.Stop(
            f"campaign: platform={cfg.platform.name} runs cells as Slurm jobs: add -m (e.g. python -m "
            f"campaign -m platform={cfg.platform.name} ...)",
            2,
        )
    config = resolved(cfg)
    try:
        validate.check(config)
    except errors.ConfigError as e:
        if (
            multirun
        ):  # planning checked it: what changed since (a cell before it filled the tier) fails it, said
            path = _record_failure(
                e, config, overrides, records.now(), job_dir
            )  # in its record, never silently
            if on_slurm:
                raise errors.Stop(f"campaign: the cell failed: {e} (record: {path})", 1) from None
            return
        logging.shutdown()
        outputs.remove_new()
        raise errors.Stop(f"campaign: {e}", 2) from None
    if config["platform"].get("dry_run") and not multirun:
        logging.shutdown()
        outputs.remove_new()
        print(
            f"dry run: 1 cell would run here into {job_dir}: workload={config['workload']['name']} "
            f"storage={config['storage']['name']} root={config['storage']['root']} threads={config['threads']} "
            "(nothing was run or written)",
            flush=True,
        )
        return
    started = records.now()
    try:
        runs, dataset, prov = runner.measure(config, Path(job_dir))
    except Exception as e:  # the cell failed: say so in its record, never leave it looking like a result
        signum = interrupts.received()
        if signum is not None:  # the signal surfaced as another error (e.g. through TensorFlow's bindings)
            raise interrupts.exception(signum) from e
        path = _record_failure(e, config, overrides, started, job_dir)
        if multirun and not on_slurm:
            return  # a local sweep goes on; a Slurm job must end FAILED
        if not multirun:
            raise errors.Stop(
                f"campaign: the cell failed: {type(e).__name__}: {e} (record: {path})", 1
            ) from None
        raise
    extra = [r for r in runs if r.get("traced_extra")]  # trace.runs=extra: kept apart from the measured runs
    rec = records.CellRecord(
        cell_id=cell_id(config),
        status=records.COMPLETED,
        config=config,
        overrides=overrides,
        runs=[r for r in runs if not r.get("traced_extra")],
        dataset=dataset,
        provenance=prov,
        started_at=started,
        finished_at=records.now(),
        traced_run=extra[0] if extra else None,
    )
    log.info("record: %s", records.write(rec, job_dir))


def _record_failure(e: Exception, config: dict, overrides: list, started: str, job_dir: str) -> Path:
    """Write the failed record of a cell that raised ``e``; returns its path."""
    from jobs.observe import provenance

    rec = records.CellRecord(
        cell_id=cell_id(config),
        status=records.FAILED,
        config=config,
        overrides=overrides,
        runs=[],
        dataset={},
        provenance=provenance.collect(str(config["storage"]["root"])),
        started_at=started,
        finished_at=records.now(),
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
