"""How fast this machine is, printed beside a benchmark's times so that times from two machines can be
compared: the CPU-s a fresh Python takes to import TensorFlow, which most cells, warm servers and the
suite's tests do. On the project's 2-core machines it took 2.6 to 8.9 CPU-s, and the suite's time
followed it (docs/benchmarks.md, "The README's times")."""

from __future__ import annotations

import os
import resource
import subprocess
import sys


def tensorflow_import_cpu_s(python: str = sys.executable) -> float:
    """User and system CPU-s of ``python -c "import tensorflow"`` in a process of its own."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [python, "-c", "import tensorflow"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def yardstick(python: str = sys.executable) -> str:
    """One line that says how fast this machine is."""
    return f"this machine: a fresh Python imports TensorFlow in {tensorflow_import_cpu_s(python):.1f} CPU-s"
