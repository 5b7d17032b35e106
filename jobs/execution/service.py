"""The tf.data service for a cell (``input.service=true``): a dispatcher and ``input.workers`` worker
processes on this machine, started for the cell and ended with it; the measured consumer reads its
pipeline through the service in ``distributed_epoch`` mode
(``jobs.frameworks.tensorflow.pipeline.through_service``: the dispatcher hands the file indices out to
the workers, which read and decode; every image is read exactly once per pass).

The workers do the reading, so the run's device and syscall bytes are the consumer's plus every
worker's (``/proc/<pid>/io``), and each worker's own rate is recorded.

On Slurm (``platform=slurm``) the workers are tasks of the cell's job: one job step, ``srun --overlap
--ntasks=<workers>`` over the job's nodes, each worker's number from ``SLURM_PROCID``, addressed by
its node's address as Slurm knows it (``jobs.nodes``); the dispatcher runs beside the cell's
controller. A worker on another node cannot be
read through ``/proc``, so every worker writes its own counters into the service folder
(``worker-<k>.io``, every ``IO_EVERY_S``) and the runner reads those.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SUBDIR = "service"
MODULE = "jobs.execution.service"  # python -m MODULE dispatcher|worker ...
START_TIMEOUT_S = 300.0
IO_EVERY_S = 0.05  # how often a worker of a Slurm step writes its /proc/self/io counters


class ServiceError(RuntimeError):
    """The dispatcher or a worker did not start, or ended while the cell ran."""


@dataclass
class Service:
    address: str  # grpc://host:port of the dispatcher
    dispatcher: subprocess.Popen  # or jobs.execution.warm.Started, which answers the same calls
    workers: list = field(default_factory=list)  # worker processes (one srun process for a Slurm step)
    count: int = 0  # workers
    folder: Path | None = None  # the hand-over folder; set when the workers report their own counters
    nodes: list = field(default_factory=list)  # "<node> <address>" of each worker of a Slurm step

    def check(self) -> None:
        """Raise when the dispatcher or a worker has ended."""
        if self.folder is not None:  # a Slurm step: srun ends when a worker does (--kill-on-bad-exit)
            named = [("dispatcher", self.dispatcher), ("workers' Slurm step", self.workers[0])]
        else:
            named = [
                ("dispatcher", self.dispatcher),
                *((f"worker {k}", w) for k, w in enumerate(self.workers)),
            ]
        for name, p in named:
            if p.poll() is not None:
                dead = (
                    _dead_task(self.folder / STEP_ERR) if p is not self.dispatcher and self.folder else None
                )
                if dead:
                    raise ServiceError(
                        f"tf.data service: the {dead}; srun ended the workers' step (exit status "
                        f"{p.returncode})"
                    )
                raise ServiceError(f"tf.data service: the {name} ended (exit status {p.returncode})")

    def io(self) -> list[tuple[int, int]]:
        """(read_bytes, rchar) of every worker, now."""
        if self.folder is None:
            return io(self.workers)
        time.sleep(3 * IO_EVERY_S)  # the workers' last writes: between runs they read nothing
        out = []
        for k in range(self.count):
            try:
                vals = json.loads((self.folder / f"worker-{k}.io").read_text())
                out.append((int(vals["read_bytes"]), int(vals["rchar"])))
            except (OSError, ValueError, KeyError):
                out.append((0, 0))
        return out

    def counters(self) -> list[tuple[int, int]]:
        """(read_bytes, rchar) of every worker now, once the service is checked to be whole."""
        self.check()
        return self.io()

    def add_counters(self, before: list, result: dict) -> None:
        """The workers read the data: their bytes since ``before`` join the consumer's in ``result``, and
        each worker's rate is kept."""
        from jobs.metrics import MB

        after = self.counters()
        dev = [a[0] - b[0] for a, b in zip(after, before)]
        syscall = [a[1] - b[1] for a, b in zip(after, before)]
        if result.get("bytes_read_device") is not None:
            result["bytes_read_device"] += sum(dev)
        if result.get("bytes_read_syscall") is not None:
            result["bytes_read_syscall"] += sum(syscall)
        rates = [b / result["seconds"] / MB for b in syscall]
        result.update(
            service_workers=self.count,
            worker_mb_s=rates,
            worker_mb_s_min=min(rates),
            worker_mb_s_max=max(rates),
            service_dispatcher=self.address,
        )
        if self.nodes:  # which node each worker ran on, and the address the others reached it by
            result["worker_nodes"] = list(self.nodes)


STEP_ERR = "step.err"  # the workers' Slurm step's stderr: srun names the task that ended first


def _dead_task(err: Path) -> str | None:
    """'worker <k> ended on <node> (<how>)' from srun's first "srun: error: <node>: task <k>: <how>" line."""
    from jobs import nodes

    failed = nodes.srun_failure(err)
    return f"worker {failed[1]} ended on {failed[0]} ({failed[2]})" if failed else None


def srun_workers(workers: int, nodes: int, cpus_per_task: int, folder: Path, dispatcher: str) -> list[str]:
    """The job step of a cell's service workers inside its Slurm allocation."""
    from jobs.nodes import srun_step

    return srun_step(
        MODULE, "worker", str(folder), dispatcher, nodes=nodes, tasks=workers, cpus_per_task=cpus_per_task
    )


def _wait(path: Path, procs: list, what: str) -> None:
    from jobs import lifeline

    def died() -> Exception | None:
        ended = next((p for p in procs if p.poll() is not None), None)
        if ended is None:
            return None
        return ServiceError(f"tf.data service: the {what} ended at start-up (exit status {ended.returncode})")

    lifeline.wait_ready(
        path.exists,
        died=died,
        late=lambda: ServiceError(f"tf.data service: the {what} did not start in {START_TIMEOUT_S:.0f} s"),
        timeout_s=START_TIMEOUT_S,
    )


@contextlib.contextmanager
def running(workers: int, folder: Path, slurm: tuple[int, int] | None = None):
    """A dispatcher and ``workers`` workers for the block; all of them ended after it, whatever happened.
    ``slurm``: (nodes, CPUs per task) to start the workers as a job step of the cell's Slurm job."""
    from jobs import nodes

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    procs: list = []  # subprocess.Popen or jobs.execution.warm.Started
    host = nodes.address() if slurm else "localhost"  # on Slurm: the address slurmctld reaches this node by
    try:
        from jobs import lifeline

        # the dispatcher and local workers end with this process, whatever kills it; a Slurm step's
        # workers end with the step, which Slurm ends with the job
        from jobs.execution import warm

        # started warm: TensorFlow imported once, not per process (tf.data alone: no Keras)
        preload = (*warm.COMMON, warm.TENSORFLOW_DATA)
        d = warm.start(MODULE, ["dispatcher", str(folder)], lifeline.child_env(), preload)
        procs.append(d)
        _wait(folder / "dispatcher.port", procs, "dispatcher")
        port = (folder / "dispatcher.port").read_text().strip()
        svc = Service(f"grpc://{host}:{port}", d, count=workers, folder=folder if slurm else None)
        if slurm:
            with open(folder / STEP_ERR, "wb") as err:  # passed on to the cell's log when the step ends
                step = subprocess.Popen(
                    srun_workers(workers, slurm[0], slurm[1], folder, f"{host}:{port}"),
                    stderr=err,
                    env=lifeline.plain_env(),
                )
            procs.append(step)
            svc.workers.append(step)
        for k in range(workers if not slurm else 0):
            w = warm.start(
                MODULE, ["worker", str(folder), f"localhost:{port}", str(k)], lifeline.child_env(), preload
            )
            procs.append(w)
            svc.workers.append(w)
        for k in range(workers):
            _wait(folder / f"worker-{k}.ready", procs, f"worker {k}")
        if slurm:
            svc.nodes = [(folder / f"worker-{k}.node").read_text().strip() for k in range(workers)]
        with lifeline.own(*(p.pid for p in procs)):  # the service's CPU is the cell's (other_cpu_share)
            yield svc
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        with contextlib.suppress(OSError):  # the workers' own messages, where a local worker's would be
            sys.stderr.write((folder / STEP_ERR).read_text(errors="replace"))
        # the start-up hand-over (port, ready marks, counters): nothing of it is a result; a worker of a
        # Slurm step may write its counters once more while it ends
        from jobs import owned

        owned.remove_handover(folder)


def io(procs: list) -> list[tuple[int, int]]:
    """(read_bytes, rchar) of each process from /proc/<pid>/io ((0, 0) when it cannot be read)."""
    out = []
    for p in procs:
        vals = {}
        try:
            with open(f"/proc/{p.pid}/io") as f:
                for line in f:
                    k, _, v = line.partition(":")
                    vals[k] = int(v)
        except OSError:
            pass
        out.append((vals.get("read_bytes", 0), vals.get("rchar", 0)))
    return out


def watched(run_once, ctx, svc, every_s: float = 0.2, unwind_s: float = 30.0) -> dict:
    """A run through the tf.data service, watched: the consumer reads in a thread while this one checks
    the service every ``every_s``. A worker that dies mid-run leaves the consumer waiting for the
    elements it held (distributed_epoch), for ever; the check raises ServiceError naming the worker
    instead. Whatever ends the watch (that error, Ctrl-C), the consumer's reads are cancelled first
    (``jobs.frameworks.tensorflow.cancel``) and it is given ``unwind_s`` to end, so no thread is left
    heart-beating to a dispatcher that has gone."""
    import threading

    from jobs.frameworks.tensorflow import cancel

    box: dict = {}
    started = threading.Event()

    def consume() -> None:
        try:
            with cancel.cancellable() as box["cancel"]:
                started.set()
                box["result"] = run_once(ctx)
        except BaseException as e:  # noqa: BLE001 - handed to the watching thread, which raises it
            box["error"] = e
        finally:
            started.set()

    t = threading.Thread(target=consume, name="service-consumer", daemon=True)
    t.start()
    try:
        started.wait()
        while t.is_alive():
            t.join(every_s)
            if t.is_alive():
                svc.check()
    except BaseException:
        _unwind(t, box, unwind_s)
        raise
    if "error" in box:
        raise box["error"]
    return box["result"]


def _unwind(consumer, box: dict, timeout_s: float) -> None:
    """The consumer's blocked read cancelled and the thread ended; what it held (its iterator, reached
    through the error's frames) released now, while the service still answers."""
    import gc

    if "cancel" in box:
        box["cancel"]()
    consumer.join(timeout_s)
    box.clear()
    gc.collect()


def main(role: str, folder: str, *args: str) -> int:
    from jobs import lifeline

    lifeline.bind()  # before TensorFlow's import: a dispatcher or worker never outlives its cell's runner
    from jobs.execution import tfstart

    tfstart.import_quietly(Path(folder).parent / tfstart.LOG, keras=False)  # the cell's log (<cell>/service)
    import tensorflow as tf

    service = tf.data.experimental.service
    if role == "dispatcher":
        server = service.DispatchServer(service.DispatcherConfig(port=0))
        port = server.target.rsplit(":", 1)[1]
        _mark(Path(folder) / "dispatcher.port", port)
    else:
        address, *k = args
        if k:  # a local worker: its number given, read through /proc by the runner
            server = service.WorkerServer(service.WorkerConfig(dispatcher_address=address))
            _mark(Path(folder) / f"worker-{k[0]}.ready", str(os.getpid()))
        else:  # a task of a Slurm step: its number from srun, its address its node's, its counters in files
            import threading

            from jobs import nodes

            n = int(os.environ["SLURM_PROCID"])
            server = service.WorkerServer(
                service.WorkerConfig(dispatcher_address=address, worker_address=f"{nodes.address()}:%port%")
            )
            _mark(Path(folder) / f"worker-{n}.node", f"{nodes.name()} {nodes.address()}")
            threading.Thread(target=_report_io, args=(Path(folder) / f"worker-{n}.io",), daemon=True).start()
            _mark(Path(folder) / f"worker-{n}.ready", str(os.getpid()))
    server.join()
    return 0


def _mark(path: Path, text: str) -> None:
    """Write a start-up mark whole: the runner waits for its name, so the name appears only with its text."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    part.rename(path)


def _report_io(path: Path) -> None:
    """Write this process's /proc/self/io counters to ``path`` every IO_EVERY_S (atomically)."""
    tmp = path.with_suffix(".io.part")
    while True:
        vals = {}
        with open("/proc/self/io") as f:
            for line in f:
                key, _, v = line.partition(":")
                vals[key] = int(v)
        tmp.write_text(json.dumps({"read_bytes": vals.get("read_bytes", 0), "rchar": vals.get("rchar", 0)}))
        tmp.replace(path)
        time.sleep(IO_EVERY_S)


if __name__ == "__main__":
    from jobs.lifeline import exit_as_python

    exit_as_python(lambda: sys.exit(main(*sys.argv[1:])))
