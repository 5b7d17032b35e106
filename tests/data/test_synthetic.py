"""The synthetic generator: size distribution, determinism, layout, reuse."""

import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from jobs.data import synthetic
from support.commands import python_env
from support.files import tmpfs
from support.skips import needs_root


def spec(name, median_kb, spread, bpp, classes=10, seed=0, gray=0.0):
    return synthetic.SyntheticSpec(name, classes, median_kb, spread, bpp, gray, seed)


@pytest.mark.cells
@pytest.mark.parametrize("median_kb,spread,bpp", [(112, 0.5, 0.6), (12, 0.55, 0.2)])
def test_size_distribution_matches_the_preset(tmp_path, median_kb, spread, bpp):
    s = spec("set", median_kb, spread, bpp)
    folder = synthetic.ensure(s, tmp_path, 300)
    sizes = np.array([b for _, _, b in synthetic.read_manifest(folder)])
    assert len(sizes) == 300
    assert abs(np.median(sizes) / (median_kb * 1000) - 1) < 0.10
    p10, p90 = np.percentile(sizes, [10, 90])
    assert p90 / p10 > 2.0  # a realistic spread, not one constant size
    assert len(set(sizes.tolist())) > 250


@pytest.mark.cells
def test_large_images_have_the_presets_bytes_per_pixel(tmp_path):
    """Decode cost follows from the pixels: an ImageNet-sized image's JPEG has the preset's bytes per pixel
    (the first generator's noise table gave 0.54 for 0.6, 10% more pixels than the preset says)."""
    s = spec("set", 112, 0.5, 0.6)
    folder = synthetic.ensure(s, tmp_path, 60)
    density = []
    for rel, _, nbytes in synthetic.read_manifest(folder):
        with Image.open(folder / rel) as im:
            density.append(nbytes / (im.size[0] * im.size[1]))
    assert abs(np.median(density) / 0.6 - 1) < 0.05, np.median(density)


def test_files_are_real_jpegs_in_class_folders_with_a_manifest(tmp_path):
    s = spec("set", 12, 0.5, 0.2, classes=4, gray=0.5)
    folder = synthetic.ensure(s, tmp_path, 20)
    rows = synthetic.read_manifest(folder)
    modes = set()
    for rel, cls, nbytes in rows:
        p = folder / rel
        assert p.parent.name == f"class_{cls:04d}"
        assert p.stat().st_size == nbytes
        with Image.open(p) as im:
            assert im.format == "JPEG"
            modes.add(im.mode)
            assert min(im.size) >= 16
    assert modes == {"RGB", "L"}
    assert (folder / synthetic.META).exists()


def test_deterministic_from_seed_and_prefix_stable(tmp_path):
    a = spec("set", 12, 0.5, 0.2, seed=7)
    assert synthetic.encode(a, 3) == synthetic.encode(a, 3)
    assert synthetic.encode(a, 3) != synthetic.encode(spec("set", 12, 0.5, 0.2, seed=8), 3)
    f1 = synthetic.ensure(a, tmp_path / "x", 10)
    f2 = synthetic.ensure(a, tmp_path / "y", 25)
    assert synthetic.read_manifest(f1) == synthetic.read_manifest(f2)[:10]


def test_generated_once_then_extended_not_regenerated(tmp_path, capsys):
    s = spec("set", 12, 0.5, 0.2)
    folder = synthetic.ensure(s, tmp_path, 10)
    first = folder / synthetic.read_manifest(folder)[0][0]
    mtime = first.stat().st_mtime_ns
    assert "generating 10" in capsys.readouterr().err
    synthetic.ensure(s, tmp_path, 10)
    assert capsys.readouterr().err == ""  # reused, nothing generated
    synthetic.ensure(s, tmp_path, 16)
    err = capsys.readouterr().err
    assert "generating 6" in err and "16/16 images (100%)" in err
    assert first.stat().st_mtime_ns == mtime
    assert len(synthetic.read_manifest(folder)) == 16


def test_a_changed_spec_gets_its_own_folder(tmp_path):
    assert spec("set", 12, 0.5, 0.2).key() != spec("set", 13, 0.5, 0.2).key()


def _tree(folder):
    """Every file and folder under ``folder``, relative, links not followed."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@needs_root
def test_a_generation_the_full_disk_ends_removes_the_set_it_began(tmp_path):
    """A real tmpfs that runs out of inodes (ENOSPC) part-way through a new set, inside a cell's reading
    scope: one line saying the file system filled, and nothing of the set is left, its locks included.
    Before: its images and ``.generating.lock`` stayed, listed ``[partial: …]`` by ``campaign.cache list``."""
    from campaign import cache
    from jobs import owned
    from jobs.data import datasets, inuse

    with tmpfs(tmp_path / "root", "64m,nr_inodes=24") as root:  # bytes for all, files for ~12 images
        with inuse.reading(), pytest.raises(synthetic.NoSpace, match="the file system filled") as e:
            synthetic.ensure(spec("set", 3, 0.3, 0.2, classes=2), datasets.cache_dir(root), 64)
        assert "\n" not in str(e.value)
        assert _tree(owned.tool_folder(root) / "datasets") == []
        assert cache.entries([str(root)]) == []


def test_a_generation_that_fails_removes_only_the_images_it_made(tmp_path):
    """A set of 2 images extended to 40, failing on a file of the user's where a class folder goes: the
    set is as it was (its 2 images, manifest and count), the images and the class folder this generation
    made are gone, the user's file stays; once it is moved away, the set extends."""
    s = spec("set", 3, 0.3, 0.2, classes=4)
    folder = synthetic.ensure(s, tmp_path, 2)
    (folder / "class_0003").write_text("the user's\n")
    tree, files = _tree(folder), {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    with pytest.raises(FileExistsError):
        synthetic.ensure(s, tmp_path, 40)
    assert _tree(folder) == tree and {p: p.read_bytes() for p in files} == files
    (folder / "class_0003").unlink()
    assert len(synthetic.read_manifest(synthetic.ensure(s, tmp_path, 40))) == 40


def test_a_generation_a_signal_ends_leaves_nothing(tmp_path):
    """SIGTERM to a real process generating a set, as a campaign routes it (``jobs.interrupts``): the
    process ends by the signal's exception and the set's folder is gone."""
    code = (
        "import sys\n"
        "from jobs import interrupts\n"
        "from jobs.data import inuse, synthetic\n"
        "interrupts.install()\n"
        "from pathlib import Path\n"
        "with inuse.reading():\n"
        "    s = synthetic.SyntheticSpec('set', 4, 3, 0.3, 0.2, 0, 0)\n"
        f"    synthetic.ensure(s, Path({str(tmp_path)!r}), 1000)\n"  # threads, 62 images a chunk
    )
    p = subprocess.Popen([sys.executable, "-c", code], env=python_env(), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("*/class_*/img_*.jpg")):
            assert p.poll() is None and time.monotonic() < deadline, p.stderr.read()
            time.sleep(0.01)
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=120)[1]
    finally:
        p.kill()
        p.wait()
    assert p.returncode != 0 and "Interrupted: SIGTERM" in err, err
    assert list(tmp_path.iterdir()) == []
