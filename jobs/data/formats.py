"""Datasets stored in containers: TFRecord shards, HDF5 files and NumPy .npz files converted from the
image files.

A conversion holds exactly the images of its source (the same manifest order, class labels and
JPEG bytes), written once in a fixed random order (as ImageNet's TFRecords are) into containers of
about ``dataset.shard_mb``, and reused while the source and the settings stay the same. It lives in
the tool's own folder on the storage tier (``<storage.root>/iocampaign/datasets/converted/``),
never beside a user's images. ``index.json`` (written last) names every container, its size and
the images it holds in stored order; a container whose size no longer matches is converted again.

TFRecord: one ``tf.train.Example`` per image with ``image/encoded`` (the JPEG bytes),
``image/class/label`` and ``image/index``, written with TensorFlow's writer. HDF5 (h5py): in every
file, ``images`` (the JPEGs' bytes one after another, uint8, contiguous), ``offsets`` (image ``r``
is ``images[offsets[r]:offsets[r + 1]]``), ``labels`` and ``index``. A contiguous byte array with
offsets, not a variable-length dataset: reading one image is then one plain slice (44 µs against 331
µs a row through h5py's variable-length path, measured on this project's 2-core machine). npz: one
sample a file, as DLIO and MLPerf Storage store unet3d's (``np.savez``, uncompressed: ``x`` the sample's
bytes as a uint8 array, ``y`` its label, ``index`` its image); a reader loads ``x`` whole with ``np.load``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import sys
import time
from pathlib import Path

from jobs.data import inuse
from jobs.data.datasets import Dataset, DatasetError

CONVERTER_VERSION = 2  # 2: HDF5 as one byte array with offsets (1: variable-length rows)
INDEX = "index.json"
SUFFIX = {"tfrecord": ".tfrecord", "hdf5": ".h5", "npz": ".npz"}
HDF5_DATASETS = ("images", "offsets", "labels", "index")
NPZ_ARRAYS = ("x", "y", "index")
ONE_A_FILE = ("npz",)  # the formats that hold one sample a file, whatever dataset.shard_mb says
MB = 1e6
CONVERTED = "converted"  # below the datasets folder: datasets.cache_dir(root, CONVERTED)


class FormatError(DatasetError):
    """A converted container cannot be used (an HDF5 file without the expected datasets, ...)."""


def key(ds: Dataset, fmt: str, shard_mb: float) -> str:
    """Folder name of a conversion: what it holds (each file's path, size, mtime and label) and how."""
    h = hashlib.sha256()
    h.update(json.dumps([fmt, float(shard_mb), CONVERTER_VERSION]).encode())
    for path, label, size in zip(ds.files, ds.labels, ds.sizes):
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            mtime = 0
        h.update(f"{path}\0{label}\0{size}\0{mtime}\n".encode())
    return f"{ds.name}-{fmt}-{len(ds.files)}-{h.hexdigest()[:10]}"


def stored_order(n: int) -> list[int]:
    """The order images are written into containers: a fixed permutation (seed 0), so classes mix."""
    import numpy as np

    return [int(i) for i in np.random.default_rng(0).permutation(n)]


def plan_containers(sizes: list[int], order: list[int], shard_mb: float) -> list[list[int]]:
    """Images (in stored order) of every container: a new one starts when the next image would pass
    ``shard_mb`` (a container holds at least one image)."""
    limit = shard_mb * MB
    out: list[list[int]] = [[]]
    size = 0
    for i in order:
        if out[-1] and size + sizes[i] > limit:
            out.append([])
            size = 0
        out[-1].append(i)
        size += sizes[i]
    return out if out[0] else []


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None  # an unreadable source image is left out of the conversion and counted


def _write_tfrecord(path: Path, ds: Dataset, members: list[int]) -> list[int]:
    import tensorflow as tf

    def feature(**kw):
        return tf.train.Features(feature=kw)

    kept = []
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in members:
            data = _read(ds.files[i])
            if data is None:
                continue
            ex = tf.train.Example(
                features=feature(
                    **{
                        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                        "image/class/label": tf.train.Feature(
                            int64_list=tf.train.Int64List(value=[ds.labels[i]])
                        ),
                        "image/index": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    }
                )
            )
            w.write(ex.SerializeToString())
            kept.append(i)
    return kept


def _write_hdf5(path: Path, ds: Dataset, members: list[int]) -> list[int]:
    import h5py
    import numpy as np

    blobs, kept = [], []
    for i in members:
        data = _read(ds.files[i])
        if data is not None:
            blobs.append(np.frombuffer(data, dtype=np.uint8))
            kept.append(i)
    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in blobs])
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=np.concatenate(blobs) if blobs else np.zeros(0, np.uint8))
        f.create_dataset("offsets", data=offsets)
        f.create_dataset("labels", data=np.array([ds.labels[i] for i in kept], dtype=np.int64))
        f.create_dataset("index", data=np.array(kept, dtype=np.int64))
    return kept


def _write_npz(path: Path, ds: Dataset, members: list[int]) -> list[int]:
    import numpy as np

    (i,) = members
    data = _read(ds.files[i])
    if data is None:
        return []
    with open(path, "wb") as f:  # a file object: np.savez would add .npz to a name
        np.savez(f, x=np.frombuffer(data, dtype=np.uint8), y=np.int64(ds.labels[i]), index=np.int64(i))
    return [i]


def load_npz(path: str) -> bytes:
    """The sample of an npz container: its ``x``, read whole (``np.load`` reads the member it is asked
    for). Raises OSError for a failed read, ValueError for a file that is no npz of the tool's."""
    import zipfile

    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            return z["x"].tobytes()
    except (zipfile.BadZipFile, KeyError, EOFError) as e:
        raise ValueError(f"{path} is not an npz sample ({type(e).__name__}: {e})") from None


WRITERS = {"tfrecord": _write_tfrecord, "hdf5": _write_hdf5, "npz": _write_npz}


def _valid(folder: Path, fmt: str) -> dict | None:
    """The index of a complete conversion in ``folder`` whose containers all have their recorded size;
    None (convert again) for anything else: no index, a damaged one, a container changed or missing."""
    try:
        index = json.loads((folder / INDEX).read_text())
    except (OSError, ValueError):
        return None
    shape_ok = (
        isinstance(index, dict)
        and index.get("format") == fmt
        and isinstance(index.get("containers"), list)
        and index["containers"]
        and all(
            isinstance(c, dict)
            and isinstance(c.get("name"), str)
            and "/" not in c["name"]
            and isinstance(c.get("bytes"), int)
            and isinstance(c.get("members"), list)
            for c in index["containers"]
        )
    )
    if not shape_ok:
        print(f"[dataset] {folder / INDEX} is damaged: converting again", file=sys.stderr)
        return None
    for c in index["containers"]:
        try:
            st = os.stat(folder / c["name"])
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size != c["bytes"]:
            print(
                f"[dataset] {folder / c['name']} changed since it was written: converting again",
                file=sys.stderr,
            )
            return None
    return index


def _clear_parts(folder: Path) -> None:
    """Remove what a failed or killed conversion left (its ``part-…-of-….<ext>.<pid>.part`` and
    ``index.json.<pid>.part`` files, nothing else): the caller holds the folder's lock, so no conversion
    is writing them."""
    import re

    ours = re.compile(r"^(part-\d+-of-\d+\.(tfrecord|h5|npz)|" + re.escape(INDEX) + r")\.\d+\.part$")
    for p in folder.glob("*.part"):
        if ours.match(p.name) and p.is_file() and not p.is_symlink():
            p.unlink()


def _convert(ds: Dataset, fmt: str, shard_mb: float, folder: Path) -> dict:
    import shutil

    order = stored_order(len(ds.files))
    if fmt in ONE_A_FILE:
        groups = [[i] for i in order]
    else:
        groups = plan_containers(list(ds.sizes), order, shard_mb)
    need, free = int(ds.total_bytes * 1.1), shutil.disk_usage(folder).free
    if need > free:
        raise DatasetError(
            f"converting {len(ds.files)} images to {fmt} in {folder} needs ~{need / MB:.0f} MB, "
            f"{free / MB:.0f} MB are free (lower dataset.num_images or choose another storage.root)"
        )
    print(
        f"[dataset] converting {len(ds.files)} images ({ds.total_bytes / MB:.0f} MB) to {len(groups)} {fmt} "
        + ("file(s), one sample each" if fmt in ONE_A_FILE else f"file(s) of <= {shard_mb:g} MB")
        + f" in {folder}",
        file=sys.stderr,
    )
    t0 = time.monotonic()
    containers, done, next_pct = [], 0, 10
    width = max(5, len(str(len(groups))))
    for k, members in enumerate(groups):
        name = f"part-{k:0{width}d}-of-{len(groups):0{width}d}{SUFFIX[fmt]}"
        tmp = folder / f"{name}.{os.getpid()}.part"
        if (folder / name).is_dir() or (folder / name).is_symlink():
            raise DatasetError(
                f"{folder / name} is a folder or a link where the tool writes a {fmt} file: move it "
                "away (the tool does not remove what it did not write)"
            )
        kept = WRITERS[fmt](tmp, ds, members)
        os.replace(tmp, folder / name)
        containers.append({"name": name, "bytes": os.stat(folder / name).st_size, "members": kept})
        done += len(members)
        pct = int(100 * done / max(1, len(ds.files)))
        if pct >= next_pct or k == len(groups) - 1:
            next_pct = (pct // 10 + 1) * 10
            print(
                f"[dataset] {done}/{len(ds.files)} images converted ({pct}%), {time.monotonic() - t0:.0f} s",
                file=sys.stderr,
            )
    index = {
        "converter": CONVERTER_VERSION,
        "format": fmt,
        "shard_mb": float(shard_mb),
        "source": ds.location,
        "images": len(ds.files),
        "containers": containers,
    }
    tmp = folder / f"{INDEX}.{os.getpid()}.part"
    tmp.write_text(json.dumps(index))
    os.replace(tmp, folder / INDEX)
    return index


def ensure(ds: Dataset, fmt: str, shard_mb: float, cache_root: Path) -> Dataset:
    """``ds`` stored as ``fmt`` under ``cache_root``: converted now or found from an earlier cell.

    One process converts a set at a time (a lock in its folder); the others wait and reuse it.
    """
    import fcntl

    if fmt == "files":  # read as it is; its groups (local shuffle) are consecutive files of ~shard_mb
        if shard_mb <= 0:
            raise DatasetError(f"dataset.shard_mb={shard_mb:g} must be positive")
        blocks = plan_containers(list(ds.sizes), list(range(len(ds.files))), shard_mb)
        return dataclasses.replace(ds, members=tuple(tuple(b) for b in blocks))
    if fmt not in WRITERS:
        raise DatasetError(
            f"dataset.format={fmt} is not a format this tool writes (files, {', '.join(WRITERS)})"
        )
    if shard_mb <= 0:
        raise DatasetError(f"dataset.shard_mb={shard_mb:g} must be positive")
    folder = cache_root / key(ds, fmt, shard_mb)
    folder.mkdir(parents=True, exist_ok=True)
    inuse.hold(folder)  # for the cell's life: a purge refuses the set while a cell reads it
    with open(folder / ".converting.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            index = _valid(folder, fmt)
            if index is None:
                _clear_parts(folder)
                index = _convert(ds, fmt, shard_mb, folder)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return stored(ds, folder, index)


def stored(ds: Dataset, folder: Path, index: dict) -> Dataset:
    """``ds`` with the containers of ``index``; an image the conversion could not read is skipped
    (named, counted as dropped by every run)."""
    containers = tuple(str(folder / c["name"]) for c in index["containers"])
    members = tuple(tuple(c["members"]) for c in index["containers"])
    present = {i for m in members for i in m}
    missing = tuple(ds.files[i] for i in range(len(ds.files)) if i not in present)
    check(index["format"], containers)
    return dataclasses.replace(
        ds,
        format=index["format"],
        containers=containers,
        members=members,
        container_sizes=tuple(c["bytes"] for c in index["containers"]),
        skipped=ds.skipped + missing,
    )


def check(fmt: str, containers: tuple[str, ...]) -> None:
    """Raise FormatError naming the file when an HDF5 or npz container lacks what the reader needs."""
    if fmt == "npz":
        _check_npz(containers)
    if fmt != "hdf5":
        return
    import h5py

    for path in containers:
        try:
            with h5py.File(path, "r") as f:
                absent = [d for d in HDF5_DATASETS if d not in f]
        except OSError as e:
            raise FormatError(f"dataset.format=hdf5: {path} is not a readable HDF5 file ({e})") from None
        if absent:
            raise FormatError(
                f"dataset.format=hdf5: {path} has no dataset {', '.join(repr(a) for a in absent)} "
                f"(it needs {', '.join(HDF5_DATASETS)})"
            )


def _check_npz(containers: tuple[str, ...]) -> None:
    """Each npz container names the arrays a reader loads (its zip directory read, not its arrays)."""
    import zipfile

    for path in containers:
        try:
            with zipfile.ZipFile(path) as z:
                absent = [a for a in NPZ_ARRAYS if f"{a}.npy" not in z.namelist()]
        except (OSError, zipfile.BadZipFile) as e:
            raise FormatError(f"dataset.format=npz: {path} is not a readable npz file ({e})") from None
        if absent:
            raise FormatError(
                f"dataset.format=npz: {path} has no array {', '.join(repr(a) for a in absent)} "
                f"(it needs {', '.join(NPZ_ARRAYS)})"
            )
