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

Every task writes a heartbeat (``beats-<nonce>/<rank>``: its node and a count, every ``BEAT_EVERY_S``)
from its start. A task whose count stops moving for ``platform.task_silence_s`` has stopped: its node
failed or it hangs, and the run fails naming the task and its node, without waiting for Slurm to
notice the node (minutes on most sites) or for the run's limit. A failing run writes ``abort-<nonce>``,
on which every task that can still act ends itself, then ends the step; a task that cannot (stopped,
on a dead node) is ended by Slurm with the step or its node.

Each task also reads its node's counters over its timed interval (the data device's sectors and busy
time in ``/proc/diskstats``, the node's CPU ticks): the merged run keeps them per node (``per_node``),
so a cold run is judged cold on every node, and counters of nodes that share one kernel are taken once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from jobs.execution import pernode, tfstart, watch
from jobs.execution.watch import READY_TIMEOUT_S, TaskError, file_name
from jobs.metrics import MB

log = logging.getLogger(__name__)
SUBDIR = "tasks"
# what a multi-task run adds to the workload's keys
MERGED_KEYS = (
    "tasks",
    "task_images_per_s_min",
    "task_images_per_s_median",
    "task_images_per_s_max",
    "task_start_spread_s",
    "task_resident_bytes_before",
    "task_results",
    "per_node",
)
__all__ = ["TaskError", "merge", "run", "shard", "srun_command"]


def shard(ds, rank: int, n: int):
    """Task ``rank``'s share of ``ds``: every n-th image from its rank (``dataset.format=files``)."""
    idx = list(range(rank, len(ds.files), n))
    local = {i: k for k, i in enumerate(idx)}
    # the set's groups (the local shuffle's consecutive files) keep the shard's own images, renumbered
    groups = tuple(g for g in (tuple(local[i] for i in members if i in local) for members in ds.members) if g)
    return dataclasses.replace(
        ds,
        files=tuple(ds.files[i] for i in idx),
        labels=tuple(ds.labels[i] for i in idx),
        sizes=tuple(ds.sizes[i] for i in idx),
        objects=tuple(ds.objects[i] for i in idx) if ds.objects else (),
        skipped=(),
        members=groups,
    )


def srun_command(nodes: int, per_node: int, cpus_per_task: int, folder: Path) -> list[str]:
    """The job step of a run's tasks inside the cell's Slurm allocation (``jobs.nodes.srun_step``)."""
    from jobs.nodes import srun_step

    return srun_step(
        "jobs.execution.tasks",
        str(folder),
        nodes=nodes,
        tasks=nodes * per_node,
        per_node=per_node,
        cpus_per_task=cpus_per_task,
    )


def run(ctx, where, cold: bool = False) -> dict:
    """One multi-task run (``ctx``: its ``RunContext``; ``where``: the cell's ``Placement``): start its
    tasks (local processes, or the cell's Slurm job step), release them together, merge their results.
    ``ctx.marks`` gets the usage snapshots (``jobs.observe.usage``) of the timed part: from the release to
    the last task's end, its CPU time the tasks' own over their timed intervals (their start-up is not in
    it). A task silent for ``where.silence_s`` fails the run."""
    import uuid

    from jobs import lifeline
    from jobs.observe import usage

    cell, ds, n, disk, marks = ctx.cell, ctx.ds, where.tasks, ctx.disk, ctx.marks
    folder = ctx.job_dir / SUBDIR / ctx.tag
    step, timeout_s = where.task_step(folder), where.timeout_s
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():  # a warm-up or an earlier try of this run in the cell's own folder
        watch.remove_beats(old) if old.is_dir() else old.unlink()
    # every hand-over file carries this run's nonce: a task left by an earlier, killed campaign can neither
    # be released by this run's go nor overwrite its results
    nonce = uuid.uuid4().hex[:12]
    (folder / "request.json").write_text(
        json.dumps(
            {
                "config": cell.data,
                "cell_id": cell.cell_id,
                "dataset": dataclasses.asdict(ds),
                "n": n,
                "seed": ctx.seed,
                "run": ctx.run,
                "cold": cold,
                "nonce": nonce,
            }
        )
    )
    err = folder / file_name("step", nonce)
    (folder / file_name("beats", nonce)).mkdir()
    if step:  # a Slurm job step: Slurm ends its tasks with the job; srun's own messages name a failed node
        with open(err, "wb") as f:
            procs = [subprocess.Popen(step, env=_with_store(lifeline.plain_env(), ds), stderr=f)]
    else:  # local tasks end with this process, whatever kills it; started warm (TensorFlow imported once)
        from jobs import workloads
        from jobs.execution import warm

        env = _with_store(lifeline.child_env(), ds)
        preload = warm.for_cell(workloads.get(cell.config.workload.kind), cell.config)
        procs = [warm.start("jobs.execution.tasks", [str(folder), str(r)], env, preload) for r in range(n)]
    watcher = watch.Watch(procs, n, folder, nonce, where.silence_s, err if step else None)
    try:
        deadline = time.monotonic() + timeout_s
        watcher.until(
            lambda: all((folder / file_name("ready", nonce, r)).exists() for r in range(n)),
            time.monotonic() + min(timeout_s, READY_TIMEOUT_S),
            lambda late: (
                f"tasks {watcher.named(late)} were not ready after {min(timeout_s, READY_TIMEOUT_S):.0f} s"
            ),
            waiting_for="ready",
        )
        start = usage.snapshot(disk)
        (folder / file_name("go", nonce)).touch()
        watcher.until(
            lambda: all(p.poll() is not None for p in procs),
            deadline,
            lambda late: (
                f"tasks {watcher.named(late)} had not ended after {timeout_s:.0f} s (the run's limit: "
                "platform.timeout_min) and were ended"
            ),
            waiting_for="result",
        )
        end = usage.snapshot(disk)
        watcher.check_ended()
        results = [_result(folder, r, nonce) for r in range(n)]
        if ds.store is not None:
            _fold_requests(ds.store, results)
        if marks is not None:
            marks["start"] = start
            marks["end"] = dataclasses.replace(end, cpu_s=start.cpu_s + sum(r["cpu_s"] for r in results))
    except BaseException:
        (folder / file_name("abort", nonce)).touch()  # every task that can still act ends itself
        raise
    finally:
        watch.end(procs, step is not None, watcher)
        watch.remove_beats(folder / file_name("beats", nonce))
        ready = (file_name("ready", nonce, r) for r in range(n))
        for f in ("request.json", file_name("go", nonce), file_name("abort", nonce), *ready):
            (folder / f).unlink(missing_ok=True)  # results stay
        if err.exists():  # srun's own messages, where a local task's would be: in the cell's log
            with contextlib.suppress(OSError):
                sys.stderr.write(err.read_text(errors="replace"))
            err.unlink()
    return merge(results)


def _with_store(env: dict, ds) -> dict:
    """``env`` with what each task needs to reach the cell's object store with a client of its own (in
    its environment only: the embedded server's keys, and where it runs)."""
    if ds.store is None:
        return env
    from jobs.storage.objectstore import tier

    env = {**env, **tier.task_env(ds.store)}
    return {k: v for k, v in env.items() if v is not None}


def _result(folder: Path, rank: int, nonce: str) -> dict:
    out = folder / file_name("result", nonce, rank)
    if not out.exists():
        raise TaskError(f"task {rank} ended with no result")
    return json.loads(out.read_text())


def _fold_requests(endpoint, results: list[dict]) -> None:
    """Every task's GETs (``store_requests``, taken out of its result) into the run's counters of the
    runner's store: one run's requests, latencies and requests in flight, whichever task made them."""
    from jobs.storage.objectstore import tier

    store = tier.opened(endpoint)
    for r in results:
        store.requests.add(r.pop("store_requests", None) or [])


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
        "images": images,
        "images_dropped": sum(r["images_dropped"] for r in results),
        "dropped_files": [f for r in results for f in r.get("dropped_files", [])][:50],
        "seconds": seconds,
        **_per_kind(results, seconds),
        "images_per_s": images / seconds,
        "mb_per_s": consumed / seconds / MB,
        "bytes_consumed": consumed,
        "bytes_read_device": total("bytes_read_device"),
        "bytes_read_syscall": total("bytes_read_syscall"),
        "tasks": len(results),
        "task_images_per_s_min": min(rates),
        "task_images_per_s_median": statistics.median(rates),
        "task_images_per_s_max": max(rates),
        "task_start_spread_s": max(r["t_start"] for r in results) - start,
        "task_resident_bytes_before": total("resident_bytes_before"),
        "task_results": [
            {
                "rank": r["rank"],
                "host": r.get("host"),
                "images": r["images"],
                "images_dropped": r["images_dropped"],
                "seconds": r["seconds"],
                "images_per_s": r["images_per_s"],
                "mb_per_s": r["mb_per_s"],
                "train_au_percentage": r.get("train_au_percentage"),
                "resident_bytes_before": r.get("resident_bytes_before"),
                "start_s": r["t_start"] - start,
                "end_s": r["t_end"] - start,
            }
            for r in results
        ],
        "per_node": pernode.figures(results),
    }


def _per_kind(results: list[dict], seconds: float) -> dict:
    """The merged figures of what the tasks measured: a micro-benchmark's batches; an emulated
    accelerator's steps and AU, the cell's AU being its slowest task's (MLPerf Storage's rule)."""
    out: dict = {}
    # a sharded checkpoint: MLPerf Storage's figures over every rank
    if all("shard_ranks" in r for r in results):
        from jobs.workloads import shards

        out.update(shards.merge(results))
    if all("batches" in r for r in results):
        out.update(
            batches=sum(r["batches"] for r in results), first_batch_s=max(r["first_batch_s"] for r in results)
        )
    if all("train_au_percentage" in r for r in results):
        out.update(
            {
                k: max(r[k] for r in results)
                for k in ("steady_runtime_s", "data_wait_s", "compute_s", "first_step_s")
            },
            train_au_percentage=min(r["train_au_percentage"] for r in results),
            runtime_s=seconds,
            steps=sum(r["steps"] for r in results),
            step_time_s=results[0].get("step_time_s"),
        )
    return out


def main(folder: str, rank: int) -> int:
    """A task: its heartbeat, its shard (evicted on its own node for a cold run), its pipeline, the
    barrier at the start of its timed interval, its node's counters over that interval, its result."""

    from jobs import lifeline, nodes

    parent = os.getppid()
    local = lifeline.bind()  # a local task ends with the runner; a Slurm task with its step
    out = Path(folder)
    nonce = "unknown"
    node = nodes.name()
    try:
        req = json.loads((out / "request.json").read_text())
        nonce = req["nonce"]
        watch.heartbeat(out, nonce, rank, node)

        from jobs import workloads
        from jobs.cell import Cell
        from jobs.observe import trace, usage
        from jobs.storage import cache

        part = shard(_dataset(req["dataset"]), rank, int(req["n"]))
        if part.store is not None:  # read through this node's server; its files are what a cold run evicts
            from jobs.storage.objectstore import tier

            part = tier.on_this_node(part)
        # the shard's storage files: one file per image (validated); on an object store, its server's
        files = part.storage_files
        resident = cache.evict(files).resident_bytes_after if req.get("cold") else cache.residency(files)[0]
        # the data's device, on this node
        disk = trace.device_of(os.path.dirname(files[0])) if files else None
        cell = Cell.from_data(req["config"], cell_id=req["cell_id"])  # the runner's, rebuilt from its data
        w = workloads.get(cell.config.workload.kind)
        # start-up lines: the cell's log (<cell>/tasks/<run>)
        tfstart.for_workload(w, cell.config, out.parent.parent / tfstart.LOG)
        stamps: dict[str, float] = {}
        counters: dict[str, usage.Snapshot] = {}

        def wait_for(done, what: str) -> None:  # the runner's go, or the other tasks at a barrier
            _wait_for(done, f"task {rank}: {what}", lambda: local and not lifeline.parent_alive(parent))

        class Ctx(workloads.RunContext):
            def mark(self, name: str) -> None:
                if name == "start":  # the barrier: every task's timed interval starts together
                    (out / file_name("ready", nonce, rank)).touch()
                    wait_for((out / file_name("go", nonce)).exists, "no go from the runner")
                stamps[name] = time.time()
                counters[name] = usage.snapshot(disk)
                # the task's CPU with its children's (a DataLoader's workers, once ended), as a run in one
                # process counts it (usage.snapshot)
                stamps[f"cpu_{name}"] = counters[name].cpu_s

            # a mark per task in the run's beats folder; all of them: go on
            def barrier(self, name: str) -> None:
                beats = out / file_name("beats", nonce)
                (beats / f"{name}.{rank}").touch()
                wait_for(
                    lambda: all((beats / f"{name}.{r}").exists() for r in range(self.ranks)),
                    f"the other tasks had not reached '{name}'",
                )

        ctx = Ctx(
            part,
            cell,
            int(req["seed"]),
            out,
            int(req["run"]),
            None,
            rank=rank,
            ranks=int(req["n"]),
            run_id=nonce,
        )
        result = _with_node(w.run_once(ctx), stamps, counters, disk)
        result.update(rank=rank, host=node, resident_bytes_before=resident)
        if part.store is not None:  # its GETs, for the run's request figures (the runner's store adds them)
            from jobs.storage.objectstore import tier

            result["store_requests"] = tier.opened(part.store).requests.exported()
        (out / file_name("result", nonce, rank)).write_text(json.dumps(result, default=str))
        return 0
    except BaseException as e:  # the parent names this task, its node and its error
        _error(out, nonce, rank, node, e)
        return 1


def _with_node(result: dict, stamps: dict, counters: dict, disk: str | None) -> dict:
    """A task's result with its timed interval and its node's counters over it (kernel, data device, CPU)."""
    from jobs import nodes

    a, b = counters["start"], counters["end"]
    result.update(
        kernel=nodes.kernel(),
        t_start=stamps["start"],
        t_end=stamps["end"],
        cpu_s=stamps["cpu_end"] - stamps["cpu_start"],
        node_disk=disk,
        node_disk_start=a.disk,
        node_disk_end=b.disk,
        node_cpu_start=a.machine,
        node_cpu_end=b.machine,
    )
    return result


def _dataset(d: dict):
    """The run's dataset from its JSON form (lists back to tuples)."""
    from jobs.data import datasets

    fields = {
        k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
        for k, v in d.items()
    }
    if isinstance(fields.get("store"), dict):  # an object store's endpoint
        from jobs.storage.objectstore.endpoint import Endpoint

        fields["store"] = Endpoint(**fields["store"])
    return datasets.Dataset(**fields)


def _wait_for(done, what: str, orphaned) -> None:
    """Wait until ``done()``; TaskError after READY_TIMEOUT_S, or at once when ``orphaned()`` (the
    runner ended)."""
    from jobs import lifeline

    def failed() -> TaskError:
        return TaskError(f"{what} after {READY_TIMEOUT_S:.0f} s, or the runner ended")

    lifeline.wait_ready(
        done,
        died=lambda: failed() if orphaned() else None,
        late=failed,
        timeout_s=READY_TIMEOUT_S,
        interval_s=0.002,
    )


def _error(out: Path, nonce: str, rank: int, node: str, e: BaseException) -> None:
    """The task's error for the runner (where it was raised, on which node); then ready, so no one waits."""
    import traceback

    frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    where = f"{Path(frame.filename).name}:{frame.lineno}" if frame else ""
    error = {
        "type": type(e).__name__,
        "message": str(e),
        "where": where,
        "host": node,
        "traceback": "".join(traceback.format_exception(e)),
    }
    (out / file_name("error", nonce, rank)).write_text(json.dumps(error))
    (out / file_name("ready", nonce, rank)).touch()


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # a local task gets its rank as an argument; a task of a Slurm job step is told by srun
    rank = int(sys.argv[2]) if len(sys.argv) > 2 else int(os.environ["SLURM_PROCID"])
    from jobs.lifeline import exit_as_python

    exit_as_python(lambda: sys.exit(main(sys.argv[1], rank)))
