"""Reads that fail because storage went away, against images that do not decode. A run that dropped the
first as it drops the second would report the images it read before as the tier's speed (s3fs killed
mid-run: "202 images (310 dropped)", completed). Every reader of both frameworks fails such a run
(``ReadFailed``, which the runner names with the tier and the run; ``StoreError`` for the native S3
readers), while a corrupt image, an empty file or a dangling link the listing found is still only
dropped; a store whose GET failed is asked nothing more."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from jobs.data import datasets, formats
from jobs.data.datasets import Dataset
from jobs.data.read_errors import ReadFailed
from jobs.storage.objectstore import client, objects, server
from support.files import make_jpegs

# real TensorFlow, PyTorch workers, a real SeaweedFS server and a real s3fs mount
pytestmark = [pytest.mark.cells, pytest.mark.waits]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One embedded server for the module, opened as a cell opens it."""
    from jobs.storage.objectstore import tier

    s = server.start(tmp_path_factory.mktemp("s3") / "iocampaign" / "s3server")
    try:
        yield tier.Store(s.endpoint, client.connect(s.endpoint, s.credentials), s)
    finally:
        s.stop()


def _settings(pipeline="decode_resize", **kw):
    from jobs.workloads.microbench.run import RunSettings

    base = dict(threads=2, batch_size=4, prefetch=0, image_side=16, batches=None, seed=1)
    return RunSettings(pipeline=pipeline, **{**base, **kw})


def _loader(workers):
    from jobs.frameworks.pytorch.loader.build import Loader

    # forkserver: a worker forked from this process, which has run TensorFlow's threads, crashed now and
    # then (a segmentation fault, seen once on a loaded machine); the workers' reads are what is tested
    return Loader(workers, 2 if workers else None, False, False, "forkserver" if workers else None)


def _runs(ds: Dataset, pipeline="decode_resize"):
    """One pass of the micro-benchmark over ``ds`` by each reader: tf.data, then a DataLoader reading in
    this process and in 2 workers of a fork server; yields (reader, the
    pass) to call."""
    from jobs.frameworks.pytorch import torch_reading
    from jobs.frameworks.tensorflow import reading

    yield "tf.data", lambda: reading.run_once(ds, _settings(pipeline))
    for workers in (0, 2):
        yield (
            f"DataLoader({workers})",
            lambda w=workers: torch_reading.run_once(ds, _settings(pipeline), _loader(w)),
        )


def _s3fs_of(point: Path) -> int:
    """The pid of the s3fs serving ``point``."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if args[0].endswith(b"s3fs") and any(a.startswith(str(point).encode()) for a in args):
            return int(pid)
    raise AssertionError(f"no s3fs serves {point}")


def _folder(path: Path):
    from omegaconf import OmegaConf

    return OmegaConf.create({"name": "local", "source": "folder", "path": str(path), "num_images": 100})


def _sizes(files) -> tuple[int, ...]:
    return tuple(Path(f).stat().st_size for f in files)


@pytest.mark.parametrize("fmt", ["files", "tfrecord", "hdf5"])
def test_a_listed_file_gone_before_its_read_fails_the_run_and_a_damaged_one_is_dropped(tmp_path, fmt):
    """A file (or shard) the listing found, removed before the run (as a purge would): ENOENT fails the
    run in every reader. A dangling link and an empty file the listing found are defects of the set,
    dropped as before; so is a truncated JPEG inside a shard."""
    make_jpegs(tmp_path / "set", 12, side=24)
    c0 = tmp_path / "set" / "c0"
    data = (c0 / "0000.jpg").read_bytes()
    (c0 / "truncated.jpg").write_bytes(data[: len(data) // 3])
    if fmt == "files":
        (c0 / "empty.jpg").write_bytes(b"")
        os.symlink(tmp_path / "nowhere.jpg", c0 / "dangling.jpg")
    ds = datasets.resolve(_folder(tmp_path / "set"), str(tmp_path), 0)
    ds = formats.ensure(ds, fmt, 0.005, tmp_path / "converted")  # 3 or 4 shards
    dropped = 3 if fmt == "files" else 1
    for reader, run in _runs(ds):
        assert run().images_dropped == dropped, reader
    gone = ds.containers[-1] if fmt != "files" else str(c0 / "0002.jpg")
    os.unlink(gone)
    # and tf.data reading only: its dropped images are judged without a decode
    for reader, run in [*_runs(ds), *list(_runs(ds, "read_only"))[:1]]:
        with pytest.raises(ReadFailed, match=f"ENOENT: No such file or directory: {re.escape(gone)}"):
            run()
            pytest.fail(f"{reader} read on")


def test_a_failed_get_asks_nothing_more_of_the_store_and_fails_the_run(store, tmp_path):
    """The native S3 reader of tf.data, one GET at a time: the object at the fourth place in the run's
    order is gone from the store. Its GET fails and no GET is asked after it (a store that stops answering
    would otherwise hold every image left for the client's timeout: about 4 h for 512 images); the run
    fails naming the endpoint. Before: 24 GETs, one per image."""
    from jobs.frameworks.tensorflow import reading
    from jobs.storage.objectstore import tier

    files = make_jpegs(tmp_path / "imgs", 24, side=20)
    up = Dataset("gets", "folder", str(tmp_path), tuple(map(str, files)), (0,) * 24, _sizes(files), 1)
    ds, facts = tier.put_dataset(store, up)
    s = _settings(threads=1)
    order = reading.shuffled_order(len(files), seed=s.seed)
    store.client.delete_object(Bucket=store.endpoint.bucket, Key=ds.objects[order[3]])
    tier._OPEN[store.endpoint] = store  # as tier.serving opens it for a cell
    try:
        store.begin_run()
        try:
            reading.run_once(ds, s)
        except RuntimeError:  # delivered too few to go on: the store's own error is the run's
            pass
        with pytest.raises(
            client.StoreError, match=f"{store.endpoint.url}.*NoSuchKey.*1 of 4 requests failed"
        ):
            store.end_run()
    finally:
        tier._OPEN.pop(store.endpoint, None)
        objects.delete_prefix(store.client, store.endpoint, facts["dataset_prefix"])


def test_a_cell_whose_s3fs_dies_fails_naming_the_tier_and_the_run(planned_cell, tmp_path):
    """The red team's cell (``storage=s3 storage.reader=fuse``), run by the runner as a campaign runs it:
    s3fs SIGKILLed as soon as it has mounted the bucket. The run fails with one line naming the tier, the
    run and the errno; no run is returned. Before: "202 images (310 dropped)", completed."""
    from jobs.runner import measure
    from jobs.storage.objectstore import tier

    cell = planned_cell(
        "workload=microbench",
        "storage=s3",
        "storage.reader=fuse",
        f"storage.root={tmp_path}",
        "dataset.num_images=16",
        "batch_size=4",
        "threads=1",
        "repeats=1",
        "warmup=0",
    )
    killed: list[int] = []

    def kill_s3fs() -> None:  # once s3fs has mounted the bucket under the cell's root
        deadline = time.monotonic() + 120
        while not killed and time.monotonic() < deadline:
            if f" {tmp_path}/" in Path("/proc/self/mountinfo").read_text():
                pid = _s3fs_of(tmp_path)
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.01)

    killer = threading.Thread(target=kill_s3fs, daemon=True)
    killer.start()
    try:
        with pytest.raises(ReadFailed) as e:
            measure(cell, tmp_path / "job")
    finally:
        killed.append(0)  # the killer stops
        killer.join()
        tier.stop_all()
    assert killed[0] > 0
    assert re.fullmatch(
        r"storage=s3: .*ENOTCONN: Transport endpoint is not connected: "
        + re.escape(str(tmp_path))
        + r"/iocampaign/s3mounts/.*\) during run 1; its numbers are dropped",
        str(e.value),
    ), str(e.value)
