"""A new user's handholds: a quiet terminal (TensorFlow's start-up lines kept in the cell's log, from every
process), a help that lists the presets and the study's options, a command that shows and frees the tool's
disk use, and the small refusals and labels a first hour trips over."""

import os
import re
import subprocess
import sys

from conftest import ROOT

NOISE = re.compile(r"cuInit|oneDNN|absl|TF_ENABLE_ONEDNN_OPTS|cuda", re.IGNORECASE)


def _run(module: str, *args: str, cwd, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -m <module>`` as a user types it: no TF_CPP_MIN_LOG_LEVEL of the Makefile's."""
    base = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def test_a_multi_task_cell_prints_no_tensorflow_start_up_lines(tmp_path):
    """The campaign's process and each task process import TensorFlow: their start-up lines (absl's, oneDNN's,
    the CUDA stubs', cuInit's) go to the cell's tensorflow_startup.log, none to the terminal."""
    root = tmp_path / "root"
    root.mkdir()
    out = tmp_path / "c"
    p = _run("campaign", "-m", "workload=microbench", "platform.tasks_per_node=2", "dataset.num_images=32", "batch_size=8",
             "repeats=1", "warmup=0", "storage=local", f"storage.root={root}", f"hydra.sweep.dir={out}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    noisy = [x for x in (p.stdout + p.stderr).splitlines() if NOISE.search(x)]
    assert noisy == [], noisy
    log = (out / "0" / "tensorflow_startup.log").read_text()
    assert log.count("absl::InitializeLog") >= 3  # the campaign's own import and both tasks'
