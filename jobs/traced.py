"""A traced cell (``trace.posix=true``) measures in a child process started with dftracer's preload
library: LD_PRELOAD only takes effect when a process starts.

The parent (``measure``) starts ``python -m jobs.traced <cell folder>`` with the tracing
environment and waits; the child runs the whole of ``jobs.runner.measure`` (tiers, locks, dataset,
runs) and writes what it measured into the cell's ``posix/`` folder; the parent reads it back,
splits the trace into runs (``jobs.posix.attach``) and returns as an untraced cell would. A signal
the parent receives is passed on and the child's own clean-up (tiers torn down, locks released)
runs before the parent goes on.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from jobs import posix

log = logging.getLogger(__name__)

REQUEST = "request.json"  # the cell's resolved config, for the child
MEASURED = "measured.json"  # what the child measured (or the error it met)
GRACE_S = 300  # how long the parent waits for the child's clean-up after a signal


class TracedRunError(RuntimeError):
    """The traced child failed; the message is its error's type and message."""


def data_dirs(config: dict) -> list[str]:
    """Folders whose files the trace records: the storage root (synthetic and converted sets live
    there), a dataset folder or file list given by path, and every checkpoint tier's root."""
    dirs = [str(config["storage"]["root"])]
    ds = config.get("dataset")
    if isinstance(ds, dict) and ds.get("path"):
        p = os.path.abspath(os.path.expanduser(str(ds["path"])))
        dirs.append(p if os.path.isdir(p) else os.path.dirname(p))
    if isinstance(config.get("stage"), dict):
        dirs.append(str(config["stage"]["root"]))
    if (config.get("workload") or {}).get("kind") == "checkpoint":
        dirs += [str(config["checkpoint"][t]["root"]) for t in ("fast", "slow") if isinstance(config["checkpoint"].get(t), dict)]
    return [d for d in dirs if d]


def measure(config: dict, job_dir: Path) -> tuple[list[dict], dict, dict]:
    """Measure the cell in a traced child; returns what ``jobs.runner.measure`` returns, every run
    with its ``posix_*`` keys."""
    trace_dir = job_dir / posix.SUBDIR
    trace_dir.mkdir(parents=True, exist_ok=True)
    for old in [*posix.trace_files(trace_dir), trace_dir / MEASURED]:  # a failed earlier try of this cell
        old.unlink(missing_ok=True)
    (trace_dir / REQUEST).write_text(json.dumps({"config": config, "log_file": _log_file()}))
    env = {**os.environ, **posix.environment(trace_dir, data_dirs(config))}
    log.info("trace.posix: measuring in a child process traced by dftracer (%s) into %s", env["LD_PRELOAD"], trace_dir)
    from jobs import interrupts, lifeline

    # the child ends (cleanly: SIGTERM runs its clean-up) when this process dies, even by SIGKILL
    proc = subprocess.Popen([sys.executable, "-m", "jobs.traced", str(job_dir)], env=lifeline.child_env(env))
    try:
        rc = proc.wait()
    except BaseException as e:
        # the signal is passed on: a Ctrl-C reached the child too, but a SIGINT sent to this pid alone did
        # not; the child takes the first signal and ignores repeats while it cleans up
        if proc.poll() is None:
            proc.send_signal(e.signum if isinstance(e, interrupts.Interrupted)
                             else signal.SIGINT if isinstance(e, KeyboardInterrupt) else signal.SIGTERM)
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
            log.warning("run %s: the POSIX trace holds %.1f%% of the bytes the run consumed (< %.0f%%): its posix "
                        "figures are marked incomplete", r["run"], 100 * (r["posix_coverage"] or 0), 100 * posix.COVERAGE_MIN)
    return runs, got["dataset"], got["provenance"]


def _log_file() -> str | None:
    for h in logging.getLogger().handlers:
        if isinstance(h, logging.FileHandler):
            return h.baseFilename
    return None


def main(job_dir: str) -> int:
    """The child: measure the cell and write the outcome for the parent."""
    from jobs import interrupts, lifeline, runner

    lifeline.bind()
    for k in [k for k in os.environ if k == "LD_PRELOAD" or k.startswith("DFTRACER_")]:
        del os.environ[k]  # loaded and read at start-up; processes this one starts (dataset generation) are not traced
    folder = Path(job_dir)
    request = json.loads((folder / posix.SUBDIR / REQUEST).read_text())
    fmt = logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    handlers = [logging.StreamHandler()]
    if request.get("log_file"):
        handlers.append(logging.FileHandler(request["log_file"]))
    for h in handlers:
        h.setFormatter(fmt)
    logging.basicConfig(level=logging.INFO, handlers=handlers)
    interrupts.install(repeat=False)  # the parent passes on a signal this process may have had already
    out = folder / posix.SUBDIR / MEASURED
    try:
        runs, dataset, prov = runner.measure(request["config"], folder)
        result = {"runs": runs, "dataset": dataset, "provenance": prov}
        code = 0
    except BaseException as e:  # the parent records the failure; a signal ends the child too
        import traceback

        if isinstance(e, (KeyboardInterrupt, interrupts.Interrupted)):  # the parent prints the one line
            log.info("the traced cell was interrupted (%s); its clean-up ran", type(e).__name__)
        else:
            log.error("the traced cell failed: %s: %s", type(e).__name__, e, exc_info=True)
        result = {"error": {"type": type(e).__name__, "message": str(e), "traceback": traceback.format_exc()}}
        code = 1
    out.write_text(json.dumps(result, default=str))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
