"""What the emulated accelerator hands each framework's engine (``EmulatedSettings``) and how a run's
steps become its record (``result``), the same for every framework (``jobs/frameworks/<name>/``)."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.data import loading
from jobs.data.datasets import Dataset
from jobs.data.loading import PipelineSettings
from jobs.metrics import MB


@dataclass(frozen=True, kw_only=True)
class EmulatedSettings(PipelineSettings):
    step_time_s: float  # the accelerator's compute time of one batch of this run's batch size


def result(ds: Dataset, s: EmulatedSettings, steps: dict, drops: list, counters: tuple) -> dict:
    """A run's record, the same for every framework's loop: ``steps`` holds ``waits`` and ``computes`` (one
    per step), ``seen`` (the delivered images), ``consumed`` (their bytes), ``t0`` and ``t_end``;
    ``counters``, (read_bytes, rchar) before and after (``loading.read_counters``). AU leaves the first
    step out."""
    waits, computes, seen = steps["waits"], steps["computes"], steps["seen"]
    (rb0, rc0), (rb1, rc1) = counters
    runtime = steps["t_end"] - steps["t0"]
    steady = runtime - waits[0] - computes[0]
    return {
        "steps": len(waits),
        "images": len(seen),
        "images_dropped": len(drops),
        "dropped_files": [ds.where(i) for i in drops[: loading.DROPPED_LISTED]],
        "runtime_s": runtime,
        "seconds": runtime,
        "steady_runtime_s": steady,
        "data_wait_s": sum(waits),
        "compute_s": sum(computes),
        "first_step_s": waits[0] + computes[0],
        "train_au_percentage": 100 * sum(computes[1:]) / steady,
        "images_per_s": len(seen) / runtime,
        "mb_per_s": steps["consumed"] / runtime / MB,
        "bytes_consumed": steps["consumed"],
        "bytes_read_device": loading.delta(rb0, rb1),
        "bytes_read_syscall": loading.delta(rc0, rc1),
        "step_time_s": s.step_time_s,
    }
