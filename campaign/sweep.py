"""The campaign around the cells: the plan of a multirun, checks before any cell runs, the summary after.

Hydra calls ``SweepCallback`` (registered in ``conf/config.yaml``); it writes ``plan.json`` into the
sweep folder so the analysis can tell missing cells from cells never planned, validates every
cell's config before the first one runs, and rebuilds the tables and figures at the end.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from campaign import errors, outputs, plan, validate

log = logging.getLogger(__name__)

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


def _compose(config_name: str, overrides: list[str]) -> DictConfig:
    from hydra import compose

    return compose(config_name=config_name, overrides=overrides)


class SweepCallback(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        outputs.note(config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global exit_status
        exit_status = 0
        outputs.note(config.hydra.sweep.dir)
        if str(getattr(config.platform.kind, "value", config.platform.kind)) == "slurm":
            from campaign.slurm import params as slurm_params

            try:
                slurm_params.check_folder(str(config.hydra.sweep.dir))
            except errors.ConfigError as e:
                raise errors.Stop(f"campaign: {e}; nothing was run", 2) from None
        params = config.hydra.sweeper.get("params") or {}
        cells = expand([f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task))
        ids = []
        for overrides in cells:
            cfg = _compose(config.hydra.job.config_name, overrides)
            try:
                validate.check(cfg)
            except validate.ConfigError as e:
                # Hydra turns a callback's exception into a warning and runs the sweep anyway: stop here.
                cell = " ".join(overrides) or "(defaults)"
                raise errors.Stop(f"campaign: {e} [cell {cell}]; nothing was run", 2) from None
            ids.append(plan.id_of(cfg))
        if config.platform.get("dry_run"):
            return  # a dry run leaves nothing behind
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            mine, every = plan.assign(sweep_dir, list(zip(cells, ids)))
        except plan.PlanError as e:
            raise errors.Stop(f"campaign: {e}; resume into another hydra.sweep.dir, or move the damaged plan.json "
                              "away", 2) from None
        sweep_dir.mkdir(parents=True, exist_ok=True)
        plan.write(sweep_dir, every)
        log.info("campaign of %d cells in %s", len(mine), sweep_dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from campaign import launch

        sweep_dir = Path(config.hydra.sweep.dir)
        if launch.outcome == "dry_run":
            outputs.remove_new()
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
