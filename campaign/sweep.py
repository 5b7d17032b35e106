"""The campaign around the cells: the plan of a multirun, checks before any cell runs, the summary after.

Hydra calls ``SweepCallback`` (registered in ``conf/config.yaml``); it writes ``plan.json`` into the
sweep folder so the analysis can tell missing cells from cells never planned, validates every
cell's config before the first one runs, and rebuilds the tables and figures at the end.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from campaign import validate

log = logging.getLogger(__name__)
PLAN = "plan.json"
PLAN_VERSION = 1

# Exit status of the last campaign in this process: 1 when a cell failed or is missing.
exit_status = 0


def expand(overrides: list[str]) -> list[list[str]]:
    """The override list of every cell of a sweep, in the order Hydra's basic sweeper runs them
    (``hydra.sweeper.params`` first, then the command line; a later key replaces an earlier one).

    Wraps Hydra's own expansion (BasicSweeper.split_arguments); tests pin its behaviour.
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides=overrides)
    batches = BasicSweeper.split_arguments(parsed, None)
    return [list(cell) for batch in batches for cell in batch]


def _remove_if_only_hydra(folder: Path) -> None:
    """Remove a sweep folder that holds nothing but Hydra's multirun.yaml (a dry run's)."""
    folder = folder.resolve()
    if folder.is_dir() and {p.name for p in folder.iterdir()} <= {"multirun.yaml"}:
        for p in folder.iterdir():
            p.unlink()
        folder.rmdir()
        stop = Path.cwd().resolve()
        for parent in folder.parents:
            if parent == stop or stop not in parent.parents or any(parent.iterdir()):
                break
            parent.rmdir()


def _compose(config_name: str, overrides: list[str]) -> DictConfig:
    from hydra import compose

    return compose(config_name=config_name, overrides=overrides)


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global exit_status
        exit_status = 0
        params = config.hydra.sweeper.get("params") or {}
        cells = expand([f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task))
        for overrides in cells:
            cfg = _compose(config.hydra.job.config_name, overrides)
            try:
                validate.check(cfg)
            except validate.ConfigError as e:
                # Hydra turns a callback's exception into a warning and runs the sweep anyway: stop here.
                cell = " ".join(overrides) or "(defaults)"
                print(f"campaign: {e} [cell {cell}]; nothing was run", file=sys.stderr)
                sys.exit(2)
        if config.platform.get("dry_run"):
            return  # a dry run leaves nothing behind
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        plan = {
            "plan_version": PLAN_VERSION,
            "argv": sys.argv,
            "cells": [{"num": i, "dir": str(i), "overrides": ov} for i, ov in enumerate(cells)],
        }
        (sweep_dir / PLAN).write_text(json.dumps(plan, indent=2))
        log.info("campaign of %d cells in %s", len(cells), sweep_dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from campaign import launch

        sweep_dir = Path(config.hydra.sweep.dir)
        if launch.outcome == "dry_run":
            _remove_if_only_hydra(sweep_dir)
            return
        if launch.outcome == "submitted":
            print(
                f"campaign {sweep_dir}: submitted; the shell is yours again.\n"
                f"  status:   python -m campaign.status {sweep_dir}\n"
                f"  resume:   the same command with hydra.sweep.dir={sweep_dir} submits only failed or missing cells\n"
                f"  results:  python -m analysis {sweep_dir}   (once the cells are done)",
                flush=True,
            )
            return
        self._summarise(sweep_dir)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        run_dir = Path(config.hydra.run.dir)
        if (run_dir / "record.json").exists():
            self._summarise(run_dir)

    @staticmethod
    def _summarise(folder: Path) -> None:
        global exit_status
        from analysis.build import build

        try:
            out = build(folder)
            from analysis.report import write_report

            out.files.append(write_report(folder, built=out))
        except Exception as e:  # Hydra would only warn; the campaign must not end looking fine
            exit_status = 1
            print(f"campaign: building the tables and figures of {folder} failed: {type(e).__name__}: {e}", file=sys.stderr)
            print(f"campaign: the records are intact; retry with: python -m analysis {folder}", file=sys.stderr)
            return
        print(out.describe(), flush=True)
        if out.failed or out.missing or out.unreadable:
            exit_status = 1
