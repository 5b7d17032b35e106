"""The synthetic generator: size distribution, determinism, layout, reuse."""

import numpy as np
import pytest
from PIL import Image

from jobs.data import synthetic


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
