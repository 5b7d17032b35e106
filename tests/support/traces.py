"""Traces whose calls are known: a real DFTracer trace of a small program (dftracer's preload library, as a
user runs it), and PyDarshan's shipped sample logs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobs.execution import traced

KIB = 1024
A_SIZE, B_SIZE, WRITTEN = 1 << 20, 100_000, 5000
# what the traced process does: a.bin read whole in 64 KiB reads (and the read that finds its end), one
# 4 KiB read after a seek to 1000, one pread of 100 bytes at 500,000; b.bin read whole by Python's
# file object after a pause of GAP_S (think time); c.out written once
GAP_S = 0.3
PROGRAM = f"""
import os, sys, time
data = sys.argv[1]
fd = os.open(os.path.join(data, "a.bin"), os.O_RDONLY)
while os.read(fd, {64 * KIB}):
    pass
os.lseek(fd, 1000, os.SEEK_SET)
os.read(fd, 4096)
os.pread(fd, 100, 500_000)
os.close(fd)
time.sleep({GAP_S})
with open(os.path.join(data, "b.bin"), "rb") as f:
    f.read()
with open(os.path.join(data, "c.out"), "wb") as f:
    f.write(b"x" * {WRITTEN})
"""


def sample(name: str) -> Path:
    from darshan.log_utils import get_log_path

    return Path(get_log_path(name))


def program_trace(base: Path) -> Path:
    """A DFTracer trace of PROGRAM run in ``base`` (its files in ``base/data``, its trace in
    ``base/trace``)."""
    data, out = base / "data", base / "trace"
    data.mkdir()
    out.mkdir()
    (data / "a.bin").write_bytes(os.urandom(A_SIZE))
    (data / "b.bin").write_bytes(os.urandom(B_SIZE))
    env = {**os.environ, **traced.environment(out, [str(data)])}
    p = subprocess.run([sys.executable, "-c", PROGRAM, str(data)], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    (trace,) = out.glob("*.pfw.gz")
    return trace
