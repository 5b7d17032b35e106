"""Multi-task cells (``platform.tasks_per_node > 1``, local platform): one run of the cell is N
processes on this machine, each reading its shard of the dataset (every N-th image from its rank)
through the same pipeline, all starting their timed interval together.

The runner (parent) evicts the whole set, starts the N task processes (``python -m jobs.tasks
<folder> <rank>``) and waits; each task builds its pipeline, says it is ready at the start of its
timed interval and waits for the parent's go (a barrier through files in the run's folder: no MPI);
each writes its own result. The parent merges them: aggregate images/s and MB/s = everything the
tasks consumed ÷ (the last task's end − the first task's start), with per-task min, median and max,
so a straggler shows. A task that fails fails the run, naming its rank and its error; the others
are ended, so no process outlives the cell.
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
MERGED_KEYS = ("tasks", "task_images_per_s_min", "task_images_per_s_median", "task_images_per_s_max",
               "task_start_spread_s", "task_results")  # what a multi-task run adds to the workload's keys
READY_TIMEOUT_S = 600.0  # longest a task may take to build its pipeline (TensorFlow's import included)


class TaskError(RuntimeError):
    """A task of a multi-task run failed; the message names its rank and error."""


def shard(ds, rank: int, n: int):
    """Task ``rank``'s share of ``ds``: every n-th image from its rank (``dataset.format=files``)."""
    idx = list(range(rank, len(ds.files), n))
    return dataclasses.replace(ds, files=tuple(ds.files[i] for i in idx), labels=tuple(ds.labels[i] for i in idx),
                               sizes=tuple(ds.sizes[i] for i in idx), skipped=())


def run(config: dict, ds, n: int, seed: int, run_no: int, folder: Path, timeout_s: float) -> dict:
    """One multi-task run: start ``n`` tasks, release them together, merge their results."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():  # a warm-up or an earlier try of this run in the cell's own folder
        old.unlink()
    (folder / "request.json").write_text(json.dumps({"config": config, "dataset": dataclasses.asdict(ds), "n": n,
                                                     "seed": seed, "run": run_no}))
    procs = [subprocess.Popen([sys.executable, "-m", "jobs.tasks", str(folder), str(r)]) for r in range(n)]
    try:
        _barrier(procs, folder, timeout_s)
        (folder / "go").touch()
        for p in procs:
            p.wait(timeout=max(1.0, timeout_s))
        results = [_result(folder, r, p.returncode) for r, p in enumerate(procs)]
    finally:
        for f in ("request.json", "go", *(f"ready-{r}" for r in range(n))):  # the hand-over; results stay
            (folder / f).unlink(missing_ok=True)
        for p in procs:  # a failure or a signal: no task outlives the run
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    return merge(results)


def _barrier(procs: list, folder: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + min(timeout_s, READY_TIMEOUT_S)
    while True:
        for r, p in enumerate(procs):
            if p.poll() is not None:
                _result(folder, r, p.returncode)  # raises with the task's own error
                raise TaskError(f"task {r} ended (exit status {p.returncode}) before the others were ready")
        if all((folder / f"ready-{r}").exists() for r in range(len(procs))):
            return
        if time.monotonic() > deadline:
            late = [r for r in range(len(procs)) if not (folder / f"ready-{r}").exists()]
            raise TaskError(f"tasks {late} were not ready after {min(timeout_s, READY_TIMEOUT_S):.0f} s")
        time.sleep(0.02)


def _result(folder: Path, rank: int, code: int | None) -> dict:
    err = folder / f"error-{rank}.json"
    if err.exists():
        e = json.loads(err.read_text())
        raise TaskError(f"task {rank} failed: {e['type']}: {e['message']}")
    out = folder / f"result-{rank}.json"
    if code != 0 or not out.exists():
        raise TaskError(f"task {rank} ended with exit status {code} and no result")
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
        "dropped_files": [f for r in results for f in r.get("dropped_files", [])][:50],
        "batches": sum(r.get("batches", 0) for r in results), "seconds": seconds,
        "first_batch_s": max(r.get("first_batch_s", 0.0) for r in results),
        "images_per_s": images / seconds, "mb_per_s": consumed / seconds / MB, "bytes_consumed": consumed,
        "bytes_read_device": total("bytes_read_device"), "bytes_read_syscall": total("bytes_read_syscall"),
        "tasks": len(results), "task_images_per_s_min": min(rates), "task_images_per_s_median": statistics.median(rates),
        "task_images_per_s_max": max(rates), "task_start_spread_s": max(r["t_start"] for r in results) - start,
        "task_results": [{"rank": r["rank"], "images": r["images"], "images_dropped": r["images_dropped"],
                          "seconds": r["seconds"], "images_per_s": r["images_per_s"], "mb_per_s": r["mb_per_s"],
                          "start_s": r["t_start"] - start, "end_s": r["t_end"] - start} for r in results],
    }


def main(folder: str, rank: int) -> int:
    """A task: its shard, its pipeline, the barrier at the start of its timed interval, its result."""
    from jobs import datasets, workloads
    from jobs.configview import View

    out = Path(folder)
    try:
        req = json.loads((out / "request.json").read_text())
        d = req["dataset"]
        ds = datasets.Dataset(**{k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
                                 for k, v in d.items()})
        part = shard(ds, rank, int(req["n"]))
        cfg = View(req["config"])
        w = workloads.get(str(cfg.workload.kind))
        stamps: dict[str, float] = {}

        class Ctx(workloads.RunContext):
            def mark(self, name: str) -> None:
                if name == "start":  # the barrier: every task's timed interval starts together
                    (out / f"ready-{rank}").touch()
                    while not (out / "go").exists():
                        time.sleep(0.002)
                stamps[name] = time.time()

        ctx = Ctx(part, cfg, req["config"], int(req["seed"]), out, int(req["run"]), None)
        result = w.run_once(ctx)
        result.update(rank=rank, t_start=stamps["start"], t_end=stamps["end"])
        (out / f"result-{rank}.json").write_text(json.dumps(result, default=str))
        return 0
    except BaseException as e:  # the parent names this task and its error
        (out / f"error-{rank}.json").write_text(json.dumps({"type": type(e).__name__, "message": str(e)}))
        (out / f"ready-{rank}").touch()
        return 1


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
