"""The one launch path of a campaign's cells, local or Slurm: skip the cells whose completed record
is in the sweep folder (resume), then run the others here one after another, or submit them as one
Slurm array. Returns what it did; a refusal raises ``errors.Stop``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from jobs.cell import Cell

log = logging.getLogger(__name__)
RAN, SUBMITTED = "ran", "submitted"


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


def launch(hydra_context: Any, config: DictConfig, cells: list[Cell]) -> str:
    """Run or submit every planned cell (numbered) that has no completed record yet; returns RAN or
    SUBMITTED."""
    from hydra.core.utils import configure_log, filter_overrides, setup_globals

    from campaign.cell import run_planned

    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    done = completed_cells(sweep_dir)
    todo = []
    for c in cells:
        if c.cell_id in done:
            log.info("#%d: completed before (%s), skipped", c.num, done[c.cell_id].relative_to(sweep_dir))
        else:
            todo.append(c)
    platform = cells[0].config.platform
    if platform.kind == "local":
        from campaign.estimate import Estimate, duration

        todo = fork_safe_order(todo)
        est = Estimate(todo, local=True)
        log.info(
            "Launching %d cell%s here, one after another (%d done before); %s",
            len(todo),
            "" if len(todo) == 1 else "s",
            len(cells) - len(todo),
            est.total(),
        )
        started = time.monotonic()
        for k, c in enumerate(todo):
            left = _first(est) if not k else ""
            if k:  # the cells so far at their mean pace: a rough estimate, cells differ
                left = f", about {duration((time.monotonic() - started) / k * (len(todo) - k))} left"
            log.info(
                "\tcell %d/%d (#%d%s): %s",
                k + 1,
                len(todo),
                c.num,
                left,
                " ".join(filter_overrides(c.overrides)),
            )
            run_planned(hydra_context, config, c, c.num)
            configure_log(config.hydra.hydra_logging, config.hydra.verbose)
        return RAN
    if not todo:
        return RAN
    return _slurm(hydra_context, config, todo, sweep_dir)


def fork_safe_order(cells: list[Cell]) -> list[Cell]:
    """The order this process runs ``cells`` in: as planned, except that the cells of a framework whose
    runtime leaves threads a fork may not survive (``Framework.fork_unsafe``: TensorFlow's pools) run
    after the others, whose reader processes (a DataLoader's workers) fork from this process. Each cell
    keeps its number and folder; the log says when the order changed."""
    from jobs import frameworks

    late = [frameworks.of(c.config).fork_unsafe for c in cells]
    ordered = [c for c, x in zip(cells, late) if not x] + [c for c, x in zip(cells, late) if x]
    if ordered != cells:
        names = sorted({frameworks.of(c.config).label for c, x in zip(cells, late) if x})
        log.info(
            "%s's cells run last: their runtime's threads would stay in this process, from which the other "
            "cells fork their readers",
            " and ".join(names),
        )
    return ordered


def _first(est) -> str:
    """What the first cell is estimated to take, before any cell has set a pace."""
    from campaign.estimate import duration

    s, gen = est.cells[0], est.generating[0]
    if s is None:
        return ""
    return f", ≈ {duration(s)} estimated" + (f", {duration(gen)} of it generating the data" if gen else "")


def _slurm(hydra_context: Any, config: DictConfig, todo: list[Cell], sweep_dir: Path) -> str:
    from campaign.errors import Stop
    from campaign.slurm import submit

    platform = todo[0].config.platform
    try:
        ids = submit.submit(todo, sweep_dir, platform, hydra_context, config)
    except submit.DoesNotFit as e:
        raise Stop(f"campaign: {e}; nothing was submitted", 2) from None
    except Exception as e:  # noqa: BLE001 - sbatch refused the array, or Slurm is not reachable: nothing queued
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise Stop(f"campaign: submitting {len(todo)} cells to Slurm failed: {msg}", 1) from None
    if not platform.wait:
        return SUBMITTED
    states = submit.wait(ids, sweep_dir, platform)
    submit.record_endings(ids, states, {c.num: c for c in todo}, sweep_dir)
    return RAN
