"""The TF-versus-fio benchmark runs end to end on real files (fio from Debian; .ci/run installs it)."""

import os
import shutil

import pytest

from benchmarks import readonly_vs_fio

needs_fio = pytest.mark.skipif(
    shutil.which("fio") is None and os.environ.get("CI") != "true", reason="fio not installed (apt-get install fio)"
)


@needs_fio
def test_benchmark_prints_tf_as_a_fraction_of_fio(disk_root, capsys):
    rc = readonly_vs_fio.main(["--storage-root", str(disk_root), "--dataset", "caltech101", "--num-images", "128",
                               "--threads", "1,2", "--repeats", "1"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    assert "128 files" in lines[0] and "cold cache" in lines[0]
    assert lines[1].split()[:4] == ["threads", "TF", "MB/s", "fio"]
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == ["1", "2"]
    for r in rows:
        tf, fio, ratio = float(r[1]), float(r[2]), float(r[3])
        assert tf > 0 and fio > 0 and ratio == pytest.approx(tf / fio, rel=0.05)
    assert not any(p.name.startswith("bench-") for p in (disk_root / "iocampaign").iterdir())


@needs_fio
def test_fio_reads_every_byte_of_the_files(tmp_path):
    d = tmp_path / "job0"
    d.mkdir()
    for i in range(4):
        (d / f"{i}.jpg").write_bytes(os.urandom(64 * 1024))
    mb_s, nbytes = readonly_vs_fio.fio_read([d])
    assert nbytes == 4 * 64 * 1024 and mb_s > 0
