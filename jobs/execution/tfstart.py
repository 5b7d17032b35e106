"""TensorFlow's import, once per process, with its start-up chatter in a file instead of on the
terminal: absl's "log messages before absl::InitializeLog()" line, oneDNN's notice, the CUDA stubs'
"could not find cuda drivers" and cuInit's error on a machine without a GPU. They are written by C++
code straight to file descriptor 2 before TensorFlow reads ``TF_CPP_MIN_LOG_LEVEL``, so they are
caught there; later messages (and every Python warning) reach the terminal as before.

A cell whose workload builds no Keras model (``Workload.uses_keras = False``: the micro-benchmark, the
emulated accelerator) imports TensorFlow without Keras: TensorFlow 2.16+ imports Keras eagerly at its
own import ("so that registrations happen at load time", inside a ``try`` that passes on ImportError),
0.6-0.8 s of a 2.1 s import here. Keras is then imported on its first use (``tf.keras``), as usual.

Nor does TensorFlow's import bring in JAX where it is installed (``framework=jax``): TFLite's converter
imports ``jax.jit`` at load time if it can, 0.5-0.7 s of CPU per process that no TensorFlow cell uses.
A JAX cell imports JAX itself, as usual.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import sys
import tempfile
from pathlib import Path

LOG = "tensorflow_startup.log"


class _Later(importlib.abc.MetaPathFinder):
    """While TensorFlow imports: its eager imports of these packages fail (TensorFlow passes over them:
    each is inside a ``try`` that takes ImportError)."""

    def __init__(self, packages: tuple[str, ...]):
        self.packages = packages
        self.below = tuple(f"{p}." for p in packages)  # asked of every module TensorFlow imports: made once

    def find_spec(self, name, path=None, target=None):
        if name in self.packages or name.startswith(self.below):
            raise ImportError(f"{name}: imported on first use (jobs.execution.tfstart)")
        return None


def _later(keras: bool) -> _Later:
    """What TensorFlow's import leaves out: Keras's code unless ``keras`` (or already imported), and JAX
    unless already imported."""
    packages = () if keras or "keras" in sys.modules else ("keras.src",)
    if "jax" not in sys.modules:
        packages += ("jax", "jaxlib")
    return _Later(packages)


# what TensorFlow's import printed in the warm server this process was forked from (``preload``): None
# unless TensorFlow was imported there and this process has not looked for its devices yet
_preloaded: bytes | None = None


def import_quietly(log: Path, keras: bool = True) -> bool:
    """Import TensorFlow and let it look for its devices with stderr sent to ``log`` (appended); without
    Keras unless ``keras``. Returns False when TensorFlow was already imported and its devices seen (then
    only Keras, if an earlier cell's import left it out and this one needs it: before the cell's runs, not
    inside the first). In a process forked from a warm server (``preload``), the import's lines, kept
    there, go to ``log`` first, then the devices are looked for here, as after a cold import."""
    global _preloaded
    if "tensorflow" in sys.modules and _preloaded is None:
        if keras and "keras" not in sys.modules:
            import keras  # noqa: F401
        return False
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        if _preloaded is not None:
            f.write(_preloaded)
            f.flush()
            _preloaded = None
        with _stderr_into(f), _leaving_out(keras):
            import tensorflow as tf  # and Keras, unless left out (or the warm server's preload left it out)

            if keras and "keras" not in sys.modules:
                import keras  # noqa: F401
            tf.config.list_physical_devices()  # where the CUDA platform is set up (cuInit)
    out_of_the_collectors_way()
    return True


def devices_unseen() -> bool:
    """Whether a process forked from this one can still set CUDA up for itself: TensorFlow not imported,
    or imported without looking for its devices (``preload``)."""
    return "tensorflow" not in sys.modules or _preloaded is not None


def out_of_the_collectors_way() -> None:
    """Every object this process holds now (TensorFlow's modules and their 250,000 objects among them) moved
    where Python's cyclic garbage collector no longer walks them (``gc.freeze``): a full collection walks
    them all, 0.23-0.29 s of CPU with TensorFlow and PyTorch imported, and lands wherever the allocations
    that trigger it do, inside a measured run among them. Garbage made later is collected as before."""
    import gc

    gc.freeze()


def preload(keras: bool = True) -> None:
    """Import TensorFlow, and Keras unless not ``keras``, without looking for devices, their lines kept for
    the first cell's log: in a warm server whose forked children run cells (``jobs.execution.warm``). The
    first device query sets CUDA up, and a process forked after that cannot use CUDA: each child makes its
    own (``import_quietly``, which imports Keras there if a cell needs it and the server left it out)."""
    global _preloaded
    if "tensorflow" in sys.modules:
        return
    with tempfile.TemporaryFile() as f:
        with _stderr_into(f), _leaving_out(keras):
            import tensorflow  # noqa: F401

            if keras:
                import keras as _  # noqa: F401
        f.seek(0)
        _preloaded = f.read()


@contextlib.contextmanager
def _stderr_into(f):
    """File descriptor 2 (where TensorFlow's C++ code writes) on ``f``, then back."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(f.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def _leaving_out(keras: bool):
    """TensorFlow's eager imports of what ``_later`` names fail while this lasts."""
    later = _later(keras)
    sys.meta_path.insert(0, later)
    try:
        yield
    finally:
        sys.meta_path.remove(later)


def import_under(storage_root: str | Path, setting: str = "--storage-root", keras: bool = True) -> bool:
    """``import_quietly`` for a command with no cell folder (a benchmark): its start-up lines in the
    tool's own folder under the storage root it measures (``<root>/iocampaign/tensorflow_startup.log``)."""
    from jobs import owned

    return import_quietly(owned.under_tool_folder(storage_root, setting=setting) / LOG, keras=keras)


def needed(workload, cfg) -> bool:
    """Whether a cell of ``workload`` with ``cfg`` runs TensorFlow: its workload's TensorFlow engine is the
    one the cell's framework picks (a PyTorch cell of the same workload never imports it: a GPU node may
    have PyTorch alone)."""
    from jobs import frameworks

    return workload.in_tensorflow and frameworks.of(cfg).imports_tensorflow


def for_workload(workload, cfg, log: Path) -> bool:
    """``import_quietly`` for a process that runs the runs of a cell of ``workload`` with ``cfg`` (a task
    of a multi-task cell), if that cell uses TensorFlow at all."""
    return needed(workload, cfg) and import_quietly(log, keras=workload.uses_keras)
