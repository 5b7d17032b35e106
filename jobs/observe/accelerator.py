"""The accelerator a run trained on: what it is (model, memory, driver; the CUDA and cuDNN versions
TensorFlow was built with; the device TensorFlow used) and how busy it was over the timed loop
(NVML's ``utilization.gpu``, the share of time a kernel ran, sampled like the device trace).

NVML comes from ``nvidia-ml-py``; without NVIDIA's driver (no GPU) every function answers None or
an empty list, and the record has no accelerator figures: nothing is ever made up.
"""

from __future__ import annotations

import os
import threading
import time

_STATE: dict = {}


def gpu_driver() -> bool:
    """A GPU's driver is loaded (NVIDIA's, ROCm's, WSL's): seen without importing a framework (seconds)."""
    nvidia = "/proc/driver/nvidia/gpus"
    return (
        (os.path.isdir(nvidia) and bool(os.listdir(nvidia)))
        or os.path.exists("/dev/kfd")
        or os.path.exists("/dev/dxg")
    )


def _nvml():
    """The initialised pynvml module, or None where NVML cannot start (no driver, no GPU)."""
    if "nvml" not in _STATE:
        try:
            import pynvml

            pynvml.nvmlInit()
            _STATE["nvml"] = pynvml
        except Exception:  # the binding raises NVMLError subclasses, or ImportError without the package
            _STATE["nvml"] = None
    return _STATE["nvml"]


def _visible_index() -> int:
    """NVML's index of the first GPU this process may use (CUDA_VISIBLE_DEVICES as an index; 0 else)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def gpus() -> list[dict]:
    """Every GPU NVML sees: index, name, memory, UUID, and the driver's version."""
    nv = _nvml()
    if nv is None:
        return []
    out = []
    driver = _text(nv.nvmlSystemGetDriverVersion())
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        out.append(
            {
                "index": i,
                "name": _text(nv.nvmlDeviceGetName(h)),
                "uuid": _text(nv.nvmlDeviceGetUUID(h)),
                "memory_total_bytes": int(nv.nvmlDeviceGetMemoryInfo(h).total),
                "driver": driver,
            }
        )
    return out


def _tensorflow_view() -> dict:
    """What TensorFlow sees and was built with (``tf.sysconfig.get_build_info``)."""
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    return {
        "framework_gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
        "cuda_build": build.get("cuda_version"),
        "cudnn_build": build.get("cudnn_version"),
        "cuda_build_enabled": bool(build.get("is_cuda_build")),
    }


def _torch_view() -> dict:
    """What PyTorch sees and was built with (``torch.version.cuda``, ``torch.backends.cudnn.version()``)."""
    import torch

    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "framework_gpus": [f"cuda:{i}" for i in range(seen)],
        "cuda_build": torch.version.cuda,
        "cudnn_build": cudnn,
        "cuda_build_enabled": torch.version.cuda is not None,
    }


# the frameworks that can say what they see, by the package a cell's provenance lists (jobs.frameworks)
VIEWS = {"tensorflow": ("TensorFlow", _tensorflow_view), "torch": ("PyTorch", _torch_view)}


def describe(package: str = "tensorflow") -> dict:
    """The record's ``accelerator``: the GPUs, the one the framework of ``package`` trains on first, and the
    CUDA/cuDNN versions it was built with. Call where that framework is in use (its import is not free)."""
    name, view = VIEWS[package]
    seen = view()
    found = gpus()
    return {
        "gpus": found,
        "framework": name,
        **seen,
        "used_index": _visible_index() if found and seen["framework_gpus"] else None,
    }


def summary(acc: dict | None) -> str:
    """One line for the report's machine section: "NVIDIA H100 80GB HBM3, 79.6 GiB, driver 580.1;
    TensorFlow built with CUDA 12.5, cuDNN 9" or "none (PyTorch sees 0 GPU); PyTorch built without
    CUDA"."""
    if not acc:
        return ""
    name = acc["framework"]
    build = (
        f"{name} built with CUDA {acc.get('cuda_build')}, cuDNN {acc.get('cudnn_build')}"
        if acc.get("cuda_build_enabled")
        else f"{name} built without CUDA"
    )
    seen = acc.get("framework_gpus") or []
    if not acc.get("gpus") or acc.get("used_index") is None:
        return f"none ({name} sees {len(seen)} GPU); {build}"
    g = acc["gpus"][acc["used_index"]]
    return f"{g['name']}, {g['memory_total_bytes'] / 2**30:.1f} GiB, driver {g['driver']}; {build}"


class Sampler:
    """NVML's utilization.gpu of the GPU in use, every ``interval_s``, on a thread of its own."""

    def __init__(self, interval_s: float = 0.1):
        self.interval_s = interval_s
        # (perf_counter, percent busy over the driver's last period)
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Sampler:
        nv = _nvml()
        if nv is None or nv.nvmlDeviceGetCount() == 0:
            return self  # nothing to sample: busy() answers None
        handle = nv.nvmlDeviceGetHandleByIndex(_visible_index())

        def loop():
            while not self._stop.wait(self.interval_s):
                self.samples.append((time.perf_counter(), int(nv.nvmlDeviceGetUtilizationRates(handle).gpu)))

        self._thread = threading.Thread(target=loop, name="nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def busy(self, t0: float, t1: float) -> float | None:
        """Mean percent busy of the samples taken in [t0, t1]; None without samples (no GPU)."""
        inside = [p for t, p in self.samples if t0 <= t <= t1]
        return sum(inside) / len(inside) if inside else None
