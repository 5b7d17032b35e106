"""Launch a sweep's cells: one after another in this process, or as Slurm jobs; skip the cells
whose completed record is already in the sweep folder (resume).

Hydra reaches this through the launcher plugin in ``hydra_plugins/iocampaign_launcher``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, open_dict

from campaign import plan

log = logging.getLogger(__name__)

# What the last launch in this process did, for the end-of-sweep summary: "ran", "submitted", "dry_run".
outcome = "ran"


def completed_cells(sweep_dir: Path) -> dict[str, Path]:
    """cell id -> record of every completed cell already in the sweep folder."""
    from jobs import records

    done = {}
    for path in sweep_dir.glob(f"*/{records.FILENAME}"):
        try:
            rec = records.read(path)
        except records.RecordError:
            continue
        if rec.status == records.COMPLETED:
            done[rec.cell_id] = path
    return done


def launch(hydra_context: Any, task_function: Any, config: DictConfig, job_overrides: Sequence[Sequence[str]],
           initial_job_idx: int) -> list:
    """Hydra Launcher.launch: run or submit every cell that has no completed record yet."""
    global outcome
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals

    from campaign.slurm import submit

    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    planned = {c.cell_id: c for c in plan.read(sweep_dir) if c.cell_id}
    cells: list[submit.Cell] = []
    ids: set[str] = set()
    for i, overrides in enumerate(job_overrides):
        cfg = hydra_context.config_loader.load_sweep_config(config, list(overrides))
        cid = plan.id_of(cfg)
        if cid in ids:
            log.info("%s: the same cell as an earlier one of this grid, measured once", " ".join(overrides))
            continue
        ids.add(cid)
        # the plan fixes the cell's folder (a dry run has no plan: cells are numbered in order)
        num = planned[cid].num if cid in planned else initial_job_idx + i
        with open_dict(cfg):
            cfg.hydra.job.id = num
            cfg.hydra.job.num = num
        cells.append(submit.Cell(num, list(overrides), cfg))
    platform = cells[0].config.platform
    kind = str(getattr(platform.kind, "value", platform.kind))
    if kind == "slurm" and platform.dry_run:
        outcome = "dry_run"
        print(submit.dry_run(cells, sweep_dir, platform), flush=True)
        return [JobReturn(overrides=c.overrides, status=JobStatus.COMPLETED, _return_value=None) for c in cells]
    sweep_dir.mkdir(parents=True, exist_ok=True)
    done = completed_cells(sweep_dir)
    todo = []
    for c in cells:
        rec = done.get(plan.id_of(c.config))
        if rec is not None:
            log.info("#%d: completed before (%s), skipped", c.num, rec.relative_to(sweep_dir))
        else:
            todo.append(c)
    returns = {c.num: JobReturn(overrides=c.overrides, status=JobStatus.COMPLETED, _return_value=None) for c in cells}
    if kind == "local":
        outcome = "ran"
        log.info("Launching %d cells here, one after another (%d done before)", len(todo), len(cells) - len(todo))
        for c in todo:
            log.info("\t#%d : %s", c.num, " ".join(filter_overrides(c.overrides)))
            HydraConfig.instance().set_config(c.config)
            returns[c.num] = run_job(hydra_context=hydra_context, task_function=task_function, config=c.config,
                                     job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
            configure_log(config.hydra.hydra_logging, config.hydra.verbose)
        return [returns[c.num] for c in cells]
    if not todo:
        outcome = "ran"
        return [returns[c.num] for c in cells]
    try:
        ids = submit.submit(todo, sweep_dir, platform, hydra_context)
    except Exception as e:  # sbatch refused the array, or Slurm is not reachable: one line, nothing queued
        from campaign.errors import Stop

        msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise Stop(f"campaign: submitting {len(todo)} cells to Slurm failed: {msg}", 1) from None
    if not platform.wait:
        outcome = "submitted"
        return [returns[c.num] for c in cells]
    outcome = "ran"
    states = submit.wait(ids, sweep_dir, platform)
    submit.record_endings(ids, states, {c.num: c for c in todo}, sweep_dir)
    return [returns[c.num] for c in cells]
