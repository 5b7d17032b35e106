"""The project installs as a package, and conf/ is found from the installed copy, not only a checkout."""

import os
import subprocess
import sys
import zipfile

from support.paths import ROOT


def test_wheel_carries_conf_and_composes_from_site_packages(tmp_path):
    wheels = tmp_path / "wheels"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    (wheel,) = wheels.glob("iocampaign-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for f in (
        "conf/config.yaml",
        "conf/storage/lustre.yaml",
        "conf/dataset/caltech101.yaml",
        "campaign/__main__.py",
        "jobs/frameworks/tensorflow/reading.py",
        "analysis/figures/bandwidth.py",
    ):
        assert f in names, f
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", "import campaign, sys; print(campaign.__file__)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.stdout.startswith(str(site)), out
    cfg = subprocess.run(
        [sys.executable, "-m", "campaign", "--cfg", "job", "dataset=caltech101", "storage=tmpfs"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    )
    assert cfg.returncode == 0, cfg.stderr
    assert "num_images: 9144" in cfg.stdout and "root: /dev/shm" in cfg.stdout
    assert not (elsewhere / "outputs").exists()
