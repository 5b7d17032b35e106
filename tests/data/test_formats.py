"""Dataset formats (files, TFRecord shards, HDF5, npz) and sample orders (global, local, none): the
conversion holds exactly the source's images, every order visits every image once, a corrupt
record or entry is dropped and counted, the cold cache is verified on the shard files. Real
TensorFlow, real h5py, real files."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from jobs.cell import Cell
from jobs.data import datasets, formats, loading
from jobs.frameworks.tensorflow import pipeline, sources
from jobs.frameworks.tensorflow import reading as microbench
from support.commands import campaign
from support.files import make_jpegs

N = 24
SHARD_MB = 0.05  # ~5 of the test's ~10 KB JPEGs per container


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A user's folder of 24 JPEGs in 3 classes, listed as a dataset."""
    folder = tmp_path_factory.mktemp("user_images")
    make_jpegs(folder, N, classes=3)
    cfg = OmegaConf.create({"name": "tiny", "source": "folder", "path": str(folder), "num_images": N})
    return folder, datasets.resolve(cfg, str(folder), seed=0)


@pytest.fixture(scope="module")
def stored(source, tmp_path_factory):
    """The source as files, TFRecord and HDF5, converted into the tool's own folder."""
    folder, ds = source
    before = _tree(folder)
    cache_root = tmp_path_factory.mktemp("tier") / "iocampaign" / "datasets" / "converted"
    every = ("files", "tfrecord", "hdf5", "npz")
    out = {fmt: formats.ensure(ds, fmt, SHARD_MB, cache_root) for fmt in every}
    assert _tree(folder) == before  # the user's folder: nothing written, changed or added
    return out


def _read_back(d) -> dict:
    """{image index: (label, JPEG bytes)} of every entry of the containers of ``d``."""
    import h5py
    import tensorflow as tf

    got = {}
    for path, members in zip(d.containers, d.members):
        if d.format == "tfrecord":
            spec = {
                "image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64),
                "image/index": tf.io.FixedLenFeature([], tf.int64),
            }
            rows = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(path)]
            entries = [
                (int(r["image/index"]), int(r["image/class/label"]), r["image/encoded"].numpy()) for r in rows
            ]
        elif d.format == "npz":
            with np.load(path, allow_pickle=False) as z:
                entries = [(int(z["index"]), int(z["y"]), z["x"].tobytes())]
        else:
            with h5py.File(path, "r") as f:
                data, off = f["images"][:], f["offsets"][:]
                entries = [
                    (int(i), int(c), data[off[r] : off[r + 1]].tobytes())
                    for r, (i, c) in enumerate(zip(f["index"][:], f["labels"][:]))
                ]
        assert [e[0] for e in entries] == list(members)  # the index says what each container holds, in order
        got.update({i: (c, b) for i, c, b in entries})
    return got


@pytest.mark.cells
@pytest.mark.parametrize("fmt", ["tfrecord", "hdf5", "npz"])
def test_the_conversion_holds_exactly_the_source_images(stored, source, fmt):
    _, ds = source
    d = stored[fmt]
    assert len(d.containers) > 1 and all(Path(c).parent.parent.name == "converted" for c in d.containers)
    got = _read_back(d)
    assert len(got) == N
    assert got == {i: (ds.labels[i], Path(ds.files[i]).read_bytes()) for i in range(N)}
    assert d.stored_bytes == sum(os.path.getsize(c) for c in d.containers)
    if fmt == "npz":  # one sample a file, as DLIO's unet3d, whatever dataset.shard_mb says
        assert len(d.containers) == N and all(len(m) == 1 for m in d.members)


@pytest.mark.cells
def test_a_conversion_is_reused_and_redone_when_a_file_changed(stored, source):
    _, ds = source
    d = stored["tfrecord"]
    cache_root = Path(d.containers[0]).parent.parent
    mtimes = [os.stat(c).st_mtime_ns for c in d.containers]
    again = formats.ensure(ds, "tfrecord", SHARD_MB, cache_root)
    assert again.containers == d.containers and [os.stat(c).st_mtime_ns for c in d.containers] == mtimes
    with open(d.containers[1], "r+b") as f:  # a damaged shard: shorter than the index says
        f.truncate(100)
    redone = formats.ensure(ds, "tfrecord", SHARD_MB, cache_root)
    assert os.path.getsize(redone.containers[1]) == d.container_sizes[1]
    assert len(_read_back(redone)) == N
    assert not [p for p in Path(d.containers[0]).parent.iterdir() if p.name.endswith(".part")]


def _visit(d, shuffle, seed=3, threads=2):
    """Image indices and bytes of one pass of the read-only pipeline."""
    s = loading.PipelineSettings(
        threads=threads, batch_size=5, prefetch=0, image_side=224, seed=seed, shuffle=shuffle
    )
    data = pipeline.build(d, s, decode=False)
    seen, consumed = [], 0
    for _, idx, nbytes in data:
        seen += [int(i) for i in idx.numpy()]
        consumed += int(nbytes.numpy().sum())
    sources.close_all()
    return seen, consumed


@pytest.mark.cells
@pytest.mark.parametrize("fmt", ["files", "tfrecord", "hdf5", "npz"])
def test_every_order_visits_every_image_once(stored, fmt):
    d = stored[fmt]
    orders = {}
    for shuffle in ("global", "local", "none"):
        seen, consumed = _visit(d, shuffle)
        assert sorted(seen) == list(range(N)), shuffle  # each image exactly once per pass
        assert consumed == (d.stored_bytes if fmt == "tfrecord" else d.total_bytes), shuffle
        how = {"shuffle": shuffle, "shuffle_buffer": None, "threads": 2, "payload": False}
        assert sources.order(d, seed=3, **how) == seen, shuffle  # the order the drop count relies on
        orders[shuffle] = seen
    assert orders["global"] != orders["none"]
    assert _visit(d, "global", seed=4)[0] != orders["global"]  # another run, another permutation
    if fmt != "tfrecord":  # one reader: the stored order, container after container
        assert orders["none"] == [i for g in d.members for i in g]


@pytest.mark.cells
@pytest.mark.parametrize("fmt", ["files", "tfrecord", "hdf5", "npz"])
def test_no_pipeline_writes_autographs_converted_code_outside_the_tools_folders(
    stored, fmt, tmp_path, monkeypatch
):
    """TensorFlow's autograph writes each Python function it converts into the temporary folder (its
    ``__autograph_generated_file`` modules), left behind when the process is killed: every function of the
    pipelines (their branches are on settings, in Python) is built unconverted, so no run writes one."""
    import tempfile

    own = tmp_path / "tmp"
    own.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own))
    d = stored[fmt]
    for decode in (False, True):
        s = loading.PipelineSettings(
            threads=2, batch_size=5, prefetch=1, image_side=32, seed=1, shuffle="global", read_delay_ms=0.5
        )
        assert sum(int(n.numpy().sum()) for _, _, n in pipeline.build(d, s, decode=decode)) > 0
        sources.close_all()
    assert _visit(d, "none")[1] > 0  # the read-only pipeline in blocks, without a delay
    assert list(own.iterdir()) == []


@pytest.mark.cells
def test_local_shuffle_reads_one_group_at_a_time(stored):
    d = stored["hdf5"]
    seen, _ = _visit(d, "local", threads=1)
    group = {i: k for k, g in enumerate(d.members) for i in g}
    # a buffer of one group's images: a group is finished within two groups' worth of reads
    firsts = {}
    for pos, i in enumerate(seen):
        firsts.setdefault(group[i], pos)
    lasts = {group[i]: pos for pos, i in enumerate(seen)}
    biggest = max(len(g) for g in d.members)
    assert all(lasts[k] - firsts[k] < 3 * biggest for k in firsts)


def _settings(pipeline_name="read_only", batches=None):
    return microbench.RunSettings(
        pipeline=pipeline_name, threads=2, batch_size=4, prefetch=0, image_side=32, batches=batches, seed=1
    )


@pytest.mark.cells
@pytest.mark.parametrize("fmt,delay_ms", [("tfrecord", 0.0), ("tfrecord", 1.0), ("hdf5", 0.0)])
def test_a_read_only_run_in_blocks_cut_short_counts_nothing_as_dropped(stored, fmt, delay_ms):
    """A read-only run reads containers in blocks (jobs.frameworks.tensorflow.read_only); a run that
    stops after a few batches (with a read delay, which works on single images, or without) delivers the
    first images of its order and drops none of them."""
    d = stored[fmt]
    s = microbench.RunSettings(
        pipeline="read_only",
        threads=2,
        batch_size=4,
        prefetch=0,
        image_side=32,
        batches=3,
        seed=1,
        shuffle="none",
        read_delay_ms=delay_ms,
    )
    r = microbench.run_once(d, s)
    assert (r.images, r.images_dropped, r.batches) == (12, 0, 3)
    assert r.bytes_consumed > 0
    full = _visit(d, "none", seed=1)[0]
    assert sources.order(d, seed=1, shuffle="none", shuffle_buffer=None, threads=2, payload=False) == full
    if fmt == "tfrecord":  # shards interleaved a block at a time, not a record at a time
        assert sources.order(d, seed=1, shuffle="none", shuffle_buffer=None, threads=2) != full
    else:  # the stored order
        assert full == [i for g in d.members for i in g]


@pytest.mark.cells
def test_a_corrupt_tfrecord_record_is_dropped_and_counted(source, tmp_path):
    _, ds = source
    d = formats.ensure(ds, "tfrecord", SHARD_MB, tmp_path / "converted")
    path = d.containers[0]
    data = bytearray(Path(path).read_bytes())
    # the first record's length; corrupt the second record's payload
    first = int.from_bytes(data[:8], "little")
    data[8 + 4 + first + 4 + 12 + 20] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    r = microbench.run_once(d, _settings())
    lost = len(d.members[0]) - 1  # TensorFlow cannot read past a bad record: the rest of its shard is lost
    assert (r.images, r.images_dropped) == (N - lost, lost)
    assert all(f.startswith(f"{path}[") for f in r.dropped_files)


@pytest.mark.cells
def test_a_corrupt_hdf5_entry_is_dropped_and_counted(source, tmp_path):
    import h5py

    _, ds = source
    d = formats.ensure(ds, "hdf5", SHARD_MB, tmp_path / "converted")
    with h5py.File(d.containers[0], "r+") as f:  # the third image's first bytes overwritten
        start = int(f["offsets"][2])
        f["images"][start : start + 17] = np.frombuffer(b"not a jpeg at all", dtype=np.uint8)
    r = microbench.run_once(d, _settings("decode_resize"))
    assert (r.images, r.images_dropped) == (N - 1, 1)
    assert r.dropped_files == [f"{d.containers[0]}[2] ({os.path.basename(ds.files[d.members[0][2]])})"]


@pytest.mark.cells
def test_a_damaged_npz_sample_is_dropped_and_counted_by_both_frameworks(source, tmp_path):
    """A file whose zip no longer reads (its bytes overwritten in place, its size kept) is the set's
    defect: dropped and named, the run goes on; a sample whose file is gone is a failed read."""
    from jobs.data import read_errors
    from jobs.frameworks.pytorch import torch_reading
    from jobs.frameworks.pytorch.loader.build import Loader

    _, ds = source
    d = formats.ensure(ds, "npz", SHARD_MB, tmp_path / "converted")
    damaged = d.containers[3]
    with open(damaged, "r+b") as f:
        f.write(b"\0" * 64)  # the zip's first local header: np.load finds no archive
    name = f"{damaged}[0] ({os.path.basename(ds.files[d.members[3][0]])})"
    r = microbench.run_once(d, _settings("decode_resize"))
    assert (r.images, r.images_dropped, r.dropped_files) == (N - 1, 1, [name])
    # its worker started fresh: a worker forked from this long-lived test process, where TensorFlow's threads
    # have run, died once of a segmentation fault in a suite run (a fork beside threads), not of the sample
    one_worker = Loader(1, 2, False, False, "spawn")
    t = torch_reading.run_once(d, _settings("decode_resize"), one_worker)
    assert (t.images, t.images_dropped, t.dropped_files) == (N - 1, 1, [name])
    os.unlink(d.containers[5])  # its storage lost it: the run fails, naming the file
    with pytest.raises(read_errors.ReadFailed, match=d.containers[5]):
        microbench.run_once(d, _settings("decode_resize"))


def test_an_hdf5_file_without_its_datasets_is_refused(source, tmp_path):
    import json

    import h5py

    _, ds = source
    d = formats.ensure(ds, "hdf5", SHARD_MB, tmp_path / "converted")
    with h5py.File(d.containers[1], "w") as f:  # replaced by a file that holds only images
        f.create_dataset("images", data=np.zeros(3, dtype=np.uint8))
    index_path = Path(d.containers[1]).parent / formats.INDEX
    index = json.loads(index_path.read_text())
    index["containers"][1]["bytes"] = os.path.getsize(d.containers[1])
    index_path.write_text(json.dumps(index))
    needs = r"has no dataset 'offsets', 'labels', 'index' \(it needs images, offsets, labels, index\)"
    with pytest.raises(formats.FormatError, match=needs):
        formats.ensure(ds, "hdf5", SHARD_MB, tmp_path / "converted")


@pytest.mark.cells
def test_a_shard_cell_is_cold_and_verified_on_its_shards(source, disk_root):
    """Through the campaign's run loop: the shard files are evicted before every run, and the device
    delivered what the run consumed."""
    from benchmarks.presets import cell
    from jobs import runner

    folder, _ = source
    config = cell(
        [
            "workload=readonly",
            "dataset.source=folder",
            f"dataset.path={folder}",
            f"dataset.num_images={N}",
            "dataset.format=tfrecord",
            f"dataset.shard_mb={SHARD_MB}",
            f"storage.root={disk_root}",
            "batch_size=4",
            "threads=2",
            "repeats=2",
            "warmup=0",
            "shuffle=local",
        ]
    )
    runs, summary, _ = runner.measure(Cell.from_data(config), disk_root)
    assert summary["format"] == "tfrecord" and summary["containers"] > 1
    assert Path(summary["stored_in"]).is_relative_to(disk_root / "iocampaign" / "datasets" / "converted")
    for run in runs:
        assert run["cache_state"] == "cold" and run["resident_bytes_before"] == 0
        assert run["images"] == N and run["bytes_consumed"] == summary["stored_bytes"]
        assert run["bytes_read_device"] >= 0.9 * run["bytes_consumed"]


@pytest.mark.parametrize(
    "setting, expected",
    [
        (
            "dataset.format=parquet",
            "dataset.format=parquet: Invalid value 'parquet', expected one of [files, tfrecord, hdf5, npz]",
        ),
        ("dataset.shard_mb=0", "dataset.shard_mb=0.0 must be positive"),
        ("shuffle_buffer=0", "shuffle_buffer=0 must be at least 1"),
    ],
)
def test_bad_format_settings_give_one_line(cwd, tmp_path, setting, expected):
    tier = tmp_path / "tier"
    tier.mkdir()
    p = campaign(
        "workload=readonly", setting, f"storage.root={tier}", "dataset.num_images=8", "repeats=1", cwd=cwd
    )
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2 and len(lines) == 1 and expected in lines[0], p.stderr
    assert not list(cwd.rglob("*")) and not list(tier.iterdir())


@pytest.mark.parametrize(
    "garbage",
    ["null", "[]", '{"containers": []}', "{truncated", '{"format": "hdf5", "containers": [{"name": "x"}]}'],
)
def test_a_damaged_index_is_converted_again_and_stale_parts_go(source, tmp_path, garbage):
    """A garbage index.json made every later run fail; .part files of a killed conversion stayed for ever."""
    _, ds = source
    root = tmp_path / "converted"
    d = formats.ensure(ds, "hdf5", SHARD_MB, root)
    folder = Path(d.containers[0]).parent
    (folder / formats.INDEX).write_text(garbage)
    stale = folder / "part-00-of-00.h5.12345.part"  # what a kill -9 mid-conversion leaves
    stale.write_bytes(b"half a shard")
    planted = folder / "notes.part"  # a file the tool did not name stays, byte for byte
    planted.write_bytes(b"the user's")
    again = formats.ensure(ds, "hdf5", SHARD_MB, root)
    assert again.containers == d.containers and sum(map(len, again.members)) == N
    assert not stale.exists() and planted.read_bytes() == b"the user's"
    assert json.loads((folder / formats.INDEX).read_text())["format"] == "hdf5"


def test_a_shard_replaced_by_a_folder_is_one_clear_error_and_the_folder_stays(source, tmp_path):
    _, ds = source
    d = formats.ensure(ds, "hdf5", SHARD_MB, tmp_path / "converted")
    shard = Path(d.containers[0])
    shard.unlink()
    shard.mkdir()
    (shard / "mine.txt").write_text("the user's")
    with pytest.raises(
        datasets.DatasetError, match="is a folder or a link where the tool writes a hdf5 file"
    ):
        formats.ensure(ds, "hdf5", SHARD_MB, tmp_path / "converted")
    assert (shard / "mine.txt").read_text() == "the user's"
