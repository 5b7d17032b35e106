"""MLPerf Storage's checkpointing rules, checked on a completed cell of ``workload=sharded_checkpoint``:
the model is one of MLPerf's, written by its processes (subset mode only where MLPerf allows it), ten
checkpoints written durable and then ten read back, the page cache cleared between, the reads within 30 s
of the last write, and data and results on different file systems. Each rule's figure is put beside its
limit, and the cell gets a verdict of the same form as a training cell's (``rules.Verdict``'s states)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

from analysis.mlperf import rules
from analysis.mlperf.rules import CLOSED, INVALID, Check
from jobs import records


@functools.cache
def limits() -> dict:
    """MLPerf Storage's checkpointing rules (``checkpointing.yaml``), read once."""
    return yaml.safe_load((Path(__file__).parent / "checkpointing.yaml").read_text())


def is_checkpointing(rec: records.CellRecord) -> bool:
    """A cell whose runs saved and loaded sharded checkpoints (their records carry the save duration)."""
    measured = records.runs_of(rec)
    return bool(measured) and all("save_duration_s" in run and "shard_ranks" in run for run in measured)


@dataclass(frozen=True)
class Verdict:
    """One checkpointing cell's checks and what they add up to (the form of ``rules.Verdict``)."""

    cell_dir: str
    model: str
    processes: int
    save_s: float
    load_s: float
    save_gb_s: float
    load_gb_s: float
    checks: tuple[Check, ...]

    @property
    def state(self) -> str:
        return max((c.state for c in self.checks), key=rules.WORSE.__getitem__, default=INVALID)

    def line(self) -> str:
        head = (
            f"{self.model} checkpointing on {self.processes} processes: save {self.save_s:.2f} s "
            f"({self.save_gb_s:.2f} GB/s), load {self.load_s:.2f} s ({self.load_gb_s:.2f} GB/s)"
        )
        if self.state == CLOSED:
            return f"{head}; CLOSED-eligible: yes, every rule holds"
        bad = sorted((c for c in self.checks if c.state != CLOSED), key=lambda c: -rules.WORSE[c.state])
        return f"{head}; CLOSED-eligible: no, because " + "; ".join(f"{c.why} ({c.state})" for c in bad)


def check(cell_dir: str, rec: records.CellRecord, record_path: Path) -> Verdict:
    """The verdict of one completed cell of sharded checkpoints (its record at ``record_path``)."""
    lim = limits()
    measured = records.runs_of(rec)
    last = measured[-1]
    name = (last.get("checkpoint_model") or {}).get("name", "?")
    mlperf = lim["models"].get(name)
    processes = int(last["ranks_written"])
    checks = (
        _model(name, mlperf, float(last["model_checkpoint_gb"]) * 1e9, lim["size_tolerance"]),
        _processes(name, mlperf, processes, int(last["model_ranks"]), lim),
        _count("checkpoints written", measured, "checkpoints_written", lim["writes"]),
        _count("checkpoints read", measured, "checkpoints_read", lim["reads"]),
        Check(
            "durable writes", "every file and folder fsync'ed before it counts", "fsync each write", CLOSED
        ),
        _cache(measured),
        _gap(measured, lim["read_gap_s"]),
        rules.file_systems(rec, record_path),
    )
    return Verdict(
        cell_dir,
        mlperf["model"] if mlperf else name,
        processes,
        last["save_duration_s"],
        last["load_duration_s"],
        last["save_throughput_gb_s"],
        last["load_throughput_gb_s"],
        checks,
    )


def _model(name: str, mlperf: dict | None, size: float, tolerance: float) -> Check:
    """One of MLPerf's models, its checkpoint the size MLPerf's is (a shape changed with
    ``checkpoint.model.*=`` to fit a small machine is a what-if)."""
    gib = size / 2**30
    figure = f"checkpoint_model={name}, {gib:,.1f} GiB a checkpoint"
    if not mlperf:
        limit = "one of MLPerf's: " + ", ".join(limits()["models"])
        return Check("model", figure, limit, INVALID, f"{name} is not an MLPerf model")
    want = mlperf["checkpoint_gib"]
    limit = f"{mlperf['model']}: {want:,} GiB ± {100 * tolerance:.0f}%"
    if abs(gib - want) <= tolerance * want:
        return Check("model", figure, limit, CLOSED)
    return Check(
        "model",
        figure,
        limit,
        INVALID,
        f"the checkpoint is {gib:,.1f} GiB, not {mlperf['model']}'s {want:,} GiB",
    )


def _processes(name: str, mlperf: dict | None, processes: int, ranks: int, lim: dict) -> Check:
    need = mlperf["processes"] if mlperf else ranks
    figure = f"{processes} of the model's {ranks} ranks"
    limit = f"{need} processes" + (
        f" (subset mode: {name} at {lim['subset'][name]} only)" if name in lim["subset"] else ""
    )
    if processes == need == ranks or lim["subset"].get(name) == processes:
        return Check("processes", figure, limit, CLOSED)
    return Check(
        "processes",
        figure,
        limit,
        INVALID,
        f"{processes} processes wrote, not {need}"
        + ("" if processes == ranks else " (subset mode is allowed for 8B at 8 processes only)"),
    )


def _count(rule: str, measured: list, key: str, want: int) -> Check:
    got = sorted({int(run.get(key) or 1) for run in measured})
    figure = ", ".join(map(str, got)) + " a run"
    if got == [want]:
        return Check(rule, figure, f"{want} a run", CLOSED)
    return Check(rule, figure, f"{want} a run", INVALID, f"{rule}: {figure}, not {want}")


def _cache(measured: list) -> Check:
    cleared = all(r.get("cache_cleared") for run in measured for r in run["shard_ranks"])
    limit = "cleared between the writes and the reads (when a client wrote at most 3x its memory)"
    if cleared:
        return Check("page cache", "cleared on every rank", limit, CLOSED)
    return Check(
        "page cache", "not cleared", limit, INVALID, "the page cache was not cleared before the reads"
    )


def _gap(measured: list, limit_s: float) -> Check:
    gaps = [run["read_gap_s"] for run in measured if run.get("read_gap_s") is not None]
    limit = f"≤ {limit_s:.0f} s from the last write to the first read"
    if not gaps:
        return Check("read gap", "one checkpoint a run", limit, INVALID, "no run wrote and then read several")
    figure = f"longest {max(gaps):.1f} s"
    if max(gaps) <= limit_s:
        return Check("read gap", figure, limit, CLOSED)
    return Check(
        "read gap", figure, limit, INVALID, f"the reads started {max(gaps):.0f} s after the last write"
    )
