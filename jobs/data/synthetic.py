"""Synthetic JPEG datasets that look like the real ones to the I/O system.

File sizes follow a log-normal distribution around the preset's median; pixel dimensions follow
from the preset's JPEG bytes per pixel, so decode cost is realistic too. Image ``i`` depends only
on ``(seed, i)``: a smaller set is a prefix of a larger one, and a set generated once is extended,
never regenerated.

A set of arrays (``samples="arrays"``: unet3d's volumes, as DLIO generates them) holds random bytes of
each sample's size instead of a JPEG: read whole, never decoded.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import functools
import hashlib
import io
import json
import os
import re
import stat
import statistics
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path

GENERATOR_VERSION = 2  # 2: noise from a table of normal quantiles, chosen for the preset's density
MANIFEST = "manifest.csv"
META = "dataset.json"
LOCK = ".generating.lock"
OVERHEAD = 1.1  # bytes on disk per byte of JPEG (sizes within +-5% of their target, block rounding)
# From this many images to generate, worker processes; below it, threads of this process. numpy's noise and
# Pillow's resize and JPEG encoder release the GIL: two threads encode 1.9x as fast as one (about 5% of an
# image's time holds the GIL), as fast as two processes, without starting an interpreter per worker (0.3-0.7
# CPU-seconds each). Processes scale past that 5% on many cores, where a large set is worth their start.
PROCESSES_FROM = 1024


class NoSpace(ValueError):
    """The file system cannot hold the images still to generate; nothing of them is left."""


@dataclass(frozen=True)
class SyntheticSpec:
    name: str
    num_classes: int
    median_kb: float
    size_spread: float
    bytes_per_pixel: float
    grayscale_fraction: float
    seed: int
    samples: str = "images"  # images (JPEGs) or arrays (random bytes: raw volumes, never decoded)

    def key(self) -> str:
        """Folder name of this spec's cache: the name and a hash of everything that shapes a file (a set of
        images hashes as it did before sets of arrays, so that it is not generated again)."""
        shape = asdict(self)
        if shape["samples"] == "images":
            del shape["samples"]
        blob = json.dumps({**shape, "generator": GENERATOR_VERSION}, sort_keys=True)
        return f"{self.name}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


def spec_of(dataset_cfg, seed: int) -> SyntheticSpec:
    """The spec of a cell's synthetic set (``dataset_cfg``: its ``DatasetConf``); the casts keep the set's
    cache key (a hash of these) one per set."""
    return SyntheticSpec(
        name=dataset_cfg.name,
        num_classes=int(dataset_cfg.num_classes),
        median_kb=float(dataset_cfg.median_kb),
        size_spread=float(dataset_cfg.size_spread),
        bytes_per_pixel=float(dataset_cfg.bytes_per_pixel),
        grayscale_fraction=float(dataset_cfg.grayscale_fraction),
        seed=seed,
        samples=str(getattr(dataset_cfg, "samples", "images")),
    )


def relpath(spec: SyntheticSpec, i: int) -> str:
    if spec.samples == "arrays":
        return f"class_{i % spec.num_classes:04d}/vol_{i:07d}.bin"
    return f"class_{i % spec.num_classes:04d}/img_{i:07d}.jpg"


def target_bytes(spec: SyntheticSpec, i: int) -> int:
    import numpy as np

    rng = np.random.default_rng([spec.seed, i, 1])
    z = float(np.clip(rng.standard_normal(), -3.0, 3.0))
    return max(600, int(spec.median_kb * 1000 * np.exp(spec.size_spread * z)))


# The generator's colour images at JPEG quality 90, by the amplitude of their noise (its standard deviation
# in grey levels): bytes per pixel, and the bytes an image has besides (headers, tables, its smooth field).
# Fitted on images of 50,000 and 200,000 pixels, 30 of each (medians); one image differs from its line by
# 1-3%. So the noise gives the preset's density, and the first size tried lands within 5% of the target.
_AMPLITUDES = (2, 4, 6, 8, 12, 16, 24, 32, 40, 48)
_DENSITY = (0.1114, 0.1701, 0.2328, 0.2864, 0.3744, 0.4528, 0.5595, 0.6359, 0.6952, 0.7445)
_FIXED_BYTES = (2837, 2511, 2337, 2281, 2134, 2058, 2076, 2069, 1996, 2024)


def _noise_for(bytes_per_pixel: float) -> tuple[float, float, float]:
    """(amplitude, bytes per pixel, fixed bytes) of the noise that gives this density (within the table's)."""
    import numpy as np

    d = float(np.clip(bytes_per_pixel, _DENSITY[0], _DENSITY[-1]))
    return (
        float(np.interp(d, _DENSITY, _AMPLITUDES)),
        d,
        float(np.interp(d, _DENSITY, _FIXED_BYTES)),
    )


@functools.cache
def _gaussian_levels():
    """The 256 quantiles of a standard normal: one random byte per sample picks one (cheaper than drawing
    normals, 1.8 against 12 ms for an ImageNet-sized image, with the same spread)."""
    import numpy as np

    normal = statistics.NormalDist()
    return np.array([normal.inv_cdf((k + 0.5) / 256) for k in range(256)])


def encode(spec: SyntheticSpec, i: int) -> bytes:
    """The bytes of sample ``i``: a JPEG of a smooth colour field plus noise, sized to its target; in a set
    of arrays, random bytes of exactly its target (a volume's voxels: DLIO's data, which no codec shrinks)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng([spec.seed, i, 2])
    target = target_bytes(spec, i)
    if spec.samples == "arrays":
        return rng.integers(0, 256, target, dtype=np.uint8).tobytes()
    gray = rng.random() < spec.grayscale_fraction
    aspect = float(rng.uniform(0.7, 1.45))
    grid = rng.integers(0, 256, (int(rng.integers(3, 12)), int(rng.integers(3, 12)), 3), dtype=np.uint8)
    amplitude, density, fixed = _noise_for(spec.bytes_per_pixel)
    levels = np.round(_gaussian_levels() * amplitude).astype(np.int16)
    pixels = max(target - fixed, target / 4) / density
    data = b""
    for _ in range(3):
        w = max(16, int(round((pixels * aspect) ** 0.5)))
        h = max(16, int(round(pixels / w)))
        base = levels.take(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        base += np.asarray(Image.fromarray(grid).resize((w, h), Image.BILINEAR))
        img = Image.fromarray(np.clip(base, 0, 255, out=base).astype(np.uint8))
        if gray:
            img = img.convert("L")
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=90)
        data = buf.getvalue()
        ratio = target / len(data)
        if 0.95 < ratio < 1.05:
            break
        pixels *= ratio
    return data


def _write_chunk(spec: SyntheticSpec, root: str, start: int, stop: int) -> list[tuple[int, str, int, int]]:
    rows = []
    for i in range(start, stop):
        rel = relpath(spec, i)
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = encode(spec, i)
        tmp = f"{path}.{os.getpid()}.part"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:  # a full disk, a signal: no cut-off file stays
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        rows.append((i, rel, i % spec.num_classes, len(data)))
    return rows


def read_manifest(folder: Path) -> list[tuple[str, int, int]]:
    """(relative path, class, bytes) of every image of a generated set, in index order."""
    with open(folder / MANIFEST, newline="") as f:
        return [(r["path"], int(r["class"]), int(r["bytes"])) for r in csv.DictReader(f)]


def estimate_bytes(spec: SyntheticSpec, start: int, stop: int) -> int:
    """Disk space images ``start``..``stop`` will take (their target sizes, with overhead)."""
    return int(sum(target_bytes(spec, i) + 4096 for i in range(start, stop)) * OVERHEAD)


def _repair(spec: SyntheticSpec, folder: Path, rows: list[tuple[int, str, int, int]]) -> int:
    """Regenerate the images of a set whose file is missing or has another size than its manifest
    says (a damaged set is never measured as it is); returns how many were redone."""
    bad = []
    for i, rel, _, size in rows:
        try:
            ok = os.stat(folder / rel).st_size == size
        except OSError:
            ok = False
        if not ok:
            bad.append(i)
    if bad:
        print(
            f"[dataset] {len(bad)} {spec.samples} of {folder} are missing or damaged: regenerating them",
            file=sys.stderr,
        )
        for i in bad:
            _write_chunk(spec, str(folder), i, i + 1)
    return len(bad)


def ensure(spec: SyntheticSpec, cache_root: Path, count: int, workers: int | None = None) -> Path:
    """Make sure the first ``count`` images of ``spec`` exist under ``cache_root``; return the folder.

    Generation shows progress on stderr and extends an existing set instead of redoing it; one
    process generates a set at a time (a lock in its folder), others wait and then reuse it.
    Raises NoSpace before writing anything when the file system is too full for the rest.
    """
    import fcntl

    from jobs.data import inuse

    folder = cache_root / spec.key()
    folder.mkdir(parents=True, exist_ok=True)
    inuse.hold(folder)  # for the cell's life: a purge refuses the set while a cell reads it
    with open(folder / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _ensure_locked(spec, folder, count, workers)
        except BaseException:
            _discard(folder)  # a new set that failed: nothing of it stays, unless another cell waits for it
            raise
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _discard(folder: Path) -> None:
    """Remove a set's folder that holds no set (no ``dataset.json``) and nothing but its two locks, once no
    other cell holds its reading lock (one that waits to generate it holds it): the same lock a purge takes,
    so a cell that comes meanwhile waits, then makes the folder again (``inuse.hold``)."""
    import fcntl

    from jobs.data import inuse

    try:
        if (folder / META).exists() or set(os.listdir(folder)) - {LOCK, inuse.READING}:
            return
    except OSError:  # gone already
        return
    inuse.release(folder)
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(folder / inuse.READING, flags, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return
    try:
        for name in (LOCK, inuse.READING):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(folder / name)
        with contextlib.suppress(OSError):
            folder.rmdir()
    finally:
        os.close(fd)


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min"


def _pool(todo: int, workers: int) -> Executor:
    """The workers that encode ``todo`` images: threads for a small set, processes for a large one."""
    if todo < PROCESSES_FROM:
        return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iocampaign-generate")
    return ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"))


def _ensure_locked(spec: SyntheticSpec, folder: Path, count: int, workers: int | None) -> Path:
    have = 0
    rows: list[tuple[int, str, int, int]] = []
    if (folder / META).exists() and (folder / MANIFEST).exists():
        have = json.loads((folder / META).read_text())["count"]
        rows = [(i, p, c, b) for i, (p, c, b) in enumerate(read_manifest(folder))][:have]
        have = len(rows)
    _repair(spec, folder, rows[:count])
    if have >= count:
        return folder
    import shutil

    need, free = estimate_bytes(spec, have, count), shutil.disk_usage(folder).free
    if need > free:
        raise NoSpace(
            f"generating {count - have} synthetic {spec.samples} in {folder} needs ~{need / 1e6:.0f} MB, "
            f"{free / 1e6:.0f} MB are free"
        )
    workers = workers or max(1, min(os.cpu_count() or 1, 8))
    before = _present(folder, _classes(spec, have, count))  # never removed, whatever happens
    try:
        return _generate(spec, folder, rows, have, count, workers)
    except BaseException as e:
        _undo(spec, folder, have, count, before)
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            raise NoSpace(
                f"generating {count - have} synthetic {spec.samples} in {folder}: the file system filled "
                f"({e.strerror}); the images this generation made were removed"
            ) from None
        raise


def _generate(
    spec: SyntheticSpec,
    folder: Path,
    rows: list[tuple[int, str, int, int]],
    have: int,
    count: int,
    workers: int,
) -> Path:
    """Images ``have``..``count`` written, then the manifest and ``dataset.json`` naming all ``count``."""
    todo = count - have
    chunk = max(16, min(256, todo // (workers * 8) or 16))
    starts = list(range(have, count, chunk))
    t0 = time.monotonic()
    done, next_pct = 0, 10
    line = f"[dataset] generating {todo} synthetic {spec.samples} of {spec.name} into {folder}"
    print(line, file=sys.stderr)
    with _pool(todo, workers) as pool:
        futures = [pool.submit(_write_chunk, spec, str(folder), s, min(s + chunk, count)) for s in starts]
        for fut in futures:
            try:
                new = fut.result()
            except BaseException:  # a signal or a failed chunk: the chunks not started yet are not written
                pool.shutdown(cancel_futures=True)
                raise
            rows.extend(new)
            done += len(new)
            pct = int(100 * done / todo)
            if pct >= next_pct or done == todo:
                next_pct = (pct // 10 + 1) * 10
                mb, spent = sum(r[3] for r in rows) / 1e6, time.monotonic() - t0
                # at the pace so far
                left = f", about {_seconds(spent / done * (todo - done))} left" if done < todo else ""
                print(
                    f"[dataset] {have + done}/{count} images ({pct}%), {mb:.0f} MB, {spent:.0f} s{left}",
                    file=sys.stderr,
                )
    rows.sort()
    tmp = folder / f"{MANIFEST}.{os.getpid()}.part"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "class", "bytes"])
        w.writerows((p, c, b) for _, p, c, b in rows)
    os.replace(tmp, folder / MANIFEST)
    meta = {"spec": asdict(spec), "generator": GENERATOR_VERSION, "count": count}
    tmp = folder / f"{META}.{os.getpid()}.part"
    tmp.write_text(json.dumps(meta, indent=2))
    os.replace(tmp, folder / META)
    return folder


# an image or an array, or one cut off as it was written
_OURS = re.compile(r"(?:img_(\d{7})\.jpg|vol_(\d{7})\.bin)(\.\d+\.part)?")


def _classes(spec: SyntheticSpec, have: int, count: int) -> list[str]:
    """The class folders images ``have``..``count`` go in."""
    return sorted(
        {f"class_{i % spec.num_classes:04d}" for i in range(have, min(count, have + spec.num_classes))}
    )


def _real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _present(folder: Path, classes: list[str]) -> set[str]:
    """What the set's folder and the class folders a generation writes in hold before it starts."""
    found = set(os.listdir(folder))
    for c in classes:
        if _real_dir(folder / c):
            found.update(f"{c}/{name}" for name in os.listdir(folder / c))
    return found


def _remove_own(path: Path) -> None:
    """``path`` unlinked if it is a file of the user's (a link, a folder, another user's file stay)."""
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            os.unlink(path)


def _undo(spec: SyntheticSpec, folder: Path, have: int, count: int, before: set[str]) -> None:
    """Remove what a failed generation made: its images (``have``..``count``, not there before it), files it
    cut off, the class folders it made once empty, a manifest of a set that had none. The set is then as it
    was: ``dataset.json`` still names the images it had, and each of them is still there."""
    for c in _classes(spec, have, count):
        if not _real_dir(folder / c):  # never entered through a link
            continue
        for name in os.listdir(folder / c):
            m = _OURS.fullmatch(name)
            if m is None or f"{c}/{name}" in before:
                continue
            i = int(m[1] or m[2])
            if have <= i < count and relpath(spec, i).startswith(c + "/"):
                _remove_own(folder / c / name)
        if c not in before:
            with contextlib.suppress(OSError):
                (folder / c).rmdir()
    for name in (f"{MANIFEST}.{os.getpid()}.part", f"{META}.{os.getpid()}.part"):
        _remove_own(folder / name)
    if MANIFEST not in before and not (folder / META).exists():
        _remove_own(folder / MANIFEST)  # written, but not the dataset.json that would make it a set
