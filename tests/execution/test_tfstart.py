"""TensorFlow's import for a cell that builds no Keras model: without Keras's code (0.6-0.8 s of the
import), Keras still there on first use, and the start-up chatter in the cell's log, not on the terminal.
Without JAX either (TFLite's converter imports it where installed), which a JAX cell then imports as usual."""

import re
import subprocess
import sys

import pytest

from support.paths import ROOT


@pytest.mark.cells
def test_tensorflow_without_keras_until_its_first_use(tmp_path):
    log = tmp_path / "tensorflow_startup.log"
    code = (
        "import sys, time; from pathlib import Path; from jobs.execution import tfstart\n"
        f"assert tfstart.import_quietly(Path({str(log)!r}), keras=False)\n"
        "import gc; print('frozen:', gc.get_freeze_count())\n"
        "import tensorflow as tf\n"
        "loaded = [m for m in sys.modules if m.startswith('keras')][:3]\n"
        "print('keras imported:', 'keras' in sys.modules, loaded)\n"
        "total = tf.data.Dataset.range(4).reduce(tf.constant(0, tf.int64), lambda a, b: a + b)\n"
        "print('tf.data:', int(total))\n"
        "jax = [m for m in sys.modules if m == 'jax' or m.startswith(('jax.', 'jaxlib'))]\n"
        "print('jax imported:', jax[:3])\n"
        "finders = [type(f).__name__ for f in sys.meta_path if type(f).__name__ == '_Later']\n"
        "print('finders left:', finders)\n"
        "print('later:', tf.keras.optimizers.Adam.__module__)\n"
        "assert not tfstart.import_quietly(Path('/nonexistent/never-written.log'))  # once per process\n"
        "import jax.numpy as jnp\n"
        "print('jax later:', int(jnp.arange(4).sum()))\n"
    )
    # a later cell that builds a Keras model gets Keras before its runs, not inside its first one
    later = (
        "import sys; from pathlib import Path; from jobs.execution import tfstart\n"
        f"tfstart.import_quietly(Path({str(log)!r}), keras=False)\n"
        "assert 'keras' not in sys.modules\n"
        f"assert not tfstart.import_quietly(Path({str(log)!r}), keras=True)\n"
        "print('keras before the runs:', 'keras' in sys.modules)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (
        "keras imported: False []" in p.stdout and "tf.data: 6" in p.stdout and "finders left: []" in p.stdout
    )
    assert "jax imported: []" in p.stdout and "jax later: 6" in p.stdout, p.stdout
    # TensorFlow's objects out of the cyclic collector's way: a full collection would walk them all
    assert int(re.search(r"frozen: (\d+)", p.stdout)[1]) > 200_000, p.stdout
    assert "later: keras.src.optimizers.adam" in p.stdout  # Keras imported on its first use, as usual
    assert "absl::InitializeLog" in log.read_text() and "absl::InitializeLog" not in p.stderr
    p = subprocess.run([sys.executable, "-c", later], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "keras before the runs: True" in p.stdout, p.stderr[-2000:]
