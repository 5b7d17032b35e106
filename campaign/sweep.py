"""The campaign around the cells: expand the grid, plan and check every cell before any runs, write
``plan.json``, launch, and summarise at the end.

``hydra/sweeper=campaign`` (``hydra_plugins/iocampaign_sweeper``) calls ``sweep``; ``SweepCallback``
(registered in ``conf/config.yaml``) notes the run or sweep folder before Hydra creates it and
summarises a single run. Nothing here exits: a campaign that must end raises ``errors.Stop``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from campaign import errors, outputs, validate
from jobs import frameworks, plan
from jobs.storage import backends

log = logging.getLogger(__name__)


def expand(overrides: list[str]) -> list[list[str]]:
    """The override list of every cell of a sweep, in the order Hydra's basic sweeper runs them
    (``hydra.sweeper.params`` first, then the command line; a later key replaces an earlier one).

    Wraps Hydra's own expansion (BasicSweeper.split_arguments); tests pin its behaviour.
    """
    return _cells(_parsed(overrides))


def _parsed(overrides: list[str]) -> list:
    """Hydra's parse of a sweep's overrides (``Override`` objects)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides(overrides=overrides)


def _cells(parsed: list) -> list[list[str]]:
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    batches = BasicSweeper.split_arguments(parsed, None)
    return [list(cell) for batch in batches for cell in batch]


def plan_cells(hydra_context: Any, config: DictConfig, cells: list[list[str]], parsed: list = ()):
    """Every cell planned (``jobs.cell.Cell``: built once) and checked once; raises Stop naming the
    first bad cell. ``parsed``: Hydra's parse of the sweep that made ``cells``, if at hand."""
    from campaign.planning import Planner

    # the whole composition, not a masked copy without Hydra's node: a masked copy no longer type-checks an
    # interpolated value (batch_size=${dataset.name} would plan as a string)
    planner = Planner(lambda ov: hydra_context.config_loader.load_sweep_config(config, ov))
    planner.learn(parsed)
    planner.adopt(list(config.hydra.overrides.task), config)
    memo: dict = {}
    planned = []
    for overrides in cells:
        with _naming(overrides):
            planned.append(planner.cell(overrides))
    planned = _object_settings_apart(planner, planned)
    for cell in planned:
        with _naming(list(cell.overrides)):
            validate.check(cell, memo)
    if planned and planned[0].config.platform.kind != "slurm":  # this process runs every cell
        from jobs.storage.objectstore import clients

        try:
            clients.one_endpoint_each(cell.config for cell in planned)
        except errors.ConfigError as e:
            raise errors.Stop(f"campaign: {e}; nothing was run", 2) from None
    log.debug("planned %d cells with %d compositions", len(planned), planner.compositions)
    return planned


@contextlib.contextmanager
def _naming(overrides: list[str]):
    """A ConfigError of the cell ``overrides`` as the campaign's one line naming that cell."""
    try:
        yield
    except errors.ConfigError as e:
        named = " ".join(overrides) or "(defaults)"
        # as typed, not as Hydra's sweeper escaped it
        line = f"campaign: {e} [cell {named}]; nothing was run"
        raise errors.Stop(line.replace("$\\{", "${").replace("\\}", "}"), 2) from None


def _object_settings_apart(planner, planned: list) -> list:
    """A grid that puts an object store beside other tiers (``storage=local,s3 storage.reader=native,fuse``):
    the settings only an object store has (``storage.reader``, ``endpoint``, ``bucket``, ``prefix``) apply to
    its cells alone. The other tiers' cells are planned without them, so each is planned once, as
    ``storage=local`` alone would plan it. In a grid with no object store they stay refused (validate)."""
    if not any([_own_settings(c) for c in planned]):  # every cell's kind judged, in its own line
        return planned
    out: dict = {}
    for cell in planned:
        others = {f"storage.{name}" for name in backends.settings_of_others(cell.config.storage)}
        keep = [o for o in cell.overrides if o.split("=", 1)[0].lstrip("+") not in others]
        if len(keep) < len(cell.overrides):
            with _naming(keep):
                cell = planner.cell(keep)
        out.setdefault(cell.cell_id, cell)  # the first of the cells that became one
    return list(out.values())


def _own_settings(cell) -> tuple[str, ...]:
    """The settings only the kind of the cell's tier has (a kind no module declares: the cell's one line)."""
    with _naming(list(cell.overrides)):
        return backends.of(cell.config.storage).settings


def sweep(hydra_context: Any, config: DictConfig, arguments: list[str]) -> None:
    """The whole multirun: plan, check, launch (or print the dry run), summarise. An error raised after a
    signal came is raised as the signal's interrupt (``interrupts.surfaced``), not left to Hydra's handler,
    which would print it as a traceback."""
    from jobs import interrupts

    with interrupts.surfaced():
        _sweep(hydra_context, config, arguments)


def _sweep(hydra_context: Any, config: DictConfig, arguments: list[str]) -> None:
    from campaign import launch
    from campaign.slurm import params as slurm_params

    sweep_dir = Path(str(config.hydra.sweep.dir))
    if config.platform.kind == "slurm":
        try:
            slurm_params.check_folder(str(sweep_dir))
        except errors.ConfigError as e:
            raise errors.Stop(f"campaign: {e}; nothing was run", 2) from None
    parsed = _parsed(arguments)
    planned = plan_cells(hydra_context, config, _cells(parsed), parsed)
    platform = planned[0].config.platform
    if platform.dry_run:
        if platform.kind == "slurm":
            from campaign.slurm import preview

            print(preview.dry_run(planned, sweep_dir, platform), flush=True)
        else:
            print(dry_run(planned, sweep_dir), flush=True)
        return  # a dry run writes nothing
    from analysis.outputs import folder_is_free

    why = folder_is_free(sweep_dir, (plan.FILENAME,), outputs.HYDRA_FILES)
    if why:  # a resume finds its plan.json; anything else is the user's
        raise errors.Stop(f"campaign: hydra.sweep.dir: {why}; choose a new folder; nothing was run", 2)
    try:
        mine, every = plan.assign(sweep_dir, planned)
    except plan.PlanError as e:
        raise errors.Stop(
            f"campaign: {e}; resume into another hydra.sweep.dir, or move the damaged plan.json away", 2
        ) from None
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")
    plan.write(sweep_dir, every)
    outputs.link_latest(sweep_dir)
    log.info("campaign of %d cell%s in %s", len(mine), "" if len(mine) == 1 else "s", sweep_dir)
    by_id = {cell.cell_id: cell for cell in planned}
    numbered = [dataclasses.replace(by_id[c.cell_id], num=c.num) for c in mine]
    outcome = launch.launch(hydra_context, config, numbered)
    if outcome == launch.SUBMITTED:
        print(
            f"campaign {sweep_dir}: submitted; the shell is yours again.\n"
            f"  status:   python -m campaign.status {sweep_dir}\n"
            f"  resume:   the same command with hydra.sweep.dir={sweep_dir} "
            "submits only failed or missing cells\n"
            f"  results:  python -m analysis {sweep_dir}   (once the cells are done)",
            flush=True,
        )
        return
    summarise(sweep_dir)


def dry_run(cells: list, sweep_dir: Path) -> str:
    """What ``platform.dry_run=true`` prints on this machine: every planned cell and where it would go."""
    from campaign.estimate import Estimate
    from campaign.launch import fork_safe_order

    number = {id(c): num for num, c in enumerate(cells)}
    cells = fork_safe_order(cells)  # in the order they would run, each with its number
    est = Estimate(cells, local=True)
    lines = [
        f"dry run: {len(cells)} cell{'s' if len(cells) != 1 else ''} would run here, one after another, into "
        f"{sweep_dir} (nothing was run or written)"
    ]
    for k, c in enumerate(cells):
        cfg = c.config
        lines.append(
            f"  #{number[id(c)]}: workload={_preset(c)} storage={cfg.storage.name} "
            f"root={cfg.storage.root} threads={cfg.threads}{frameworks.described(cfg)} "
            f"batch_size={cfg.batch_size} "
            f"prefetch={cfg.prefetch} repeats={cfg.repeats} cell {c.cell_id} [{' '.join(c.overrides)}]"
            f"{est.cell(k)}"
        )
    return "\n".join([*lines, *est.lines()])


def _preset(cell) -> str:
    """The workload preset a cell chose (alexnet_small), not its workload's name (alexnet)."""
    chosen = (o.split("=", 1) for o in reversed(cell.overrides))
    return next((v for k, v in chosen if k.lstrip("+") == "workload"), cell.config.workload.name)


def summarise(folder: Path) -> None:
    """Build the tables, figures and report of ``folder`` and print where they are; raises Stop
    (status 1, the summary already printed) when a cell failed or is missing, or the build failed."""
    from analysis.build import build
    from analysis.outputs import OutputExists

    try:
        out = build(folder)
        from analysis.report.page import write_report

        out.files.append(write_report(folder, built=out))
    except OutputExists as e:
        raise errors.Stop(f"campaign: the records are in {folder}, but {e}", 2) from None
    except Exception as e:  # noqa: BLE001 - the campaign must not end looking fine
        raise errors.Stop(
            f"campaign: building the tables and figures of {folder} failed: {type(e).__name__}: {e}; "
            f"the records are intact; retry with: python -m analysis {folder}",
            1,
        ) from None
    print(out.describe(), flush=True)
    from analysis.mlperf.command import closing_lines

    for line in closing_lines(folder, out.collected):  # +experiment=mlperf's cells: the rules' verdict
        print(line, flush=True)
    if (out.failed or out.missing) and (folder / plan.FILENAME).is_file():
        print(
            f"  rerun the failed and missing cells: the same command and hydra.sweep.dir={folder} "
            "(finished cells are skipped)",
            flush=True,
        )
    if out.failed or out.missing or out.unreadable:
        raise errors.Stop("", 1)


class SweepCallback(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        outputs.note(config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        outputs.note(config.hydra.sweep.dir)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        run_dir = Path(config.hydra.run.dir)
        if (run_dir / "record.json").exists():
            summarise(run_dir)
