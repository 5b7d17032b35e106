"""input.service=true: a real tf.data service (a dispatcher and workers as processes on this machine)
runs the pipeline; every file is read exactly once, the workers' bytes count, nothing outlives the
cell, a dead worker is named, bad settings are refused in one line."""

import signal
import subprocess
import threading
import time

import pandas as pd
import pytest

from jobs import records
from support.commands import as_typed, campaign, noise
from support.configs import two_runs
from support.files import make_jpegs

N = 64


@pytest.mark.cells
def test_a_service_cell_reads_every_file_once_and_leaves_no_process(tmp_path):
    root = tmp_path / "tier"
    root.mkdir()
    out = tmp_path / "c"
    p = as_typed(  # as a user types it: a line of TensorFlow's on the terminal would show
        "campaign",
        "-m",
        "workload=readonly",
        "input.service=false,true",
        "input.workers=2",
        *two_runs(N, root, out),
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert noise(p) == [], noise(p)  # the consumer's client released while the service still answered
    assert (
        subprocess.run(["pgrep", "-f", f"jobs.execution.service .* {out}"], capture_output=True).stdout == b""
    )
    recs = {
        records.read(f).config["input"]["service"]: (f.parent, records.read(f))
        for f in out.glob("*/record.json")
    }
    folder, rec = recs[True]
    assert not (folder / "service").exists()  # the start-up hand-over is gone with the service
    for run in rec.runs:
        # every file once: all delivered, none twice (images counts duplicates), none dropped
        assert run["images"] == N and run["images_dropped"] == 0
        assert run["service_workers"] == 2 and len(run["worker_mb_s"]) == 2
        assert run["cache_state"] == "cold"  # the workers' device bytes are the run's
        assert run["bytes_read_syscall"] >= run["bytes_consumed"]
    assert all("service_workers" not in r for r in recs[False][1].runs)
    r = pd.read_csv(out / "results.csv")
    assert sorted(r["service"].unique()) == [0, 2]
    assert (out / "service.png").stat().st_size > 10_000
    # each point and the no-service line: its bound
    cells = pd.read_csv(out / "summary.csv").set_index("service")
    svg = (out / "service.svg").read_text()
    assert svg.count(f"<!-- {cells.loc[2, 'bound']} -->") >= 2
    assert svg.count(f"<!-- no service: {cells.loc[0, 'bound']} -->") == 2
    from analysis.figures.declared import rows_of
    from jobs import workloads

    fig5 = next(f for _, f in workloads.figures() if f.key == "fig5")
    assert set(rows_of(r, "microbench", fig5)["service"]) == {0}


@pytest.mark.cells
def test_a_dead_worker_is_named_and_every_process_ends(tmp_path):
    from jobs.execution import service

    with (
        pytest.raises(service.ServiceError, match="the worker 0 ended"),
        service.running(2, tmp_path / "svc") as svc,
    ):
        procs = [svc.dispatcher, *svc.workers]
        svc.workers[0].send_signal(signal.SIGKILL)
        svc.workers[0].wait()
        svc.check()
    assert all(p.poll() is not None for p in procs)
    assert not (tmp_path / "svc").exists()


@pytest.mark.cells
def test_a_worker_killed_mid_run_fails_the_run_instead_of_hanging(tmp_path):
    """distributed_epoch: the elements a dead worker held never come, so the consumer would wait for
    ever; the runner watches the service while the consumer reads, names the dead worker, and cancels
    the consumer's blocked read, so no thread is left calling the dispatcher after the service ends."""
    import tensorflow as tf

    from jobs.execution import service
    from jobs.frameworks.tensorflow import cancel
    from jobs.frameworks.tensorflow.pipeline import through_service

    files = [str(f) for f in make_jpegs(tmp_path / "data", 400, classes=1, side=32)]
    seen, ended = [], []

    def run_once(address):  # reads as the micro-benchmark's engine reads (reading.run_once)
        ds = through_service(tf.data.Dataset.from_tensor_slices(files).map(tf.io.read_file), address)
        read = cancel.next_of(iter(ds))
        try:
            while True:
                read()
                seen.append(1)
                if len(seen) == 50:  # mid-run
                    svc.workers[0].send_signal(signal.SIGKILL)
        except StopIteration:
            return {"images": len(seen)}
        except BaseException as e:
            ended.append(e)
            raise

    with (
        pytest.raises(service.ServiceError, match="the worker 0 ended"),
        service.running(2, tmp_path / "svc") as svc,
    ):
        procs = [svc.dispatcher, *svc.workers]
        t0 = time.monotonic()
        try:
            service.watched(run_once, svc.address, svc)
            svc.check()  # the consumer may also have got every element before the worker died
        finally:
            waited = time.monotonic() - t0
    assert waited < 60 and len(seen) >= 50
    assert all(p.poll() is not None for p in procs) and not (tmp_path / "svc").exists()
    if len(seen) < len(files):  # the consumer was blocked: its read was cancelled and the thread ended
        assert [type(e) for e in ended] == [tf.errors.CancelledError]
    assert not [t for t in threading.enumerate() if t.name == "service-consumer"]


@pytest.mark.parametrize(
    "args, expected",
    [
        (("input.workers=0",), "input.workers=0 must be at least 1"),
        (
            ("input.service=true", "workload=alexnet_small"),
            "workload=alexnet cannot read through the tf.data service",
        ),
        (("input.service=true", "workload.batches=2"), "leave workload.batches"),
        (("input.service=true", "dataset.format=tfrecord"), "not dataset.format=tfrecord"),
        (
            (
                "-m",
                "platform=slurm",
                "platform.nodes=2",
                "input.service=true",
                "input.workers=1",
                "storage=shared",
                "storage.root=/tmp",
            ),
            "give at least one worker per node",
        ),
        (("input.service=true", "platform.tasks_per_node=2"), "leave platform.tasks_per_node=1"),
    ],
)
def test_service_settings_it_cannot_run_are_refused(cwd, args, expected):
    p = campaign(*args, "dataset.num_images=32", "batch_size=8", cwd=cwd)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2 and len(lines) == 1 and expected in lines[0], p.stderr
    assert not [f for f in cwd.rglob("*") if f.is_file()]
