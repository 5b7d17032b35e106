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

from jobs.metrics import MB

log = logging.getLogger(__name__)
SUBDIR = "tasks"
# what a multi-task run adds to the workload's keys
MERGED_KEYS = ("tasks", "task_images_per_s_min", "task_images_per_s_median", "task_images_per_s_max",
               "task_start_spread_s", "task_resident_bytes_before", "task_results", "per_node")
READY_TIMEOUT_S = 600.0  # longest a task may take to build its pipeline (TensorFlow's import included)
BEAT_EVERY_S = 0.5  # how often a task writes its heartbeat
SILENCE_S = 60.0  # platform.task_silence_s when a caller gives none
CHECK_EVERY_S = 0.25  # how often a waiting run looks at its tasks' errors and heartbeats


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
        step: list[str] | None = None, marks: dict | None = None, disk: str | None = None,
        silence_s: float = SILENCE_S) -> dict:
    """One multi-task run: start ``n`` tasks (local processes, or the Slurm job step ``step``), release
    them together, merge their results. ``marks`` gets the usage snapshots (``jobs.observe.usage``, device
    ``disk``) of the timed part: from the release to the last task's end, its CPU time the tasks' own
    over their timed intervals (their start-up is not in it). A task silent for ``silence_s`` fails the run."""
    import uuid

    from jobs.execution import lifeline
    from jobs.observe import usage

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():  # a warm-up or an earlier try of this run in the cell's own folder
        _remove(old) if old.is_dir() else old.unlink()
    # every hand-over file carries this run's nonce: a task left by an earlier, killed campaign can neither
    # be released by this run's go nor overwrite its results
    nonce = uuid.uuid4().hex[:12]
    (folder / "request.json").write_text(json.dumps({"config": config, "dataset": dataclasses.asdict(ds), "n": n,
                                                     "seed": seed, "run": run_no, "cold": cold, "nonce": nonce}))
    err = folder / _name("step", nonce)
    (folder / _name("beats", nonce)).mkdir()
    if step:  # a Slurm job step: Slurm ends its tasks with the job; srun's own messages name a failed node
        with open(err, "wb") as f:
            procs = [subprocess.Popen(step, env=lifeline.plain_env(), stderr=f)]
    else:  # local tasks end with this process, whatever kills it
        procs = [subprocess.Popen([sys.executable, "-m", "jobs.execution.tasks", str(folder), str(r)], env=lifeline.child_env())
                 for r in range(n)]
    watch = _Watch(procs, n, folder, nonce, silence_s, err if step else None)
    try:
        deadline = time.monotonic() + timeout_s
        watch.until(lambda: all((folder / _name("ready", nonce, r)).exists() for r in range(n)),
                    time.monotonic() + min(timeout_s, READY_TIMEOUT_S),
                    lambda late: f"tasks {watch.named(late)} were not ready after {min(timeout_s, READY_TIMEOUT_S):.0f} s",
                    waiting_for="ready")
        start = usage.snapshot(disk)
        (folder / _name("go", nonce)).touch()
        watch.until(lambda: all(p.poll() is not None for p in procs), deadline,
                    lambda late: f"tasks {watch.named(late)} had not ended after {timeout_s:.0f} s (the run's limit: "
                                 "platform.timeout_min) and were ended", waiting_for="result")
        end = usage.snapshot(disk)
        watch.check_ended()
        results = [_result(folder, r, nonce) for r in range(n)]
        if marks is not None:
            marks["start"] = start
            marks["end"] = dataclasses.replace(end, cpu_s=start.cpu_s + sum(r["cpu_s"] for r in results))
    except BaseException:
        (folder / _name("abort", nonce)).touch()  # every task that can still act ends itself
        raise
    finally:
        _end(procs, step is not None, watch)
        _remove(folder / _name("beats", nonce))
        for f in ("request.json", _name("go", nonce), _name("abort", nonce), *(_name("ready", nonce, r) for r in range(n))):
            (folder / f).unlink(missing_ok=True)  # results stay
        if err.exists():  # srun's own messages, where a local task's would be: in the cell's log
            with contextlib.suppress(OSError):
                sys.stderr.write(err.read_text(errors="replace"))
            err.unlink()
    return merge(results)


def _remove(beats: Path) -> None:
    """The run's beats folder, gone (a task still ending may write a last beat while it goes)."""
    for _ in range(50):
        try:
            for f in beats.iterdir():
                f.unlink(missing_ok=True)
            beats.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


def _end(procs: list, slurm: bool, watch: _Watch) -> None:
    """No task outlives the run. A Slurm step is cancelled through slurmctld first (SIGKILL to every task it
    can reach, a stopped one included), then srun is ended; local tasks are ended directly."""
    if all(p.poll() is not None for p in procs):
        return
    if slurm and watch.step_id:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(["scancel", "--signal=KILL", watch.step_id], capture_output=True, timeout=30)
    for p in procs:
        if p.poll() is None:
            p.terminate()  # srun passes SIGTERM on to its tasks
    grace = time.monotonic() + (10 if slurm else 30)
    for p in procs:
        try:
            p.wait(max(0.1, grace - time.monotonic()))
        except subprocess.TimeoutExpired:  # srun waiting on a node that is gone
            p.kill()
            p.wait()


class _Watch:
    """Watches a run's tasks while it waits: a task that failed (its own error, or srun's word), ended
    with no result, or fell silent (its heartbeat stopped) raises TaskError naming its rank and node."""

    def __init__(self, procs: list, n: int, folder: Path, nonce: str, silence_s: float, err: Path | None):
        self.procs, self.n, self.folder, self.nonce, self.silence_s, self.err = procs, n, folder, nonce, silence_s, err
        self.t0 = time.monotonic()
        self.beats: dict[int, tuple[str, float]] = {}  # rank -> (last beat seen, when it changed; monotonic)
        self.hosts: dict[int, str] = {}
        self.step_id: str | None = None  # <job>.<step> of a Slurm step, once a task has said

    def named(self, ranks) -> str:
        """``[1, 3] (on n2)``: ranks, with the nodes they ran on where known."""
        hosts = sorted({self.hosts[r] for r in ranks if r in self.hosts})
        return f"{list(ranks)}" + (f" (on {', '.join(hosts)})" if hosts else "")

    def until(self, done, deadline: float, late_message, waiting_for: str) -> None:
        """Wait until ``done()``, checking the tasks every CHECK_EVERY_S; before the barrier (waiting for
        ``ready``) a task that ended at all has failed."""
        checked = 0.0
        while not done():
            if time.monotonic() - checked >= CHECK_EVERY_S:
                self.check(before_ready=waiting_for == "ready")
                checked = time.monotonic()
            if time.monotonic() > deadline:
                self.check_errors()  # a task's own error first
                late = [r for r in range(self.n) if not (self.folder / _name(waiting_for, self.nonce, r)).exists()]
                raise TaskError(late_message(late))
            time.sleep(0.02)

    def check(self, before_ready: bool = False) -> None:
        self.check_errors()  # a task that failed with its own error fails the run at once
        codes = [p.poll() for p in self.procs]
        if any(c not in (None, 0) for c in codes):
            self.check_ended()
        if before_ready and any(c is not None for c in codes):
            self.check_ended()
            raise TaskError(f"the tasks ended (exit status {codes}) before all were ready")
        self._beats()

    def _beats(self) -> None:
        now = time.monotonic()
        for r in range(self.n):
            if (self.folder / _name("result", self.nonce, r)).exists():
                continue  # done: its beat stops
            try:
                text = (self.folder / _name("beats", self.nonce) / str(r)).read_text()
                host, count, step_id = text.split()
            except (OSError, ValueError):
                host = count = step_id = None
            if count is not None:
                self.hosts[r] = host
                if step_id != "-":
                    self.step_id = step_id
                if self.beats.get(r, (None,))[0] != count:
                    self.beats[r] = (count, now)
            last = self.beats.get(r, (None, self.t0))[1]
            if now - last > self.silence_s:
                where = f" on {self.hosts[r]}" if r in self.hosts else ""
                said = ""
                if r in self.hosts and self.err is not None:
                    from jobs.execution import nodes

                    state = nodes.slurm_state(self.hosts[r])
                    said = f"; Slurm has {self.hosts[r]} as {state}" if state else ""
                what = "wrote no heartbeat" if r not in self.beats else "stopped its heartbeat"
                raise TaskError(f"task {r}{where} {what} for {self.silence_s:.0f} s (platform.task_silence_s): its node "
                                f"failed or the task hangs{said}")

    def check_errors(self) -> None:
        """Raise TaskError naming the first task that failed with its own error."""
        errors = sorted((int(f.stem.rsplit("-", 1)[1]), f) for f in self.folder.glob(_name("error", self.nonce, "*")))
        if errors:
            rank, f = errors[0]
            e = json.loads(f.read_text())
            where = f" (at {e['where']})" if e.get("where") else ""
            on = f" on {e['host']}" if e.get("host") else ""
            raise TaskError(f"task {rank}{on} failed: {e['type']}: {e['message']}{where}")

    def check_ended(self) -> None:
        """Raise TaskError naming the first task that failed (its own error when it wrote one; else the
        node srun names; else its exit status)."""
        self.check_errors()
        if self.err is not None and self.procs[0].poll() not in (None, 0):
            from jobs.execution import nodes

            failed = nodes.srun_failure(self.err)
            if failed:
                raise TaskError(f"task {failed[1]} on {failed[0]} ended: {failed[2]} (srun ended the run's step, "
                                f"exit status {self.procs[0].returncode})")
        for r in range(self.n):
            code = self.procs[r].returncode if len(self.procs) == self.n else self.procs[0].returncode
            if code is not None and (code != 0 or not (self.folder / _name("result", self.nonce, r)).exists()):
                raise TaskError(f"task {self.named([r])} ended with exit status {code} and no result")


def _name(kind: str, nonce: str, rank: int | str | None = None) -> str:
    """A hand-over file of run ``nonce``: go-<nonce>, ready-<nonce>-<rank>, result-<nonce>-<rank>.json,
    error-..., abort-<nonce>, step-<nonce>.err (srun's stderr), beats-<nonce>/<rank> (the heartbeats)."""
    base = f"{kind}-{nonce}" + ("" if rank is None else f"-{rank}")
    if kind == "step":
        return base + ".err"
    return base + ".json" if kind in ("result", "error") else base


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
        "per_node": per_node(results, seconds),
    }


def per_node(results: list[dict], seconds: float) -> list[dict]:
    """The run's figures per node, in node order: its tasks' images, bytes consumed and read (each task's
    own process counters, summed), and its data device's counters over the node's timed window (from its
    first task's start to its last task's end, ``/proc/diskstats``) with the node's CPU busy share. Nodes
    on one kernel share its counters: they are taken once, on the first such node, and the others say
    which node holds them (``device_counted_on``)."""
    from jobs.observe.usage import SECTOR

    hosts: dict[str, list[dict]] = {}
    for r in results:
        hosts.setdefault(r.get("host") or "?", []).append(r)
    kernels: dict[str, list[dict]] = {}
    for r in results:
        kernels.setdefault(r.get("kernel") or r.get("host") or "?", []).append(r)
    counted_on = {k: min(r.get("host") or "?" for r in rs) for k, rs in kernels.items()}

    def span(rs: list[dict], key: str, i: int) -> int | None:
        starts = [r.get(f"{key}_start") for r in rs]
        ends = [r.get(f"{key}_end") for r in rs]
        if any(v is None for v in starts + ends):
            return None
        return max(e[i] for e in ends) - min(s_[i] for s_ in starts)

    out = []
    for host in sorted(hosts):
        rs = hosts[host]
        kernel = rs[0].get("kernel") or host
        mine = counted_on[kernel] == host
        krs = kernels[kernel]
        window = max(max(r["t_end"] for r in krs) - min(r["t_start"] for r in krs), 1e-9)
        sectors, busy_ms = span(krs, "node_disk", 1), span(krs, "node_disk", 2)
        busy_ticks, all_ticks = span(krs, "node_cpu", 0), span(krs, "node_cpu", 1)

        def total(key, rs=rs):
            vals = [r.get(key) for r in rs]
            return None if any(v is None for v in vals) else sum(vals)

        out.append({
            "host": host, "tasks": len(rs), "ranks": sorted(r["rank"] for r in rs), "images": sum(r["images"] for r in rs),
            "images_per_s": sum(r["images"] for r in rs) / seconds, "bytes_consumed": sum(r["bytes_consumed"] for r in rs),
            "bytes_read_device": total("bytes_read_device"), "bytes_read_syscall": total("bytes_read_syscall"),
            "disk": rs[0].get("node_disk"),
            "device_read_bytes": sectors * SECTOR if mine and sectors is not None else None,
            "device_busy": min(1.0, busy_ms / 1000 / window) if mine and busy_ms is not None else None,
            "machine_cpu_busy": busy_ticks / all_ticks if mine and busy_ticks is not None and all_ticks else None,
            "device_counted_on": counted_on[kernel],
        })
    return out


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


def _heartbeat(out: Path, nonce: str, rank: int, node: str) -> None:
    """Every BEAT_EVERY_S: write this task's node, a count and its Slurm step (``beats-<nonce>/<rank>``);
    end the process at once when the runner has given up on the run (``abort-<nonce>``)."""
    import threading

    step = (f"{os.environ['SLURM_JOB_ID']}.{os.environ['SLURM_STEP_ID']}"
            if os.environ.get("SLURM_JOB_ID") and os.environ.get("SLURM_STEP_ID") else "-")
    # in the run's beats folder, which the runner makes and removes: a task that outlives its run writes nothing
    beats, abort = out / _name("beats", nonce), out / _name("abort", nonce)
    beat, part = beats / str(rank), beats / f".{rank}"

    def loop() -> None:
        count = 0
        while True:
            if abort.exists():
                os._exit(3)
            count += 1
            with contextlib.suppress(OSError):
                part.write_text(f"{node} {count} {step}")
                part.replace(beat)
            time.sleep(BEAT_EVERY_S)

    threading.Thread(target=loop, name="task-heartbeat", daemon=True).start()


def main(folder: str, rank: int) -> int:
    """A task: its heartbeat, its shard (evicted on its own node for a cold run), its pipeline, the
    barrier at the start of its timed interval, its node's counters over that interval, its result."""
    import resource

    from jobs.execution import lifeline, nodes

    parent = os.getppid()
    local = lifeline.bind()  # a local task ends with the runner; a Slurm task with its step
    out = Path(folder)
    nonce = "unknown"
    node = nodes.name()
    try:
        req = json.loads((out / "request.json").read_text())
        nonce = req["nonce"]
        _heartbeat(out, nonce, rank, node)

        from jobs import workloads
        from jobs.configview import View
        from jobs.data import datasets
        from jobs.observe import trace, usage
        from jobs.storage import cache

        d = req["dataset"]
        ds = datasets.Dataset(**{k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
                                 for k, v in d.items()})
        part = shard(ds, rank, int(req["n"]))
        files = part.files  # the shard's storage files: one file per image (validated)
        resident = cache.evict(files).resident_bytes_after if req.get("cold") else cache.residency(files)[0]
        disk = trace.device_of(os.path.dirname(files[0])) if files else None  # the data's device, on this node
        cfg = View(req["config"])
        w = workloads.get(str(cfg.workload.kind))
        stamps: dict[str, float] = {}
        counters: dict[str, usage.Snapshot] = {}

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
                if name in ("start", "end"):
                    counters[name] = usage.snapshot(disk)

        ctx = Ctx(part, cfg, req["config"], int(req["seed"]), out, int(req["run"]), None)
        result = w.run_once(ctx)
        a, b = counters["start"], counters["end"]
        result.update(rank=rank, host=node, kernel=nodes.kernel(), resident_bytes_before=resident,
                      t_start=stamps["start"], t_end=stamps["end"], cpu_s=stamps["cpu_end"] - stamps["cpu_start"],
                      node_disk=disk, node_disk_start=a.disk, node_disk_end=b.disk, node_cpu_start=a.machine,
                      node_cpu_end=b.machine)
        (out / _name("result", nonce, rank)).write_text(json.dumps(result, default=str))
        return 0
    except BaseException as e:  # the parent names this task, its node and its error
        import traceback

        frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        where = f"{Path(frame.filename).name}:{frame.lineno}" if frame else ""
        (out / _name("error", nonce, rank)).write_text(json.dumps({"type": type(e).__name__, "message": str(e), "where": where,
                                                                   "host": node, "traceback": traceback.format_exc()}))
        (out / _name("ready", nonce, rank)).touch()
        return 1


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # a local task gets its rank as an argument; a task of a Slurm job step is told by srun
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else int(os.environ["SLURM_PROCID"])))
