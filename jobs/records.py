"""The cell record: one schema-versioned JSON file per cell, its only writer and its only reader."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from jobs import jsonfiles

SCHEMA_VERSION = 2  # 2: the workload's figures and metrics declared in the record (``declared``)
READABLE = (1, SCHEMA_VERSION)  # a version-1 record has no ``declared``: read as None
FILENAME = "record.json"
COMPLETED = "completed"
FAILED = "failed"


# what a record's ``declared`` may name: a figure's file stem, and the packages of its drawing function (the
# analysis's figure modules, or a workload's own outside the tool)
FIGURE_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
DRAWERS = ("analysis.figures.", "iocampaign_workloads.")
METRIC_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


def figure_problem(key: str, draw: str) -> str | None:
    """Why a figure of ``key`` drawn by ``draw`` ("module:function") cannot be declared, or None."""
    if not FIGURE_KEY.fullmatch(key):
        return f"key {key!r} is not a plain file name"
    module, _, function = draw.partition(":")
    if not module.startswith(DRAWERS) or not function.isidentifier():
        return f"draw={draw!r} names no function of {' or '.join(d.rstrip('.') for d in DRAWERS)}"
    return None


class RecordError(ValueError):
    """A record file that this version of the project cannot read."""


@dataclass(frozen=True)
class CellRecord:
    cell_id: str  # stable id of the cell: hash of its resolved config
    status: str  # completed | failed
    config: dict  # the resolved config of the cell
    overrides: list  # the command-line overrides that made this cell
    runs: list  # one dict per run (warm-up runs included, flagged "warmup": true)
    dataset: dict  # what was read: name, source, location, files, bytes, median file size
    provenance: dict  # machine, storage mount, software versions, git commit
    started_at: str
    finished_at: str
    error: dict | None = None  # type, message and traceback of a failed cell
    # trace.runs=extra: the one run traced for its POSIX calls, not a measured run
    traced_run: dict | None = None
    # what the analysis draws and labels from the cell's rows, as its workload declared it when it ran:
    # {"figures": [{key, draw, title, where, order}], "metrics": [{name, unit, better, doc}]}
    declared: dict | None = None
    schema_version: int = field(default=SCHEMA_VERSION)


@dataclass(frozen=True)
class AsRecorded(Mapping):
    """A part of a record as its readers take it: what they read typed, in the fields of a subclass, and
    the whole as recorded readable by name (``recorded``), not writable."""

    recorded: Mapping[str, Any]  # the part as recorded (read-only)

    def __getitem__(self, name: str) -> Any:
        return self.recorded[name]

    def __iter__(self):
        return iter(self.recorded)

    def __len__(self) -> int:
        return len(self.recorded)


@dataclass(frozen=True)
class Run(AsRecorded):
    """One run of a cell as its readers take it (``runs_of``): what the runner records of every run, and the
    few values of some workloads the tables label every row with, typed, with their defaults written once
    here. The run is also a read-only mapping of everything it recorded, by name (``recorded``: the metrics
    its workload declared, a traced run's ``posix_*``, a baseline's measures), None where it has none."""

    run: int  # 1 to repeats; a warm-up 0 or less
    warmup: bool
    cache_state: str  # the page-cache state its counters proved the run started from (jobs.storage.cache)
    device: str = ""  # where the run's model ran, or its checkpoints were written
    effective_target: str = ""  # the tier the checkpoints went to ("" when none was written)
    fallback: str = ""  # why that is not the tier asked for ("" when it is)
    checkpoints: tuple[Mapping[str, Any], ...] = ()  # each checkpoint written: step, tier, stall, bytes
    trace_file: str = ""  # the run's trace, relative to its cell's folder ("" when none)
    steps_file: str = ""  # the run's step times, relative to its cell's folder ("" when none)


_RUN_TEXTS = ("device", "effective_target", "fallback", "trace_file", "steps_file")  # null: ""


def typed_run(raw: dict) -> Run:
    """A run of a record read by ``read`` (every readable version already as today's, ``_run_as_today``)."""
    return Run(
        run=raw["run"],
        warmup=raw["warmup"],
        cache_state=raw["cache_state"],
        recorded=MappingProxyType(raw),
        checkpoints=tuple(raw.get("checkpoints") or ()),
        **{k: raw.get(k) or "" for k in _RUN_TEXTS},
    )


def runs_of(rec: CellRecord, warmups: bool = False) -> list[Run]:
    """The runs of ``rec``, typed, in their order: the measured ones (warm-ups too with ``warmups``)."""
    return [typed_run(r) for r in rec.runs if warmups or not r.get("warmup")]


_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Provenance(AsRecorded):
    """Where and with what a cell ran, as its readers take it (``provenance_of``): what the analysis reads
    typed, with its defaults written once here (None, 0 or an empty mapping where a record keeps none);
    the whole as recorded readable by name, not writable."""

    host: str | None = None
    kernel: str | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    cpus_usable: int | None = None  # the cores the cell's process could run on
    mem_total_bytes: int = 0
    git_commit: str | None = None  # None: not run from a git checkout
    git_dirty: bool = False
    # package -> version (None: not installed)
    versions: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    accelerator: Mapping[str, Any] | None = None  # jobs.observe.accelerator's description
    object_store: Mapping[str, Any] | None = None  # the store and client the runs read through
    emulated_tier: Mapping[str, Any] | None = None  # the throttles of the cell's own emulated tier
    storage_mount: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)  # the mount of storage.root
    device_lock_wait_s: float | None = None  # how long the cell waited for its device's lock
    memory_limit_bytes: int | None = None  # the cell's memory limit, where one was set
    memory_peak_bytes: int | None = None

    @property
    def read_mount(self) -> Mapping[str, Any]:
        """The mount the runs read (``read_mount``)."""
        return read_mount(self.recorded)


_PROVENANCE_MAPPINGS = ("versions", "storage_mount")  # null: {}
_PROVENANCE_AS_KEPT = (
    "host",
    "kernel",
    "cpu_model",
    "git_commit",
    "cpu_count",
    "cpus_usable",
    "accelerator",
    "object_store",
    "emulated_tier",
    "device_lock_wait_s",
    "memory_limit_bytes",
    "memory_peak_bytes",
)


def provenance_of(rec: CellRecord) -> Provenance:
    """The provenance of ``rec`` (read by ``read``: every readable version already as today's), typed."""
    raw = rec.provenance or {}
    return Provenance(
        recorded=MappingProxyType(raw),
        mem_total_bytes=int(raw.get("mem_total_bytes") or 0),
        git_dirty=bool(raw.get("git_dirty")),
        **{k: MappingProxyType(raw.get(k) or {}) for k in _PROVENANCE_MAPPINGS},
        **{k: raw.get(k) for k in _PROVENANCE_AS_KEPT},
    )


@dataclass(frozen=True)
class DatasetRead(AsRecorded):
    """What a cell's runs read, as its readers take it (``dataset_of``): its size and form typed, with the
    defaults written once here; the whole as recorded readable by name, not writable."""

    files: int = 0
    total_bytes: int = 0
    format: str = "files"  # dataset.format: files, or the container the images are in
    stage: Mapping[str, Any] | None = None  # how the runs' copy was staged (storage@stage), None: not staged


def dataset_of(rec: CellRecord) -> DatasetRead:
    """The dataset section of ``rec``, typed."""
    raw = rec.dataset or {}
    return DatasetRead(
        recorded=MappingProxyType(raw),
        files=int(raw.get("files") or 0),
        total_bytes=int(raw.get("total_bytes") or 0),
        format=str(raw.get("format") or "files"),
        stage=raw.get("stage") or None,
    )


def read_mount(provenance: Mapping) -> Mapping:
    """The mount a cell's runs read (``data_mount``: the dataset's folder, or its staged copy), or the
    storage root's where a record has none; {} where neither is kept."""
    return provenance.get("data_mount") or provenance.get("storage_mount") or {}


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def write(record: CellRecord, folder: str | os.PathLike) -> Path:
    """Write ``record`` atomically as ``<folder>/record.json``; raises RecordError rather than replace
    the record of another cell (a folder belongs to one cell)."""
    path = Path(folder) / FILENAME
    if os.path.lexists(path):
        try:
            other = jsonfiles.read_json(path).get("cell_id")
        except (OSError, ValueError, AttributeError):
            other = "unreadable"
        if other != record.cell_id:
            raise RecordError(
                f"{path} holds the record of cell {other}, not of cell {record.cell_id}: not replaced"
            )
    tmp = path.with_suffix(f".json.{os.getpid()}.part")
    tmp.write_text(json.dumps(asdict(record), indent=2, sort_keys=False, default=str))
    os.replace(tmp, path)
    return path


def read(path: str | os.PathLike) -> CellRecord:
    """Read a record; raise RecordError for another schema version or a damaged file."""
    try:
        raw: dict[str, Any] = jsonfiles.read_json(path)  # never blocks on a FIFO planted as record.json
    except jsonfiles.NotAFile as e:
        raise RecordError(f"{e} (not read as a record)") from None
    except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise RecordError(f"{path}: not a readable record ({e})") from e
    except RecursionError:  # JSON nested deeper than Python parses
        raise RecordError(f"{path}: not a readable record (nested too deep to parse)") from None
    if not isinstance(raw, dict):
        raise RecordError(f"{path}: not a readable record (a JSON {type(raw).__name__}, not an object)")
    version = raw.get("schema_version")
    if version not in READABLE:
        raise RecordError(
            f"{path}: record schema version {version}, this project reads {' and '.join(map(str, READABLE))}"
        )
    try:
        rec = CellRecord(**_as_today(raw))
    except TypeError as e:
        raise RecordError(f"{path}: record fields do not match schema {version} ({e})") from e
    if not (
        isinstance(rec.config, dict)
        and isinstance(rec.runs, list)
        and isinstance(rec.provenance, dict)
        and isinstance(rec.overrides, list)
        and isinstance(rec.declared, dict | None)
        and isinstance(rec.dataset, dict | None)
        and _error_readable(rec.error)
        and rec.status in (COMPLETED, FAILED)
    ):
        raise RecordError(f"{path}: record fields do not match schema {version} (wrong types)")
    bad = next(
        (f"run {n} of {len(rec.runs)}" for n, run in enumerate(rec.runs, 1) if not _run_readable(run)), None
    )
    if rec.traced_run is not None and not _run_readable(rec.traced_run):
        bad = "its traced run"
    if bad is not None:
        raise RecordError(
            f"{path}: {bad} does not match schema {version} (a run needs a whole number run, a true or "
            "false warmup and a cache_state)"
        )
    wrong = _wrong_run(rec)
    if wrong is not None:
        raise RecordError(f"{path}: {wrong}, which schema {version} does not allow")
    wrong = _wrong_field(rec)
    if wrong is not None:
        raise RecordError(f"{path}: {wrong}, which schema {version} does not allow")
    return rec


# the JSON types each field the typed readers take may hold (``provenance_of``, ``dataset_of``; null is
# always allowed: not kept); a record edited by hand into another is unreadable, in one line naming the field
_FIELD_TYPES = {
    "provenance": {
        **dict.fromkeys(("host", "kernel", "cpu_model", "git_commit"), str),
        **dict.fromkeys(("cpu_count", "cpus_usable", "mem_total_bytes"), int),
        **dict.fromkeys(("memory_limit_bytes", "memory_peak_bytes"), int),
        "git_dirty": bool,
        "device_lock_wait_s": (float, int),
        **dict.fromkeys(("versions", "accelerator", "object_store", "emulated_tier"), dict),
        **dict.fromkeys(("storage_mount", "data_mount"), dict),
    },
    "dataset": {"files": int, "total_bytes": int, "format": str, "stage": dict},
}
_JSON_NAMES = {
    str: "a string",
    int: "a whole number",
    float: "a number",
    bool: "true or false",
    dict: "an object",
    list: "a list",
}
# counts and sizes: whole numbers, none below 0
_COUNTS = frozenset(
    (
        "cpu_count",
        "cpus_usable",
        "mem_total_bytes",
        "memory_limit_bytes",
        "memory_peak_bytes",
        "files",
        "total_bytes",
    )
)


def _wrong_field(rec: CellRecord) -> str | None:
    """The first field of the record's provenance or dataset that holds a type its reader does not take,
    said as "provenance.versions holds a string, not an object"; None where every one is right."""
    for section, types in _FIELD_TYPES.items():
        held = getattr(rec, section) or {}
        for key, allowed in types.items():
            value = held.get(key)
            kinds = allowed if isinstance(allowed, tuple) else (allowed,)
            if value is None:
                continue
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                return f"{section}.{key} holds {_json_name(value)}, not {_JSON_NAMES[kinds[0]]}"
            if key in _COUNTS and value >= 2**63:
                return f"{section}.{key} holds a number beyond 64 bits"
            if key in _COUNTS and value < 0:
                return f"{section}.{key} holds {value}, not a count"
    return None


def _error_readable(error) -> bool:
    """A failed cell's error as the tool writes it: its type and message (None: no error)."""
    return error is None or (
        isinstance(error, dict)
        and isinstance(error.get("type"), str)
        and isinstance(error.get("message"), str)
    )


_RUN_FIELD_TYPES = {**dict.fromkeys(_RUN_TEXTS, str), "checkpoints": list}  # null: not kept


def _wrong_run(rec: CellRecord) -> str | None:
    """What in the record's runs its readers cannot take, said in a phrase; None where nothing is: a run
    number twice, a measured run numbered below 1, a label or the checkpoints of another type, a metric of
    the tool's (the tables take their medians) that is not a number. A metric a workload declared is a
    column as it is: its declaration is checked by the analysis (``analysis.declarations``)."""
    from jobs.metrics import METRICS

    numbers = [run["run"] for run in rec.runs]
    if len(set(numbers)) < len(numbers):
        return f"runs numbered {sorted(n for n in set(numbers) if numbers.count(n) > 1)} twice"
    for run in rec.runs:
        if not run["warmup"] and run["run"] < 1:
            return f"a measured run numbered {run['run']}"
        for key, kind in _RUN_FIELD_TYPES.items():
            if run.get(key) is not None and not isinstance(run[key], kind):
                return f"run {run['run']}'s {key} holds {_json_name(run[key])}, not {_JSON_NAMES[kind]}"
        if not all(isinstance(ck, dict) for ck in run.get("checkpoints") or ()):
            return f"run {run['run']}'s checkpoints hold something other than objects"
        for key in METRICS.keys() & run.keys():
            value = run[key]
            if value is not None and not isinstance(value, int | float):  # a bool too: posix_complete
                return f"run {run['run']}'s {key} holds {_json_name(value)}, not a number"
            if isinstance(value, int) and abs(value) >= 2**63:
                return f"run {run['run']}'s {key} holds a number beyond 64 bits"
    return None


def _json_name(value) -> str:
    return _JSON_NAMES.get(type(value), f"a {type(value).__name__}")


def _run_readable(run) -> bool:
    """Whether ``run`` holds what ``typed_run`` types (a record edited by hand may not)."""
    return (
        isinstance(run, dict)
        and type(run.get("run")) is int
        and isinstance(run.get("warmup"), bool)
        and isinstance(run.get("cache_state"), str)
    )


def _as_today(raw: dict) -> dict:
    """A record of any readable version with the fields added since filled as the tool then had them, so
    that its readers handle one shape: a run's ``steady_runtime_s`` (its runtime without the first step),
    an emulated tier's ``throttle`` (blkio: cgroup v2's io.max came later) and the accelerator's
    ``framework`` (TensorFlow: the only one that described it) with its ``framework_gpus`` (once
    ``tensorflow_gpus``). A value the record holds is never changed."""
    out = dict(raw)
    if isinstance(raw.get("runs"), list):
        out["runs"] = [_run_as_today(run) for run in raw["runs"]]
    if isinstance(raw.get("traced_run"), dict):
        out["traced_run"] = _run_as_today(raw["traced_run"])
    prov = raw.get("provenance")
    if isinstance(prov, dict):
        prov = dict(prov)
        tier = prov.get("emulated_tier")
        if isinstance(tier, dict) and "throttle" not in tier:
            prov["emulated_tier"] = {**tier, "throttle": "blkio-v1"}
        acc = prov.get("accelerator")
        if isinstance(acc, dict) and "framework" not in acc:
            prov["accelerator"] = {
                **acc,
                "framework": "TensorFlow",
                "framework_gpus": acc.get("framework_gpus", acc.get("tensorflow_gpus")),
            }
        out["provenance"] = prov
    return out


def _run_as_today(run):
    if not isinstance(run, dict) or run.get("steady_runtime_s") is not None:
        return run
    if run.get("runtime_s") is None or run.get("first_step_s") is None:
        return run
    return {**run, "steady_runtime_s": run["runtime_s"] - run["first_step_s"]}
