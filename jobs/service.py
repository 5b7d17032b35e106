"""The tf.data service for a cell (``input.service=true``): a dispatcher and ``input.workers`` worker
processes on this machine, started for the cell and ended with it; the measured consumer reads its
pipeline through ``tf.data.experimental.service.distribute`` in ``distributed_epoch`` mode (the
dispatcher hands the file indices out to the workers, which read and decode; every image is read
exactly once per pass).

The workers do the reading, so the run's device and syscall bytes are the consumer's plus every
worker's (``/proc/<pid>/io``), and each worker's own rate is recorded.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SUBDIR = "service"
MODE = "distributed_epoch"
START_TIMEOUT_S = 300.0


class ServiceError(RuntimeError):
    """The dispatcher or a worker did not start, or ended while the cell ran."""


@dataclass
class Service:
    address: str  # grpc://host:port of the dispatcher
    dispatcher: subprocess.Popen
    workers: list = field(default_factory=list)  # worker processes

    def check(self) -> None:
        """Raise when the dispatcher or a worker has ended."""
        for name, p in [("dispatcher", self.dispatcher), *((f"worker {k}", w) for k, w in enumerate(self.workers))]:
            if p.poll() is not None:
                raise ServiceError(f"tf.data service: the {name} ended (exit status {p.returncode})")


def _wait(path: Path, procs: list, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not path.exists():
        for p in procs:
            if p.poll() is not None:
                raise ServiceError(f"tf.data service: the {what} ended at start-up (exit status {p.returncode})")
        if time.monotonic() > deadline:
            raise ServiceError(f"tf.data service: the {what} did not start in {START_TIMEOUT_S:.0f} s")
        time.sleep(0.05)


@contextlib.contextmanager
def running(workers: int, folder: Path):
    """A dispatcher and ``workers`` workers for the block; all of them ended after it, whatever happened."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    procs: list[subprocess.Popen] = []
    try:
        d = subprocess.Popen([sys.executable, "-m", "jobs.service", "dispatcher", str(folder)])
        procs.append(d)
        _wait(folder / "dispatcher.port", procs, "dispatcher")
        port = (folder / "dispatcher.port").read_text().strip()
        svc = Service(f"grpc://localhost:{port}", d)
        for k in range(workers):
            w = subprocess.Popen([sys.executable, "-m", "jobs.service", "worker", str(folder), f"localhost:{port}", str(k)])
            procs.append(w)
            svc.workers.append(w)
        for k in range(workers):
            _wait(folder / f"worker-{k}.ready", procs, f"worker {k}")
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
        for f in folder.iterdir():  # the start-up hand-over (port, ready marks): nothing of it is a result
            f.unlink()
        folder.rmdir()


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


def distribute(dataset, address: str):
    """``dataset`` read through the service at ``address`` (every element once per pass)."""
    import tensorflow as tf

    return dataset.apply(tf.data.experimental.service.distribute(processing_mode=MODE, service=address))


def main(role: str, folder: str, *args: str) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    service = tf.data.experimental.service
    if role == "dispatcher":
        server = service.DispatchServer(service.DispatcherConfig(port=0))
        port = server.target.rsplit(":", 1)[1]
        tmp = Path(folder) / "dispatcher.port.part"
        tmp.write_text(port)
        tmp.rename(Path(folder) / "dispatcher.port")
    else:
        address, k = args
        server = service.WorkerServer(service.WorkerConfig(dispatcher_address=address))
        (Path(folder) / f"worker-{k}.ready").touch()
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
