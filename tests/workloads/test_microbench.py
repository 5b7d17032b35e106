"""The micro-benchmark pipeline with real TensorFlow on tiny real files, defects included."""

import os

import pytest
from omegaconf import OmegaConf

from jobs.data import datasets
from jobs.frameworks.tensorflow import reading as microbench
from support.files import make_jpegs


def _dataset(folder, n=20):
    cfg = OmegaConf.create({"name": "tiny", "source": "folder", "path": str(folder), "num_images": n})
    return datasets.resolve(cfg, str(folder), seed=0)


def settings(pipeline="decode_resize", threads=2, batch_size=4, batches=None, prefetch=0):
    return microbench.RunSettings(
        pipeline=pipeline,
        threads=threads,
        batch_size=batch_size,
        prefetch=prefetch,
        image_side=32,
        batches=batches,
        seed=1,
    )


@pytest.fixture
def defective(tmp_path):
    """12 good JPEGs plus a truncated one, a zero-byte one, a text file and a dangling link."""
    good = make_jpegs(tmp_path, 12)
    bad = tmp_path / "c0"
    data = good[0].read_bytes()
    (bad / "truncated.jpg").write_bytes(data[: len(data) // 3])
    (bad / "empty.jpg").write_bytes(b"")
    (bad / "notes.txt").write_text("not an image")
    os.symlink(tmp_path / "gone.jpg", bad / "dangling.jpg")
    return tmp_path


@pytest.mark.cells
def test_consumes_the_whole_set_and_counts_bytes(tmp_path):
    make_jpegs(tmp_path, 10)
    ds = _dataset(tmp_path)
    r = microbench.run_once(ds, settings())
    assert (r.images, r.images_dropped, r.batches) == (10, 0, 3)
    assert r.bytes_consumed == ds.total_bytes
    assert r.seconds > 0 and r.images_per_s == pytest.approx(10 / r.seconds)
    assert r.mb_per_s == pytest.approx(ds.total_bytes / r.seconds / 1e6)


@pytest.mark.cells
def test_defective_files_are_dropped_counted_and_named(defective):
    ds = _dataset(defective)
    assert len(ds.files) == 16
    r = microbench.run_once(ds, settings(threads="autotune"))
    assert r.images == 12 and r.images_dropped == 4
    names = sorted(os.path.basename(p) for p in r.dropped_files)
    assert names == ["dangling.jpg", "empty.jpg", "notes.txt", "truncated.jpg"]


@pytest.mark.cells
def test_read_only_pipeline_drops_only_unreadable_files(defective):
    ds = _dataset(defective)
    r = microbench.run_once(ds, settings(pipeline="read_only"))
    # read_file alone does not care what is in a file; only the dangling link fails
    assert r.images == 15 and r.images_dropped == 1
    assert [os.path.basename(p) for p in r.dropped_files] == ["dangling.jpg"]


@pytest.mark.cells
def test_batches_limit_counts_drops_among_what_was_attempted(defective):
    ds = _dataset(defective)
    r = microbench.run_once(ds, settings(batches=2, batch_size=3))
    assert r.batches == 2 and r.images == 6
    order = microbench.shuffled_order(len(ds.files), seed=1)
    bad = {i for i, f in enumerate(ds.files) if not f.endswith(tuple(f"{k:04d}.jpg" for k in range(12)))}
    good_seen = 0
    expected_dropped = 0
    for i in order:
        if i in bad:
            expected_dropped += 1
        else:
            good_seen += 1
            if good_seen == 6:
                break
    assert r.images_dropped == expected_dropped


@pytest.mark.cells
def test_prefetch_and_threads_do_not_change_what_is_delivered(tmp_path):
    make_jpegs(tmp_path, 9)
    ds = _dataset(tmp_path)
    for s in (settings(threads=1), settings(threads=4, prefetch=2)):
        assert microbench.run_once(ds, s).images == 9


@pytest.mark.cells
def test_a_set_with_no_decodable_image_fails_loudly(tmp_path):
    (tmp_path / "c0").mkdir()
    (tmp_path / "c0" / "a.jpg").write_bytes(b"garbage")
    with pytest.raises(RuntimeError, match="no image"):
        microbench.run_once(_dataset(tmp_path), settings())


@pytest.mark.cells
def test_the_read_delay_is_native_and_ordered():
    """Pins the wrapped SleepDataset kernel (jobs.frameworks.tensorflow.pipeline.sleep): every element
    comes in order, and the delay is really spent (a lower bound, which load can only raise; how much of
    it overlaps is for benchmarks.overlap to measure, not a unit test)."""
    import time

    import tensorflow as tf

    from jobs.frameworks.tensorflow import pipeline

    index = tf.data.Dataset.range(24).map(lambda i: (i, tf.strings.as_string(i), tf.cast(i, tf.int32)))
    for threads in (1, 4):
        t0 = time.perf_counter()
        got = [int(i) for i, _, _ in pipeline.delayed(index, 20.0, threads).as_numpy_iterator()]
        assert got == list(range(24))
        assert time.perf_counter() - t0 >= 24 * 0.020 / threads * 0.5
