"""Page-cache eviction and its verification on real files of a real disk."""

import os

import pytest

from jobs.storage import cache


def _files(folder, n=20, size=256 * 1024):
    paths = []
    for i in range(n):
        p = folder / f"f{i}.bin"
        p.write_bytes(os.urandom(size))
        paths.append(str(p))
    return paths


def _read_all(paths):
    before = cache.process_read_bytes()
    cache.warm(paths)
    return cache.process_read_bytes() - before


def test_dirty_files_are_flushed_and_evicted(disk_root):
    paths = _files(disk_root)  # freshly written: dirty and resident
    total = sum(os.path.getsize(p) for p in paths)
    res, tot = cache.residency(paths)
    assert tot == total and res > 0.9 * total
    report = cache.evict(paths)
    assert report.files == len(paths) and report.bytes == total
    assert report.resident_bytes_after < 0.02 * total
    device = _read_all(paths)  # a cold read goes to the device...
    assert device >= 0.9 * total
    assert cache.residency(paths)[0] > 0.9 * total
    assert _read_all(paths) < 0.1 * total  # ...and a warm one does not


def test_evict_skips_unreadable_files(disk_root):
    paths = _files(disk_root, n=2) + [str(disk_root / "missing.bin")]
    assert cache.evict(paths).files == 2


def test_drop_caches_refused_without_permission(disk_root, monkeypatch):
    monkeypatch.setattr(cache, "_drop_caches", lambda: False)  # unit check of the refusal path
    with pytest.raises(PermissionError, match="drop_caches"):
        cache.evict(_files(disk_root, n=1), drop_caches=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="drop_caches needs root")
def test_drop_caches_as_root(disk_root):
    paths = _files(disk_root, n=3)
    assert cache.evict(paths, drop_caches=True).drop_caches


def test_tmpfs_is_memory_not_cold():
    assert cache.classify("cold", False, "tmpfs", 0, 1000) == cache.MEMORY
    assert cache.classify("cold", True, "tmpfs", 0, 1000) == cache.MEMORY
    # a "memory" preset pointed at a disk folder is judged by the disk's counters
    assert cache.classify("cold", False, "ext4", 1000, 1000) == cache.COLD


def test_classification_from_device_bytes():
    assert cache.classify("cold", False, "ext4", 1_000, 1_000) == cache.COLD
    assert cache.classify("cold", False, "ext4", 500, 1_000) == cache.NOT_COLD
    assert cache.classify("warm", False, "ext4", 0, 1_000) == cache.WARM
    assert cache.classify("warm", False, "ext4", 800, 1_000) == cache.NOT_WARM
    # where the counter does not see the reads, never claim cold from silence
    assert cache.classify("cold", True, "lustre", 0, 1_000) == cache.UNKNOWN
    # a kind whose reads this machine's counters may miss (Backend.sighted_only): a sighting proves cold
    assert cache.classify("cold", True, "ext4", 0, 1_000) == cache.UNKNOWN
    assert cache.classify("cold", True, "ext4", 1_000, 1_000) == cache.COLD
    assert cache.classify("cold", False, "nfs4", 0, 1_000) == cache.UNKNOWN
    assert cache.classify("cold", False, "fuse.sshfs", 0, 1_000) == cache.UNKNOWN
    assert cache.classify("cold", False, "ext4", None, 1_000) == cache.UNKNOWN
