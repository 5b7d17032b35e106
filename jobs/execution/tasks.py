"""Multi-task cells (``platform.tasks_per_node > 1``, local platform): one run of the cell is N
processes on this machine, each reading its shard of the dataset (every N-th image from its rank)
through the same pipeline, all starting their timed interval together.

The runner (parent) evicts the whole set, starts the N task processes (``python -m jobs.execution.tasks
<folder> <rank>``) and waits; each task builds its pipeline, says it is ready at the start of its
timed interval and waits for the parent's go (a barrier through files in the run's folder: no MPI);
each writes its own result. The parent merges them: aggregate images/s and MB/s = everything the
tasks consumed ÷ (the last task's end − the first task's start), with per-task min, median and max,
so a straggler shows. A task that fails fails the run, naming its rank and its error; the others
are ended, so no process outlives the cell.

On Slurm (``platform=slurm``, any ``platform.nodes``) the cell's job holds nodes × tasks_per_node
tasks and its controller (the one process submitit starts) is a one-task step; each run's tasks are a
second job step, ``srun --overlap`` over the whole allocation, each task taking its rank from
``SLURM_PROCID``. The barrier is the same files, in the sweep folder (shared by the nodes, as Slurm's
own output is). A cold run has every task evict its own shard on its own node before it says ready.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from jobs.metrics import MB

log = logging.getLogger(__name__)
SUBDIR = "tasks"
# what a multi-task run adds to the workload's keys
MERGED_KEYS = ("tasks", "task_images_per_s_min", "task_images_per_s_median", "task_images_per_s_max",
               "task_start_spread_s", "task_resident_bytes_before", "task_results")
READY_TIMEOUT_S = 600.0  # longest a task may take to build its pipeline (TensorFlow's import included)


class TaskError(RuntimeError):
    """A task of a multi-task run failed; the message names its rank and error."""


def shard(ds, rank: int, n: int):
    """Task ``rank``'s share of ``ds``: every n-th image from its rank (``dataset.format=files``)."""
    idx = list(range(rank, len(ds.files), n))
    local = {i: k for k, i in enumerate(idx)}
    # the set's groups (the local shuffle's consecutive files) keep the shard's own images, renumbered
    groups = tuple(g for g in (tuple(local[i] for i in members if i in local) for members in ds.members) if g)
    return dataclasses.replace(ds, files=tuple(ds.files[i] for i in idx), labels=tuple(ds.labels[i] for i in idx),
                               sizes=tuple(ds.sizes[i] for i in idx), skipped=(), members=groups)


def srun_command(nodes: int, per_node: int, cpus_per_task: int, folder: Path) -> list[str]:
    """The job step of a run's tasks inside the cell's Slurm allocation (``--overlap``: the controller's
    own one-task step keeps its CPUs; ``--kill-on-bad-exit``: a failing task ends the others)."""
    return ["srun", "--overlap", f"--nodes={nodes}", f"--ntasks={nodes * per_node}", f"--ntasks-per-node={per_node}",
            f"--cpus-per-task={cpus_per_task}", "--mem=0", "--kill-on-bad-exit=1", "--unbuffered",
            sys.executable, "-m", "jobs.execution.tasks", str(folder)]


def run(config: dict, ds, n: int, seed: int, run_no: int, folder: Path, timeout_s: float, cold: bool = False,
        step: list[str] | None = None, marks: dict | None = None, disk: str | None = None) -> dict:
    """One multi-task run: start ``n`` tasks (local processes, or the Slurm job step ``step``), release
    them together, merge their results. ``marks`` gets the usage snapshots (``jobs.observe.usage``, device
    ``disk``) of the timed part: from the release to the last task's end, its CPU time the tasks' own
    over their timed intervals (their start-up is not in it)."""
    import uuid

    from jobs.execution import lifeline
    from jobs.observe import usage

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():  # a warm-up or an earlier try of this run in the cell's own folder
        old.unlink()
    # every hand-over file carries this run's nonce: a task left by an earlier, killed campaign can neither
    # be released by this run's go nor overwrite its results
    nonce = uuid.uuid4().hex[:12]
    (folder / "request.json").write_text(json.dumps({"config": config, "dataset": dataclasses.asdict(ds), "n": n,
                                                     "seed": seed, "run": run_no, "cold": cold, "nonce": nonce}))
    if step:  # a Slurm job step: Slurm ends its tasks with the job
        procs = [subprocess.Popen(step, env=lifeline.plain_env())]
    else:  # local tasks end with this process, whatever kills it
        procs = [subprocess.Popen([sys.executable, "-m", "jobs.execution.tasks", str(folder), str(r)], env=lifeline.child_env())
                 for r in range(n)]
    try:
        deadline = time.monotonic() + timeout_s
        _barrier(procs, n, folder, timeout_s, nonce)
        start = usage.snapshot(disk)
        (folder / _name("go", nonce)).touch()
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:  # a hung task: ended below, with the others
                _check_ended([q for q in procs if q.poll() is not None], 0, folder, nonce)  # a task's own error first
                late = [r for r in range(n) if not (folder / _name("result", nonce, r)).exists()]
                raise TaskError(f"tasks {late} had not ended after {timeout_s:.0f} s (the run's limit: "
                                "platform.timeout_min) and were ended") from None
        end = usage.snapshot(disk)
        _check_ended(procs, n, folder, nonce)
        results = [_result(folder, r, nonce) for r in range(n)]
        if marks is not None:
            marks["start"] = start
            marks["end"] = dataclasses.replace(end, cpu_s=start.cpu_s + sum(r["cpu_s"] for r in results))
    finally:
        for f in ("request.json", _name("go", nonce), *(_name("ready", nonce, r) for r in range(n))):  # results stay
            (folder / f).unlink(missing_ok=True)
        for p in procs:  # a failure or a signal: no task outlives the run (srun passes SIGTERM to its tasks)
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    return merge(results)


def _name(kind: str, nonce: str, rank: int | None = None) -> str:
    """A hand-over file of run ``nonce``: go-<nonce>, ready-<nonce>-<rank>, result-<nonce>-<rank>.json, error-..."""
    base = f"{kind}-{nonce}" + ("" if rank is None else f"-{rank}")
    return base + ".json" if kind in ("result", "error") else base


def _barrier(procs: list, n: int, folder: Path, timeout_s: float, nonce: str) -> None:
    deadline = time.monotonic() + min(timeout_s, READY_TIMEOUT_S)
    while True:
        if any(p.poll() is not None for p in procs):
            _check_ended(procs, n, folder, nonce)  # raises with a task's own error
            raise TaskError(f"the tasks ended (exit status {[p.returncode for p in procs]}) before all were ready")
        if all((folder / _name("ready", nonce, r)).exists() for r in range(n)):
            return
        if time.monotonic() > deadline:
            late = [r for r in range(n) if not (folder / _name("ready", nonce, r)).exists()]
            raise TaskError(f"tasks {late} were not ready after {min(timeout_s, READY_TIMEOUT_S):.0f} s")
        time.sleep(0.02)


def _check_ended(procs: list, n: int, folder: Path, nonce: str) -> None:
    """Raise TaskError naming the first task that failed (its own error when it wrote one)."""
    errors = sorted((int(f.stem.rsplit("-", 1)[1]), f) for f in folder.glob(_name("error", nonce, "*")))
    if errors:
        rank, f = errors[0]
        e = json.loads(f.read_text())
        where = f" (at {e['where']})" if e.get("where") else ""
        raise TaskError(f"task {rank} failed: {e['type']}: {e['message']}{where}")
    for r in range(n):
        code = procs[r].returncode if len(procs) == n else procs[0].returncode
        if code is not None and (code != 0 or not (folder / _name("result", nonce, r)).exists()):
            raise TaskError(f"task {r} ended with exit status {code} and no result")


def _result(folder: Path, rank: int, nonce: str) -> dict:
    out = folder / _name("result", nonce, rank)
    if not out.exists():
        raise TaskError(f"task {rank} ended with no result")
    return json.loads(out.read_text())


def merge(results: list[dict]) -> dict:
    """The run's result from its tasks' (each with ``t_start``/``t_end``, seconds since the epoch)."""
    start, end = min(r["t_start"] for r in results), max(r["t_end"] for r in results)
    seconds = max(end - start, 1e-9)
    images = sum(r["images"] for r in results)
    consumed = sum(r["bytes_consumed"] for r in results)

    def total(key):
        vals = [r.get(key) for r in results]
        return None if any(v is None for v in vals) else sum(vals)

    rates = [r["images_per_s"] for r in results]
    return {
        "images": images, "images_dropped": sum(r["images_dropped"] for r in results),
        "dropped_files": [f for r in results for f in r.get("dropped_files", [])][:50], "seconds": seconds,
        **_per_kind(results, seconds), "images_per_s": images / seconds, "mb_per_s": consumed / seconds / MB,
        "bytes_consumed": consumed,
        "bytes_read_device": total("bytes_read_device"), "bytes_read_syscall": total("bytes_read_syscall"),
        "tasks": len(results), "task_images_per_s_min": min(rates), "task_images_per_s_median": statistics.median(rates),
        "task_images_per_s_max": max(rates), "task_start_spread_s": max(r["t_start"] for r in results) - start,
        "task_resident_bytes_before": total("resident_bytes_before"),
        "task_results": [{"rank": r["rank"], "host": r.get("host"), "images": r["images"],
                          "images_dropped": r["images_dropped"], "seconds": r["seconds"],
                          "images_per_s": r["images_per_s"], "mb_per_s": r["mb_per_s"],
                          "train_au_percentage": r.get("train_au_percentage"),
                          "resident_bytes_before": r.get("resident_bytes_before"),
                          "start_s": r["t_start"] - start, "end_s": r["t_end"] - start} for r in results],
    }


def _per_kind(results: list[dict], seconds: float) -> dict:
    """The merged figures of what the tasks measured: a micro-benchmark's batches; an emulated
    accelerator's steps and AU, the cell's AU being its slowest task's (MLPerf Storage's rule)."""
    out: dict = {}
    if all("batches" in r for r in results):
        out.update(batches=sum(r["batches"] for r in results), first_batch_s=max(r["first_batch_s"] for r in results))
    if all("train_au_percentage" in r for r in results):
        out.update({k: max(r[k] for r in results) for k in ("steady_runtime_s", "data_wait_s", "compute_s", "first_step_s")},
                   train_au_percentage=min(r["train_au_percentage"] for r in results), runtime_s=seconds,
                   steps=sum(r["steps"] for r in results), step_time_s=results[0].get("step_time_s"))
    return out


def main(folder: str, rank: int) -> int:
    """A task: its shard (evicted on its own node for a cold run), its pipeline, the barrier at the start
    of its timed interval, its result."""
    import resource
    import socket

    from jobs import workloads
    from jobs.configview import View
    from jobs.data import datasets
    from jobs.execution import lifeline
    from jobs.storage import cache

    parent = os.getppid()
    local = lifeline.bind()  # a local task ends with the runner; a Slurm task with its step
    out = Path(folder)
    nonce = "unknown"
    try:
        req = json.loads((out / "request.json").read_text())
        nonce = req["nonce"]
        d = req["dataset"]
        ds = datasets.Dataset(**{k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
                                 for k, v in d.items()})
        part = shard(ds, rank, int(req["n"]))
        files = part.files  # the shard's storage files: one file per image (validated)
        resident = cache.evict(files).resident_bytes_after if req.get("cold") else cache.residency(files)[0]
        cfg = View(req["config"])
        w = workloads.get(str(cfg.workload.kind))
        stamps: dict[str, float] = {}

        class Ctx(workloads.RunContext):
            def mark(self, name: str) -> None:
                if name == "start":  # the barrier: every task's timed interval starts together
                    (out / _name("ready", nonce, rank)).touch()
                    deadline = time.monotonic() + READY_TIMEOUT_S
                    while not (out / _name("go", nonce)).exists():
                        if time.monotonic() > deadline or (local and not lifeline.parent_alive(parent)):
                            raise TaskError(f"task {rank}: no go from the runner after {READY_TIMEOUT_S:.0f} s "
                                            "or the runner ended")
                        time.sleep(0.002)
                stamps[name] = time.time()
                use = resource.getrusage(resource.RUSAGE_SELF)
                stamps[f"cpu_{name}"] = use.ru_utime + use.ru_stime

        ctx = Ctx(part, cfg, req["config"], int(req["seed"]), out, int(req["run"]), None)
        result = w.run_once(ctx)
        result.update(rank=rank, host=socket.gethostname(), resident_bytes_before=resident, t_start=stamps["start"],
                      t_end=stamps["end"], cpu_s=stamps["cpu_end"] - stamps["cpu_start"])
        (out / _name("result", nonce, rank)).write_text(json.dumps(result, default=str))
        return 0
    except BaseException as e:  # the parent names this task and its error
        import traceback

        frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        where = f"{Path(frame.filename).name}:{frame.lineno}" if frame else ""
        (out / _name("error", nonce, rank)).write_text(json.dumps({"type": type(e).__name__, "message": str(e), "where": where,
                                                                   "traceback": traceback.format_exc()}))
        (out / _name("ready", nonce, rank)).touch()
        return 1


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # a local task gets its rank as an argument; a task of a Slurm job step is told by srun
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else int(os.environ["SLURM_PROCID"])))
