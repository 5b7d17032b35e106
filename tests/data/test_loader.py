"""The PyTorch side's pieces (jobs.frameworks.pytorch.loader, jobs.data.order, jobs.data.tfrecord) on real
files: the sample orders, the TFRecord parser against records TensorFlow wrote, the samples a DataLoader
delivers, and its workers' start methods."""

import os
import struct

import pytest
from omegaconf import OmegaConf

from jobs.data import datasets, order, tfrecord
from jobs.data.datasets import Dataset
from support.files import make_jpegs

# 40 images in 5 groups of unequal size, as the shards of a converted set are
GROUPS = (
    (3, 17, 8, 0, 25, 30, 11),
    (1, 2, 4),
    (5, 6, 7, 9, 10, 12, 13, 14, 15),
    (16, 18),
    tuple(i for i in range(19, 40) if i not in (25, 30)),
)


def _grouped(fmt="hdf5") -> Dataset:
    n = 1 + max(i for g in GROUPS for i in g)
    assert sorted(i for g in GROUPS for i in g) == list(range(n))
    return Dataset(
        name="grouped",
        source="folder",
        location="/nowhere",
        files=tuple(f"/nowhere/{i}.jpg" for i in range(n)),
        labels=(0,) * n,
        sizes=(1,) * n,
        num_classes=1,
        format=fmt,
        containers=tuple(f"/nowhere/{k}.{fmt}" for k in range(len(GROUPS))),
        members=GROUPS,
    )


def _stored() -> list[int]:
    return [i for g in GROUPS for i in g]


def _runs(stream: list[int]) -> list[tuple[int, ...]]:
    """The groups ``stream`` passes through, one entry per contiguous stretch of one group."""
    of = {i: k for k, g in enumerate(GROUPS) for i in g}
    runs: list[list[int]] = []
    for i in stream:
        if runs and of[runs[-1][0]] == of[i]:
            runs[-1].append(i)
        else:
            runs.append([i])
    return [tuple(r) for r in runs]


def test_global_shuffle_is_a_permutation_drawn_from_the_seed():
    ds = _grouped()
    first = order.indices(ds, shuffle="global", shuffle_buffer=None, seed=7)
    assert sorted(first) == list(range(len(ds.files))) and first != _stored()
    assert order.indices(ds, shuffle="global", shuffle_buffer=None, seed=7) == first  # same seed, same order
    assert order.indices(ds, shuffle="global", shuffle_buffer=None, seed=8) != first


def test_global_shuffle_through_a_buffer_takes_each_image_at_most_a_buffer_late_or_early():
    ds = _grouped()
    got = order.indices(ds, shuffle="global", shuffle_buffer=4, seed=3)
    stored = _stored()
    assert sorted(got) == sorted(stored) and got != stored
    at = {i: p for p, i in enumerate(stored)}
    # out of a buffer of 4, the j-th image handed out was among the first j + 4 of the stream
    assert all(at[i] <= j + 4 for j, i in enumerate(got))


def test_local_shuffle_reads_each_group_through_before_the_buffer():
    ds = _grouped()
    # a buffer of one hands the stream out as it comes: the stream itself
    stream = order.indices(ds, shuffle="local", shuffle_buffer=1, seed=5)
    runs = _runs(stream)
    assert sorted(runs) == sorted(GROUPS)  # every group once, whole, in its stored order
    assert runs != list(GROUPS)  # the group order was shuffled
    # the default buffer (the largest group's images) mixes within about a group, never wider
    mixed = order.indices(ds, shuffle="local", shuffle_buffer=None, seed=5)
    size = max(len(g) for g in GROUPS)
    assert sorted(mixed) == sorted(stream) and mixed != stream
    at = {i: p for p, i in enumerate(stream)}
    assert all(at[i] <= j + size for j, i in enumerate(mixed))
    assert order.indices(ds, shuffle="local", shuffle_buffer=None, seed=5) == mixed


def test_no_shuffle_is_the_stored_order_whatever_the_seed():
    ds = _grouped()
    for seed in (0, 1, 99):
        assert order.indices(ds, shuffle="none", shuffle_buffer=None, seed=seed) == _stored()
    assert order.group_order(5, "none", None) == [0, 1, 2, 3, 4]


def test_the_buffer_hands_out_every_element_once():
    import numpy as np

    for size in (1, 3, 50):
        got = list(order.buffered(range(20), size, np.random.default_rng(0)))
        assert sorted(got) == list(range(20))
    assert list(order.buffered(range(5), 1, np.random.default_rng(0))) == [0, 1, 2, 3, 4]


# --- the TFRecord parser against TensorFlow's writer and reader


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """12 real JPEGs and a truncated one (a corrupt image: read fine, cannot be decoded)."""
    d = tmp_path_factory.mktemp("loader")
    good = make_jpegs(d / "data", 12, side=96)
    data = good[0].read_bytes()
    (d / "data" / "c1" / "truncated.jpg").write_bytes(data[: len(data) // 3])
    cfg = OmegaConf.create({"name": "tiny", "source": "folder", "path": str(d / "data"), "num_images": 13})
    return d, datasets.resolve(cfg, str(d), seed=0)


def _converted(folder, fmt):
    from jobs.data import formats

    d, ds = folder
    return formats.ensure(ds, fmt, 0.03, d / "converted")  # 3 or 4 containers


@pytest.fixture(scope="module")
def shards(folder):
    return _converted(folder, "tfrecord")


@pytest.mark.cells
def test_the_parser_reads_what_tensorflow_wrote_record_for_record(folder, shards):
    import tensorflow as tf

    _, ds = folder
    assert len(shards.containers) >= 3  # several shards, as the worker split needs
    for path, members in zip(shards.containers, shards.members):
        ours = list(tfrecord.records(path))
        theirs = [r.numpy() for r in tf.data.TFRecordDataset(path)]
        assert [data for data, _ in ours] == theirs
        assert sum(n for _, n in ours) == os.path.getsize(path)  # the framing is counted too
        parsed = [tfrecord.example(data) for data, _ in ours]
        assert [i for i, _, _ in parsed] == list(members)
        for i, label, encoded in parsed:
            with open(ds.files[i], "rb") as f:
                assert encoded == f.read()
            assert label == ds.labels[i]
        for data, (i, label, _) in zip(theirs, parsed):  # TF's own parser agrees
            ex = tf.train.Example.FromString(data).features.feature
            assert ex["image/index"].int64_list.value[0] == i
            assert ex["image/class/label"].int64_list.value[0] == label


@pytest.mark.cells
def test_a_shard_cut_short_raises_after_its_whole_records(shards, tmp_path):
    path = shards.containers[0]
    whole = list(tfrecord.records(path))
    cut = tmp_path / "cut.tfrecord"
    with open(path, "rb") as f:
        data = f.read()
    cut.write_bytes(data[: whole[0][1] + 20])  # the first record and a part of the second
    got = []
    with pytest.raises(tfrecord.BadRecord, match="cut short"):
        for r in tfrecord.records(str(cut)):
            got.append(r)
    assert got == whole[:1]
    with pytest.raises(tfrecord.BadRecord, match="not an Example"):
        tfrecord.example(b"\x0a\x00")  # an empty Features: no image/index
    # a damaged length past the end of the file (asked of read() as it was, a MemoryError)
    (tmp_path / "huge.tfrecord").write_bytes(data[: whole[0][1]] + struct.pack("<Q", 1 << 40) + b"\0" * 64)
    with pytest.raises(tfrecord.BadRecord, match="cut short"):
        list(tfrecord.records(str(tmp_path / "huge.tfrecord")))


# --- what a DataLoader delivers, in process and from workers started each way


def _truncated(ds) -> str:
    return next(f for f in ds.files if f.endswith("truncated.jpg"))


def _settings(**kw):
    from jobs.workloads.microbench.run import RunSettings

    base = dict(
        pipeline="decode_resize", threads=2, batch_size=4, prefetch=0, image_side=32, batches=None, seed=1
    )
    return RunSettings(**{**base, **kw})


def _loader(workers, context=None):
    from jobs.frameworks.pytorch.loader.build import Loader

    return Loader(workers, 2 if workers else None, False, False, context)


@pytest.mark.cells
def test_files_in_process_deliver_the_good_images_and_name_the_corrupt_one(folder):
    from jobs.frameworks.pytorch import torch_reading

    _, ds = folder
    r = torch_reading.run_once(ds, _settings(), _loader(0))
    assert (r.images, r.images_dropped, r.workers, r.start_method) == (12, 1, 0, "none")
    assert [os.path.basename(p) for p in r.dropped_files] == ["truncated.jpg"]
    # what was delivered, as tf.data counts it (ignore_errors drops the element, its bytes with it)
    assert r.bytes_consumed == ds.total_bytes - os.path.getsize(_truncated(ds))
    ro = torch_reading.run_once(ds, _settings(pipeline="read_only"), _loader(0))
    assert (ro.images, ro.images_dropped, ro.bytes_consumed) == (13, 0, ds.total_bytes)


@pytest.mark.cells
@pytest.mark.parametrize(("context", "fmt"), [("spawn", "tfrecord"), ("forkserver", "hdf5")])
def test_workers_started_by_spawn_and_forkserver_read_the_containers(folder, context, fmt):
    """A spawned worker gets the dataset pickled (no open h5py handles); TFRecord: each of the 2 workers
    reads its own shards."""
    from jobs.frameworks.pytorch import torch_reading

    ds = _converted(folder, fmt)
    r = torch_reading.run_once(ds, _settings(shuffle="local"), _loader(2, context))
    assert (r.images, r.images_dropped, r.workers, r.start_method) == (12, 1, 2, context)
    assert 0 < r.startup_s <= r.seconds  # the last worker may be ready after the first one delivered
    assert [p.split("(")[-1] for p in r.dropped_files] == ["truncated.jpg)"]
    bad = ds.files.index(_truncated(ds))
    if fmt == "tfrecord":  # the framing and the Example around each image are read and counted too
        sizes = [
            n for p in ds.containers for data, n in tfrecord.records(p) if tfrecord.example(data)[0] != bad
        ]
        assert r.bytes_consumed == sum(sizes)
    else:
        assert r.bytes_consumed == ds.total_bytes - ds.sizes[bad]


def test_a_forked_worker_never_collects_what_its_process_left_to_collect(tmp_path):
    """A DataLoader worker forked from a process with objects still to collect (TensorFlow's, after a
    benchmark's TensorFlow round) must not collect them: a worker that ran a TensorFlow iterator's
    destructor hung on the thread pool the fork did not copy. The loader a forking cell builds freezes
    the collector while its workers start; PyTorch's own lets a worker collect the parent's garbage (the
    test's check that it sees the hazard)."""
    import gc

    import torch
    from torch.utils.data import DataLoader

    from jobs.frameworks.pytorch.loader import build

    collected = tmp_path / "collected"

    class Garbage:  # a cycle: only the collector frees it
        def __init__(self):
            self.me = self

        def __del__(self):
            with open(collected, "a") as f:
                f.write(f"{os.getpid()}\n")

    class Collecting(torch.utils.data.Dataset):
        def __len__(self):
            return 1

        def __getitem__(self, i):
            gc.collect()  # in the worker, as an allocation might trigger it
            return i

    def who_collected(kind) -> set[int]:
        collected.unlink(missing_ok=True)
        # what this process left to collect before (a test worker's TensorFlow iterators of earlier tests):
        # collected here, or PyTorch's own worker would collect it and hang, as the cells' workers did
        gc.collect()
        gc.disable()  # the garbage is left for whoever collects first
        try:
            Garbage()
            assert list(kind(Collecting(), batch_size=1, num_workers=1, multiprocessing_context="fork")) == [
                torch.tensor([0])
            ]
        finally:
            gc.enable()
        gc.collect()  # this process's own copy
        return {int(x) for x in collected.read_text().split()}

    assert who_collected(DataLoader) - {os.getpid()}  # PyTorch's own: the worker collected it too
    assert who_collected(build._forked_apart(DataLoader)) == {os.getpid()}
