"""TensorFlow's import, once per process, with its start-up chatter in a file instead of on the
terminal: absl's "log messages before absl::InitializeLog()" line, oneDNN's notice, the CUDA stubs'
"could not find cuda drivers" and cuInit's error on a machine without a GPU. They are written by C++
code straight to file descriptor 2 before TensorFlow reads ``TF_CPP_MIN_LOG_LEVEL``, so they are
caught there; later messages (and every Python warning) reach the terminal as before.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

LOG = "tensorflow_startup.log"


def import_quietly(log: Path) -> bool:
    """Import TensorFlow and let it look for its devices with stderr sent to ``log`` (appended).
    Returns False when TensorFlow was already imported (nothing done)."""
    if "tensorflow" in sys.modules:
        return False
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(log, "ab") as f:
            os.dup2(f.fileno(), 2)
            import tensorflow as tf

            tf.config.list_physical_devices()  # where the CUDA platform is set up (cuInit)
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
    return True
