"""A traced cell (``trace.posix=true``) measures in a child process started with dftracer's preload
library: LD_PRELOAD only takes effect when a process starts.

The parent (``measure``) starts ``python -m jobs.execution.traced_child <cell folder>`` with the tracing
environment and waits; the child runs the whole of ``jobs.runner.measure`` (tiers, locks, dataset,
runs) and writes what it measured into the cell's ``posix/`` folder; the parent reads it back,
splits the trace into runs (``jobs.observe.posix.attach``) and returns as an untraced cell would. A signal
the parent receives is passed on and the child's own clean-up (tiers torn down, locks released)
runs before the parent goes on.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.observe import posix
from jobs.schema import DatasetConf

if TYPE_CHECKING:
    from jobs.cell import Cell

log = logging.getLogger(__name__)

REQUEST = "request.json"  # the cell's resolved config (its plain data), for the child
MEASURED = "measured.json"  # what the child measured (or the error it met)
GRACE_S = 300  # how long the parent waits for the child's clean-up after a signal


INSIDE = "IOCAMPAIGN_POSIX_TRACED"  # set in the traced child's environment


def preload_library() -> str:
    """Path of dftracer's preload library (the ``dftracer`` wheel ships it); raises PosixTraceError."""
    spec = importlib.util.find_spec("dftracer")
    for where in (spec.submodule_search_locations or []) if spec else []:
        lib = Path(where) / "lib64" / "libdftracer_preload.so"
        if lib.is_file():
            return str(lib)
    raise posix.PosixTraceError(
        "trace.posix=true needs dftracer's preload library (pip install dftracer; it is in "
        "the project's dependencies): not found"
    )


def environment(trace_dir: Path, data_dirs: list[str]) -> dict[str, str]:
    """The environment that makes a new process trace its POSIX calls on ``data_dirs`` into ``trace_dir``."""
    return {
        "LD_PRELOAD": preload_library(),
        "DFTRACER_ENABLE": "1",
        "DFTRACER_INIT": "PRELOAD",
        "DFTRACER_DATA_DIR": ":".join(sorted({os.path.realpath(d) for d in data_dirs})),
        "DFTRACER_LOG_FILE": str(trace_dir / posix.LOG_STEM),
        "DFTRACER_INC_METADATA": "1",  # bytes asked and returned, file hashes, the hash -> path lines
        "DFTRACER_TRACE_COMPRESSION": "1",
        INSIDE: "1",
    }


def inside() -> bool:
    """True in the process started to measure a traced cell."""
    return os.environ.get(INSIDE) == "1"


class TracedRunError(RuntimeError):
    """The traced child failed; the message is its error's type and message."""


def data_dirs(cfg) -> list[str]:
    """Folders whose files the trace records (``cfg``: the cell's typed config): every tier the workload
    declares it touches (the storage root first: synthetic and converted sets live there), a dataset
    folder or file list given by path, and the stage tier."""
    from jobs import workloads

    dirs = [t.root for t in workloads.get(cfg.workload.kind).tiers(cfg) if t is not None]
    ds = cfg.dataset
    if isinstance(ds, DatasetConf) and ds.path:
        p = os.path.abspath(os.path.expanduser(ds.path))
        dirs.append(p if os.path.isdir(p) else os.path.dirname(p))
    if cfg.stage is not None:
        dirs.append(cfg.stage.root)
    return list(dict.fromkeys(d for d in dirs if d))


def measure(cell: Cell, job_dir: Path, first_run: int = 1) -> tuple[list[dict], dict, dict]:
    """Measure ``cell`` in a traced child; returns what ``jobs.runner.measure`` returns, every run
    with its ``posix_*`` keys (the first measured run numbered ``first_run``)."""
    trace_dir = job_dir / posix.SUBDIR
    trace_dir.mkdir(parents=True, exist_ok=True)
    for old in [*posix.trace_files(trace_dir), trace_dir / MEASURED]:  # a failed earlier try of this cell
        old.unlink(missing_ok=True)
    (trace_dir / REQUEST).write_text(
        json.dumps(
            {"config": cell.data, "cell_id": cell.cell_id, "log_file": _log_file(), "first_run": first_run}
        )
    )
    env = {**os.environ, **environment(trace_dir, data_dirs(cell.config))}
    log.info(
        "trace.posix: measuring in a child process traced by dftracer (%s) into %s",
        env["LD_PRELOAD"],
        trace_dir,
    )
    from jobs import interrupts, lifeline

    # the child ends (cleanly: SIGTERM runs its clean-up) when this process dies, even by SIGKILL
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.execution.traced_child", str(job_dir)], env=lifeline.child_env(env)
    )
    try:
        rc = proc.wait()
    except BaseException as e:
        # the signal is passed on: a Ctrl-C reached the child too, but a SIGINT sent to this pid alone did
        # not; the child takes the first signal and ignores repeats while it cleans up
        if proc.poll() is None:
            proc.send_signal(
                e.signum
                if isinstance(e, interrupts.Interrupted)
                else signal.SIGINT
                if isinstance(e, KeyboardInterrupt)
                else signal.SIGTERM
            )
        try:
            proc.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        (trace_dir / REQUEST).unlink(missing_ok=True)
    out = trace_dir / MEASURED
    if not out.exists():
        raise TracedRunError(f"the traced child ended with exit status {rc} and wrote no result")
    got = json.loads(out.read_text())
    out.unlink()
    if "error" in got:
        raise TracedRunError(f"{got['error']['type']}: {got['error']['message']}")
    runs = posix.attach(got["runs"], trace_dir, job_dir)
    for r in runs:
        if not r["posix_complete"]:
            log.warning(
                "run %s: the POSIX trace holds %.1f%% of the bytes the run consumed (< %.0f%%): its posix "
                "figures are marked incomplete",
                r["run"],
                100 * (r["posix_coverage"] or 0),
                100 * posix.COVERAGE_MIN,
            )
    return runs, got["dataset"], got["provenance"]


def with_extra_run(cell: Cell, job_dir: Path, measure_untraced) -> tuple[list[dict], dict, dict]:
    """``trace.runs=extra``: the warm-ups and measured runs untraced (``measure_untraced(cell, job_dir)``,
    the runner's own: their rates carry no tracer's cost), then one more run from the same cache state in
    a traced child, numbered ``repeats + 1``; that run is returned last, flagged ``traced_extra`` (the
    cell's record keeps it apart from the measured runs)."""
    from jobs.cell import Cell

    def variant(**changed) -> Cell:  # the same cell (its id too) with some settings changed
        return Cell.from_data({**cell.data, **changed}, cell.overrides, cell.num, cell.cell_id)

    runs, dataset, prov = measure_untraced(variant(trace={**cell.data["trace"], "posix": False}), job_dir)
    repeats = cell.config.repeats
    log.info(
        "trace.runs=extra: %d measured run(s) untraced; "
        "one more run (run %d) traced by dftracer for its calls",
        repeats,
        repeats + 1,
    )
    extra, _, _ = measure(variant(warmup=0, repeats=1), job_dir, first_run=repeats + 1)
    extra[-1]["traced_extra"] = True
    return [*runs, extra[-1]], dataset, prov


def _log_file() -> str | None:
    for h in logging.getLogger().handlers:
        if isinstance(h, logging.FileHandler):
            return h.baseFilename
    return None
