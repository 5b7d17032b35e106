"""The list of image files a cell reads: a synthetic set, a folder of class sub-folders, or a file list."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs import owned
from jobs.data import synthetic

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp")
SUBDIR = "datasets"  # in the tool's folder on the tier (jobs.owned)


class DatasetError(ValueError):
    """The dataset settings point at nothing usable; the message names the setting."""


@dataclass(frozen=True)
class Dataset:
    name: str
    source: str
    location: str  # folder that holds the files (or the file list)
    files: tuple[str, ...]  # absolute paths, in a fixed order (the pipeline shuffles)
    labels: tuple[int, ...]  # class index of every file
    sizes: tuple[int, ...]  # bytes of every file at listing time (0 when it cannot be stat'ed)
    num_classes: int
    # listed, but not regular files (FIFOs, sockets, devices, folders): never opened, since reading
    # them can block forever; a run counts them as dropped
    skipped: tuple[str, ...] = ()
    # how the images are stored (jobs.data.formats): "files" reads ``files``; "tfrecord", "hdf5" and "npz"
    # read the ``containers``, each holding the images ``members`` (indices into ``files``) in stored order
    format: str = "files"
    containers: tuple[str, ...] = ()
    members: tuple[tuple[int, ...], ...] = ()
    container_sizes: tuple[int, ...] = ()
    # in an object store (storage.kind=object): where, each image's object key (in ``files``' order), and
    # the files of the embedded server that hold them (what a cold run evicts; none for a user's endpoint)
    store: Any = None  # jobs.storage.objectstore.endpoint.Endpoint
    objects: tuple[str, ...] = ()
    server_files: tuple[str, ...] = ()
    client: str = ""  # the object client the runs read through (jobs.storage.objectstore.clients)
    # the bytes the files take on the tier where that is not their sizes' sum (files with holes: a replay's)
    allocated: int | None = None
    samples: str = "images"  # images (JPEGs a pipeline decodes) or arrays (raw volumes, read whole)

    @property
    def holds_images(self) -> bool:
        """Whether its samples are images a pipeline decodes (not arrays, read as they are)."""
        return self.samples == "images"

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)

    @property
    def storage_files(self) -> tuple[str, ...]:
        """The files a run reads from the tier (evicted, warmed and verified as the data)."""
        if self.store is not None or self.server_files:  # read from an object store, natively or by FUSE
            return self.server_files
        return self.containers if self.format != "files" else self.files

    @property
    def stored_bytes(self) -> int:
        if self.allocated is not None:
            return self.allocated
        return sum(self.container_sizes) if self.format != "files" else self.total_bytes

    def where(self, i: int) -> str:
        """Where image ``i`` is stored: its file, its object, or its container and position in it."""
        if self.store is not None:
            return f"s3://{self.store.bucket}/{self.objects[i]}"
        if self.format == "files":
            return self.files[i]
        for path, members in zip(self.containers, self.members):
            if i in members:
                return f"{path}[{members.index(i)}] ({os.path.basename(self.files[i])})"
        return self.files[i]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _sample(items: list, n: int, seed: int) -> list:
    """``n`` items chosen with ``seed`` in their original order (all of them when n >= len)."""
    if n >= len(items):
        return items
    import random

    keep = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in keep]


def _listed(entry: os.DirEntry) -> bool:
    # Files and links (a dangling or looping link is a dataset defect the run must count, not hide).
    if entry.name.startswith("."):
        return False
    try:
        return entry.is_file() or entry.is_symlink()
    except OSError:  # a link loop: listed, and dropped when the run cannot read it
        return True


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError:
        return False


def _special(path: str) -> bool:
    """Whether ``path`` exists but is not a regular file (reading a FIFO blocks until a writer comes)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False  # missing, dangling or looping: read_file fails at once and the run counts it


def from_folder(path: str) -> list[tuple[str, str]]:
    """(file, class name) for every file in the class sub-folders of ``path``.

    A folder without sub-folders is one class.
    """
    root = Path(path)
    if not root.is_dir():
        raise DatasetError(
            f"dataset.path={path} is not a folder (dataset.source=folder wants a folder of class sub-folders)"
        )
    subdirs = sorted(
        (e for e in os.scandir(root) if _is_dir(e) and not e.name.startswith(".")),
        key=lambda e: e.name,
    )
    out: list[tuple[str, str]] = []
    if subdirs:
        for d in subdirs:
            for e in sorted(os.scandir(d.path), key=lambda e: e.name):
                if _listed(e):
                    out.append((os.path.abspath(e.path), d.name))
    else:
        out = [
            (os.path.abspath(e.path), "")
            for e in sorted(os.scandir(root), key=lambda e: e.name)
            if _listed(e)
        ]
    return out


def from_filelist(path: str) -> list[tuple[str, str]]:
    """(file, class name) for every line of a file list; relative paths are relative to the list."""
    lst = Path(path)
    if not lst.is_file():
        raise DatasetError(
            f"dataset.path={path} is not a file (dataset.source=filelist wants a text file of image paths)"
        )
    try:
        text = lst.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DatasetError(
            f"dataset.path={path} is not a UTF-8 text file of image paths (byte {e.start} "
            f"cannot be decoded; dataset.source=filelist)"
        ) from None
    except OSError as e:
        raise DatasetError(f"dataset.path={path} cannot be read ({e.strerror})") from None
    if "\0" in text:
        raise DatasetError(
            f"dataset.path={path} is a binary file, not a text file of image paths (dataset.source=filelist)"
        )
    out = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        p = Path(line) if os.path.isabs(line) else lst.parent / line
        full = os.path.abspath(p)
        if full in seen:
            # a second read of a file comes from the page cache: the run would not be cold
            raise DatasetError(
                f"dataset.path={path} lists {full} twice (lines {seen[full]} and {number}): "
                "list every file once"
            )
        seen[full] = number
        out.append((full, p.parent.name))
    return out


def has_images(items: list[tuple[str, str]]) -> bool:
    return any(f.lower().endswith(IMAGE_SUFFIXES) for f, _ in items)


def cache_dir(storage_root: str | Path, *below: str) -> Path:
    """The tool's own folder of generated (and, ``converted``, reformatted) datasets on a tier: made and
    checked so that no other user can steer it (jobs.owned)."""
    return owned.under_tool_folder(storage_root, SUBDIR, *below, setting="storage.root")


def resolve(dataset_cfg, storage_root: str, seed: int) -> Dataset:
    """The files of the dataset ``dataset_cfg`` (the cell's typed ``DatasetConf``), generating a synthetic
    set on the storage tier if needed."""
    source = dataset_cfg.source
    n = dataset_cfg.num_images
    if n < 1:
        raise DatasetError(f"dataset.num_images={n} must be at least 1")
    if source == "synthetic":
        spec = synthetic.spec_of(dataset_cfg, seed)
        try:
            folder = synthetic.ensure(spec, cache_dir(storage_root), n)
        except synthetic.NoSpace as e:
            raise DatasetError(
                f"storage.root={storage_root} is too full: {e} (lower dataset.num_images or "
                "choose another storage.root)"
            ) from None
        rows = synthetic.read_manifest(folder)[:n]
        return Dataset(
            name=dataset_cfg.name,
            source=source,
            location=str(folder),
            files=tuple(str(folder / p) for p, _, _ in rows),
            labels=tuple(c for _, c, _ in rows),
            sizes=tuple(b for _, _, b in rows),
            num_classes=spec.num_classes,
            samples=spec.samples,
        )
    if not dataset_cfg.path:
        raise DatasetError(f"dataset.path is required with dataset.source={source}")
    items = from_folder(dataset_cfg.path) if source == "folder" else from_filelist(dataset_cfg.path)
    if not has_images(items):
        raise DatasetError(
            f"dataset.path={dataset_cfg.path} holds no images (looked for {', '.join(IMAGE_SUFFIXES)} files"
            + (" in class sub-folders)" if source == "folder" else " listed in it)")
        )
    items = _sample(items, n, seed)
    skipped = tuple(f for f, _ in items if _special(f))
    if skipped:
        items = [(f, c) for f, c in items if f not in set(skipped)]
        if not items:
            raise DatasetError(
                f"dataset.path={dataset_cfg.path}: none of the listed files is a regular file "
                f"(e.g. {skipped[0]})"
            )
    classes = sorted({c for _, c in items})
    index = {c: i for i, c in enumerate(classes)}
    files = tuple(f for f, _ in items)
    location = dataset_cfg.path if source == "filelist" else os.path.abspath(dataset_cfg.path)
    return Dataset(
        name=dataset_cfg.name,
        source=source,
        location=location,
        files=files,
        labels=tuple(index[c] for _, c in items),
        sizes=tuple(_size(f) for f in files),
        num_classes=len(classes),
        skipped=skipped,
    )


def container_of(ds: Dataset) -> list[str]:
    """The container file of every image of a one-sample-a-file format (npz), "" for one it does not hold."""
    out = [""] * len(ds.files)
    for path, members in zip(ds.containers, ds.members):
        for i in members:
            out[i] = path
    return out
