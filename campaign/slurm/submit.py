"""Submit a campaign's cells as Slurm arrays with submitit, wait, and record endings (the dry run:
``preview``)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from campaign.slurm import params, sacct

log = logging.getLogger(__name__)
SUBMITTED = "submitted.json"
SUBMITIT_DIR = ".slurm"  # submitit's folder in the sweep: pickles, sbatch scripts, job logs


class CellJob:
    """What runs inside a Slurm job: Hydra's run_job on the planned cell (picklable, as in Hydra's
    submitit launcher; the cell travels as its planned data and is rebuilt, not composed, on the node).
    A cell that fails raises here, so Slurm records the job as FAILED."""

    def __init__(self, hydra_context: Any, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config  # the sweep's config: its Hydra node is every job's

    def __call__(self, planned: dict, singleton_state: dict) -> Any:
        import submitit
        from hydra.core.singleton import Singleton
        from hydra.core.utils import setup_globals

        from campaign.cell import run_planned
        from jobs.cell import Cell

        Singleton.set_state(singleton_state)
        setup_globals()
        cell = Cell.from_data(**planned)
        ret = run_planned(self.hydra_context, self.config, cell, submitit.JobEnvironment().job_id)
        return ret.return_value  # re-raises the cell's exception: the job ends FAILED


def planned(cell) -> dict:
    """What a cell's job is given: the arguments of ``Cell.from_data`` that rebuild the planned cell."""
    return {"data": cell.data, "overrides": list(cell.overrides), "num": cell.num, "cell_id": cell.cell_id}


class RequeueingCellJob(CellJob):
    """A CellJob that submitit requeues when it reaches its time limit (platform.requeue_on_timeout)."""

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def shape(config) -> tuple[int, int]:
    """(nodes, tasks per node) of a cell's job (its typed config): its tasks, or the workers of its
    tf.data service."""
    nodes = config.platform.nodes
    if config.input.service:
        return nodes, -(-config.input.workers // nodes)
    return nodes, config.platform.tasks_per_node


def groups(cells: list) -> list[tuple[tuple[int, int], list]]:
    """The cells by the shape of their job, in sweep order of each shape's first cell: one array each
    (an array's jobs share one sbatch script)."""
    out: dict[tuple[int, int], list] = {}
    for c in cells:
        out.setdefault(shape(c.config), []).append(c)
    return list(out.items())


def parameters(
    sweep_dir: Path, platform, nodes: int = 1, tasks_per_node: int = 1, after: str | None = None
) -> dict:
    """What a campaign's Slurm executor is given (``SlurmExecutor.update_parameters``); ``after``: the
    Slurm job (an earlier array) that must have ended before this one starts."""
    kw = params.executor_parameters(platform, f"iocampaign-{sweep_dir.name}", nodes, tasks_per_node)
    if after:
        kw["additional_parameters"] = {"dependency": f"afterany:{after}"}
    return kw


def nodes_python(platform) -> str | None:
    """The Python the cells' jobs start, quoted for the sbatch script: ``platform.python``, or None for
    submitit's default, the Python that submits (its venv on the cluster's shared file system)."""
    import shlex

    return shlex.quote(str(platform.python)) if platform.python else None


def executor(sweep_dir: Path, platform, nodes: int = 1, tasks_per_node: int = 1, after: str | None = None):
    """submitit's Slurm executor for a campaign (folder under the sweep), with ``parameters``. submitit
    refuses to build one where srun is not on PATH: a dry run never does (``preview``)."""
    import submitit

    ex = submitit.SlurmExecutor(
        folder=sweep_dir / SUBMITIT_DIR,
        max_num_timeout=3 if platform.requeue_on_timeout else 0,
        python=nodes_python(platform),
    )
    ex.update_parameters(**parameters(sweep_dir, platform, nodes, tasks_per_node, after))
    return ex


def sbatch_script(ex, count: int) -> str:
    """The sbatch script executor ``ex`` would submit for an array of ``count`` cells."""
    from campaign.slurm.sbatch import sbatch_text

    return sbatch_text(ex.folder, ex.parameters, count, ex.python)


def _load(sweep_dir: Path) -> dict:
    from jobs import jsonfiles

    p = sweep_dir / SUBMITTED
    # a FIFO planted there: refused, never waited on
    return jsonfiles.read_json(p) if p.exists() else {"cells": {}}


class DoesNotFit(ValueError):
    """A cell's job asks more of a node, or more nodes, than the partition has: Slurm would keep it pending
    for ever (reason PartitionConfig)."""


def partition_nodes(partition: str | None) -> list[int] | None:
    """The CPU count of each node of ``partition`` (the default partition when None), from sinfo; None when
    sinfo cannot tell (no Slurm here: submission then says why)."""
    import subprocess

    cmd = ["sinfo", "-h", "-N", "-o", "%N %c"] + (["-p", str(partition)] if partition else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    cpus = {}
    for line in out.stdout.splitlines():
        name, _, count = line.partition(" ")
        if count.strip().isdigit():
            cpus[name] = int(count)  # a node in several partitions is listed once per partition
    return list(cpus.values()) or None


def check_fits(cells: list, platform) -> None:
    """Raise DoesNotFit, before anything is submitted, for a job shape the partition's nodes cannot hold."""
    nodes_cpus = partition_nodes(platform.partition)
    if not nodes_cpus:
        return
    where = f"partition {platform.partition}" if platform.partition else "the default partition"
    per_task = int(platform.cpus_per_task)
    for (nodes, per_node), _ in groups(cells):
        need = per_node * per_task
        if need > max(nodes_cpus):
            raise DoesNotFit(
                f"platform.tasks_per_node={per_node} x platform.cpus_per_task={per_task} asks for {need} "
                f"CPUs a node, but the nodes of {where} have at most {max(nodes_cpus)}: Slurm would never "
                f"start it; set platform.cpus_per_task={max(1, max(nodes_cpus) // per_node)} or fewer tasks"
            )
        fit = sum(c >= need for c in nodes_cpus)
        if nodes > fit:
            raise DoesNotFit(
                f"platform.nodes={nodes} asks for {nodes} nodes of {need} CPUs, but {where} has {fit}: "
                "Slurm would never start it"
            )


def submit(cells: list, sweep_dir: Path, platform, hydra_context: Any, config: DictConfig) -> dict[int, str]:
    """Submit the planned ``cells`` (``jobs.cell.Cell``, numbered) as arrays, each job running its cell
    beside ``config``'s Hydra node (the sweep's); record cell -> job id in submitted.json; return
    that map."""
    from hydra.core.singleton import Singleton

    check_fits(cells, platform)
    job = (RequeueingCellJob if platform.requeue_on_timeout else CellJob)(hydra_context, config)
    state = Singleton.get_state()
    ids: dict[int, str] = {}
    after = platform.after or None  # platform.after: another campaign's array (the paper's grids)
    # one array per job shape, each after the one before: cells still run one at a time
    for (nodes, per_node), members in groups(cells):
        ex = executor(sweep_dir, platform, nodes, per_node, after)
        with ex.batch():
            jobs = [ex.submit(job, planned(c), state) for c in members]
        ids.update({c.num: j.job_id for c, j in zip(members, jobs)})
        after = jobs[0].job_id.split("_")[0]
    book = _load(sweep_dir)
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    for c in cells:
        entry = book["cells"].setdefault(str(c.num), {"overrides": list(c.overrides), "jobs": []})
        entry["jobs"].append({"job_id": ids[c.num], "submitted_at": now})
    tmp = sweep_dir / (SUBMITTED + ".part")
    tmp.write_text(json.dumps(book, indent=2))
    tmp.replace(sweep_dir / SUBMITTED)
    log.info("submitted %d cells: Slurm job ids %s", len(cells), ", ".join(ids.values()))
    return ids


def last_array(sweep_dir: Path) -> str | None:
    """The Slurm id of the array submitted last into ``sweep_dir`` (None when none was): what the next
    campaign that must not overlap it waits for."""
    arrays = {j.split("_")[0] for j in latest_jobs(sweep_dir).values()}
    return max(arrays, key=int) if arrays else None


def latest_jobs(sweep_dir: Path) -> dict[int, str]:
    """The newest Slurm job id of every submitted cell."""
    return {int(k): v["jobs"][-1]["job_id"] for k, v in _load(sweep_dir)["cells"].items() if v["jobs"]}


PROGRESS_EVERY_S = 60.0


def progress(states: dict[int, sacct.JobState], ended: list[int], out_of_service: Sequence[str] = ()) -> str:
    """ "2 of 5 cells ended; 1 running (#2 on n1); 2 pending (Resources); out of service: n2 drained
    (Kill task failed)": a waiting campaign's line. ``out_of_service``: the nodes Slurm starts no job on,
    named while a cell is pending (``sacct.out_of_service``)."""
    running = [f"#{n} on {s.node}" if s.node else f"#{n}" for n, s in states.items() if s.state == "RUNNING"]
    pending = sorted({s.reason or "no reason given" for n, s in states.items() if s.state == "PENDING"})
    waiting = sum(s.state == "PENDING" for s in states.values())
    parts = [f"{len(ended)} of {len(states)} cells ended"]
    if running:
        parts.append(
            f"{len(running)} running ({', '.join(running[:4])}{', ...' if len(running) > 4 else ''})"
        )
    if waiting:
        parts.append(f"{waiting} pending ({', '.join(pending)})")
        if out_of_service:
            more = f", and {len(out_of_service) - 4} more" if len(out_of_service) > 4 else ""
            parts.append(f"out of service: {', '.join(out_of_service[:4])}{more}")
    return "; ".join(parts)


def wait(ids: dict[int, str], sweep_dir: Path, platform) -> dict[int, sacct.JobState]:
    """Poll Slurm until every job has ended; never forever (a deadline follows from the time limits)."""
    from jobs import records

    cells = len(ids)
    parallel = max(1, int(platform.array_parallelism))
    rounds = -(-cells // parallel) * (3 if platform.requeue_on_timeout else 1)
    deadline = time.monotonic() + 60 * platform.timeout_min * rounds + 600
    last: dict[int, sacct.JobState] = {}
    told, told_at = "", time.monotonic()
    while True:
        found, _ = sacct.states(list(ids.values()))
        last = {n: found[j] for n, j in ids.items()}
        ended = [n for n, s in last.items() if s.terminal]
        # a cell whose record says it ended is done even before sacct catches up
        for n in ids:
            if (
                n not in ended
                and (sweep_dir / str(n) / records.FILENAME).exists()
                and last[n].state in ("UNKNOWN", "COMPLETED")
            ):
                ended.append(n)
        if len(ended) == cells:
            return last
        pending = any(s.state == "PENDING" for s in last.values())
        line = progress(last, ended, sacct.out_of_service() if pending else [])
        if line != told or time.monotonic() - told_at >= PROGRESS_EVERY_S:  # on a change, else once a minute
            log.info("waiting for Slurm: %s", line)
            told, told_at = line, time.monotonic()
        if time.monotonic() > deadline:
            log.error("gave up waiting for Slurm jobs %s past their time limits", ", ".join(ids.values()))
            return last
        time.sleep(float(platform.poll_s))


def record_endings(
    ids: dict[int, str], states: dict[int, sacct.JobState], cells: dict, sweep_dir: Path
) -> None:
    """A cell whose job ended without writing a record (cancelled, timed out, node failure, killed)
    gets a failed record saying so, so the analysis reports it instead of missing it."""
    from jobs import records

    for num, state in states.items():
        folder = sweep_dir / str(num)
        if (folder / records.FILENAME).exists():
            continue
        if state.state == "COMPLETED":
            message = f"Slurm job {ids[num]} COMPLETED but wrote no record"
        else:
            message = f"Slurm job {ids[num]} ended {state.state}" + (
                f" (exit {state.exit_code})" if state.exit_code else ""
            )
        folder.mkdir(parents=True, exist_ok=True)
        records.write(
            records.CellRecord(
                cell_id=cells[num].cell_id,
                status=records.FAILED,
                config=cells[num].data,
                overrides=list(cells[num].overrides),
                runs=[],
                dataset={},
                provenance={"slurm": {"job_id": ids[num], "state": state.state, "node": state.node}},
                started_at="",
                finished_at=records.now(),
                error={
                    "type": f"Slurm{state.state.title().replace('_', '')}",
                    "message": message,
                    "traceback": "",
                },
            ),
            folder,
        )
        log.error("cell %d: %s", num, message)
