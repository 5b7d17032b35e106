"""A run's record, assembled in one place from its parts: what the workload measured, what the
observers saw around it (CPU and device usage, the POSIX window, the tf.data service's workers), the
files the listing skipped, and the cache state the device's counters prove."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunParts:
    """Everything one run yields, before it becomes its record (``record``)."""

    run: int  # 1..repeats for measured runs, <= 0 for warm-ups
    warmup: bool
    started_at: str
    shuffle_seed: int
    cache_requested: str  # cold | warm
    resident_bytes_before: int | list  # page-cache bytes of the data before the run (per task: a list)
    figures: dict  # what the workload returned (its declared metrics and record keys), merged over tasks
    usage: dict  # CPU and device usage over the timed interval (jobs.observe.usage.between), without wall_s
    run_wall_s: float  # the whole run, set-up included
    usage_over: str  # "timed interval" | "whole run"
    quiet_wait_s: float | None = None  # platform.wait_quiet: seconds waited before it for a quiet machine
    skipped: tuple = ()  # files the listing skipped (FIFOs, sockets): counted as dropped
    device_bytes: int | None = None  # the data's own device counter, where the cell holds its tier alone

    def reading(self) -> dict:
        """The run's figures with the skipped files counted as dropped and the device's own bytes."""
        out = dict(self.figures)
        if self.skipped:
            out["images_dropped"] += len(self.skipped)
            out["dropped_files"] = [*self.skipped, *out.get("dropped_files", [])][:50]
        if self.device_bytes is not None:
            out["bytes_read_device"] = self.device_bytes
        return out

    def record(self, cache_state: str, once: dict) -> dict:
        """The run as ``record.json`` keeps it, with the cache state its counters prove and the cell's
        once-per-cell figures (``once``: ``Workload.probe``'s, for measured runs)."""
        return {
            "run": self.run,
            "warmup": self.warmup,
            "started_at": self.started_at,
            "shuffle_seed": self.shuffle_seed,
            "cache_requested": self.cache_requested,
            "cache_state": cache_state,
            "resident_bytes_before": self.resident_bytes_before,
            **self.reading(),
            **self.usage,
            "run_wall_s": self.run_wall_s,
            "quiet_wait_s": self.quiet_wait_s,
            "usage_over": self.usage_over,
            **once,
        }
