"""Records -> tidy tables: one row per cell x measured run, per-cell medians, and the cell status list."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from analysis import declarations
from analysis.tables import bounds
from jobs import plan, records
from jobs.cell import recorded
from jobs.frameworks import PAPERS, with_workers
from jobs.metrics import METRICS
from jobs.schema import CampaignConf, DatasetConf

# Columns of results.csv that describe the cell; the metric columns follow from jobs.metrics.
CELL_COLUMNS = (
    "workload",
    "kind",
    "pipeline",
    "framework",
    "storage",
    "reader",
    "client",
    "stage",
    "tasks_per_cell",
    "nodes",
    "service",
    "dataset",
    "format",
    "shuffle",
    "threads",
    "loader_workers",
    "batch_size",
    "prefetch",
    "prefetch_to",
    "cache",
    "image_side",
    "width",
    "checkpoint_target",
    "checkpoint_mode",
    "checkpoint_tiers",
    "checkpoint_model",
    "accelerator",
    "replay_trace",
    "replay_mode",
    "replay_concurrency",
)
RUN_COLUMNS = (
    "run",
    "cache_state",
    "bound",
    "train_bound",
    "device",
    "checkpoint_effective_target",
    "checkpoint_fallback",
)
TAIL_COLUMNS = (
    "device_read_ratio",
    "overlap_efficiency",
    "checkpoint_mb",
    "bound_reason",
    "throttle",
    "fs_type",
    "host",
    "cell_id",
    "cell_dir",
    "record",
    "trace_file",
    "steps_file",
)
# the columns the tables make themselves: no metric a record declares may take one's name
RESERVED = frozenset((*CELL_COLUMNS, *RUN_COLUMNS, *TAIL_COLUMNS, "status", "error", "overrides", "warmup"))
SUMMARY_METRICS = (
    "images_per_s",
    "mb_per_s",
    "seconds",
    "runtime_s",
    "steady_runtime_s",
    "data_wait_s",
    "compute_s",
    "baseline_runtime_s",
    "baseline_steady_runtime_s",
    "median_stall_s",
    "drain_after_end_s",
    "train_au_percentage",
    "accelerator_busy_percentage",
    "compute_only_s",
    "input_only_s",
    "overlap_efficiency",
)


@dataclass
class Collected:
    folder: Path
    rows: list[dict] = field(default_factory=list)  # one per measured run of a completed cell
    cells: list[dict] = field(default_factory=list)  # one per planned or found cell, with its status
    unreadable: list[str] = field(default_factory=list)  # record files this version cannot read
    baselines: list[dict] = field(default_factory=list)  # one per baseline run x measure (tidy)
    checkpoints: list[dict] = field(default_factory=list)  # one per checkpoint of a measured run
    # storage name -> its config section (Table I's paper figures)
    storages: dict = field(default_factory=dict)
    # one per traced measured run (trace.posix=true): analysis.tables.posix
    posix: list[dict] = field(default_factory=list)
    staged: dict = field(default_factory=dict)  # cell folder -> how its data was staged (storage@stage)
    configs: dict = field(default_factory=dict)  # cell folder -> its resolved config (completed cells)
    # what the records' workloads declare: their figures, and their metrics as columns (the built-in
    # workloads' metrics always)
    declared: declarations.Declared = field(
        default_factory=lambda: declarations.builtin(RESERVED, figures=False)
    )


def _replay(cfg: CampaignConf) -> dict:
    """workload=replay: the trace, its mode and its threads (null: the trace's own); "" for other cells."""
    r = cfg.replay
    if not r.trace:
        return {"replay_trace": "", "replay_mode": "", "replay_concurrency": ""}
    return {
        "replay_trace": r.trace,
        "replay_mode": str(r.mode),
        "replay_concurrency": "as traced" if r.concurrency is None else r.concurrency,
    }


def _object_client(cfg: CampaignConf, prov: records.Provenance) -> dict:
    """The object client the runs read through, as the record says ("" for files). Where the user chose
    one (``storage.client=s3dlio``), it is the cell's reader too, so one store read by two clients is two
    tiers in the tables and figures, as the native reader and the FUSE mount are."""
    out = {"client": (prov.object_store or {}).get("client") or ""}
    if cfg.storage.client and cfg.storage.reader == "native":
        out["reader"] = cfg.storage.client
    return out


def _pipeline(cfg: CampaignConf) -> str:
    """What the input pipeline did to each sample (Fig. 4's decode_resize or Fig. 5's read_only): read only
    where the dataset holds arrays (``dataset.samples=arrays``: unet3d's volumes, never decoded); "" for a
    workload without an input pipeline."""
    if cfg.dataset is not None and cfg.dataset.samples == "arrays":
        return "read_only"
    return str(cfg.workload.own.get("pipeline") or "")


def _cell_values(cfg: CampaignConf) -> dict:
    """The columns that describe a cell, from its typed config (``jobs.cell.recorded``)."""
    nodes, per_node = cfg.platform.nodes, cfg.platform.tasks_per_node
    return {
        "workload": cfg.workload.name,
        "kind": cfg.workload.kind,  # the workload module: what the analysis selects by
        "pipeline": _pipeline(cfg),
        "framework": cfg.framework.name,
        "loader_workers": _loader_workers(cfg),
        "accelerator": cfg.accelerator.name if cfg.accelerator else "",  # workload=emulated: its profile
        **_replay(cfg),
        "storage": cfg.storage.name,
        "reader": str(cfg.storage.reader or ""),  # an object store's reader (native, fuse); "" for files
        "stage": cfg.stage.name if cfg.stage else "",  # the tier the data was staged on and read from
        "tasks_per_cell": nodes * per_node,
        "nodes": nodes,  # the tasks are spread evenly over them
        # the tf.data service's workers (0: the pipeline ran in the measuring process)
        "service": cfg.input.workers if cfg.input.service else 0,
        "dataset": _dataset_name(cfg.dataset),
        "format": str(cfg.dataset.format) if cfg.dataset else "",  # how the images were stored
        "shuffle": _shuffle(cfg),
        "threads": cfg.threads,
        "batch_size": cfg.batch_size,
        "prefetch": cfg.prefetch,
        "prefetch_to": str(cfg.prefetch_to),
        "cache": str(cfg.cache),
        "image_side": cfg.workload.own.get("image_side"),
        "width": cfg.workload.own.get("width"),
        **_checkpoint_values(cfg),
    }


TENSORFLOW = PAPERS  # the framework of records written before the framework axis (the schema's default)


def _loader_workers(cfg: CampaignConf) -> int | None:
    """The DataLoader worker processes a ``framework=pytorch`` cell asked for (``loader.num_workers``, else
    ``threads``, as jobs.frameworks.workers has it); None for a framework whose map threads read."""
    if not with_workers(cfg.framework.name):
        return None
    n = cfg.loader.num_workers
    return int(n if n is not None else cfg.threads)


def readers(df):
    """Per row, what read in parallel: the DataLoader's workers for a PyTorch cell, else the map threads
    (as strings: ``autotune`` is one)."""
    threads = df["threads"].astype(str)
    if "loader_workers" not in df:
        return threads
    workers = df["loader_workers"]
    return threads.where(workers.isna(), workers.astype("Int64").astype(str))


def frameworks(df) -> list[str]:
    """The frameworks of ``df``'s rows, TensorFlow first (rows without the column: TensorFlow)."""
    if df is None or "framework" not in df:
        return [TENSORFLOW]
    names = set(text(df["framework"]).replace("", TENSORFLOW))
    return sorted(names, key=lambda n: (n != TENSORFLOW, n))


def _dataset_name(ds: DatasetConf | None) -> str:
    """The preset's name for a generated set; a user's folder or file list by its own name (a folder of
    their images is not the preset it was given to)."""
    if ds is None:
        return ""
    if ds.source in ("folder", "filelist") and ds.path:
        return f"{Path(str(ds.path).rstrip('/')).name} ({ds.source})"
    return ds.name


def _shuffle(cfg: CampaignConf) -> str:
    """``global``, ``local``, ``none``; with ``:<buffer>`` when a buffer size was set."""
    shuffle = str(cfg.shuffle)
    return f"{shuffle}:{cfg.shuffle_buffer}" if cfg.shuffle_buffer and shuffle != "none" else shuffle


def _checkpoint_values(cfg: CampaignConf) -> dict:
    """Where a checkpointing cell's checkpoints went, how, through which tiers, and the sharded model's
    shape ("" for a cell that writes none)."""
    ck = cfg.checkpoint
    model = ck.model.name if ck is not None and ck.model else ""  # workload=sharded_checkpoint's shape
    if model and ck.target:  # sharded: written to storage, or through the fast tier
        bb = ck.target == "burst_buffer"
        return {
            "checkpoint_target": str(ck.target),
            "checkpoint_mode": "",
            "checkpoint_tiers": f"{ck.fast.name}->{cfg.storage.name}" if bb else cfg.storage.name,
            "checkpoint_model": model,
        }
    if cfg.workload.kind != "checkpoint":
        return {
            "checkpoint_target": "",
            "checkpoint_mode": "",
            "checkpoint_tiers": "",
            "checkpoint_model": model,
        }
    tiers = {
        "slow": ck.slow.name,
        "fast": ck.fast.name,
        "burst_buffer": f"{ck.fast.name}->{ck.slow.name}",
    }[str(ck.target)]
    return {
        "checkpoint_target": str(ck.target),
        "checkpoint_mode": str(ck.mode),
        "checkpoint_tiers": tiers,
        "checkpoint_model": model,
    }


def collect(folder: str | Path) -> Collected:
    """Read every record under ``folder`` (a sweep or a single run) and its plan, if any."""
    folder = Path(folder)
    out = Collected(folder=folder)
    found: dict[str, tuple[Path, records.CellRecord, CampaignConf | None]] = {}
    undeclared: set[str] = set()  # the kinds of records that keep no declarations (schema 1)
    for path in sorted(folder.rglob(records.FILENAME)):
        try:
            rec = records.read(path)
        except records.RecordError as e:
            out.unreadable.append(str(e))
            continue
        try:
            cfg = recorded(rec)
        except records.RecordError as e:
            if rec.status == records.COMPLETED:  # its rows cannot be made
                out.unreadable.append(f"{path}: {e}")
                continue
            cfg = None  # a failed cell is listed with its error whatever its config holds
        rel = path.parent.relative_to(folder)
        found[str(rel)] = (path, rec, cfg)
        kind = cfg.workload.kind if cfg is not None else ""
        if rec.declared is not None:
            out.declared.add(kind, rec.declared)
        elif kind:
            undeclared.add(kind)
    _declare_as_today(out.declared, undeclared)
    planned = _planned(folder, out)
    for cell in planned:
        d = cell["dir"]
        entry = {"cell_dir": d, "overrides": " ".join(cell["overrides"])}
        if d not in found:
            out.cells.append(
                {**entry, "status": "missing", "error": "no record: the cell did not run or was killed"}
            )
    for d, (path, rec, cfg) in sorted(found.items(), key=lambda kv: (len(kv[0]), kv[0])):
        entry = {"cell_dir": d, "overrides": " ".join(rec.overrides), "status": rec.status}
        entry["error"] = f"{rec.error['type']}: {rec.error['message']}" if rec.error else ""
        entry.update(_time_and_wait(rec))  # what analysis.standing sums
        out.cells.append(entry)
        if rec.status != records.COMPLETED:
            continue
        out.storages.setdefault(rec.config["storage"]["name"], rec.config["storage"])
        out.configs[d] = rec.config
        prov, stage = records.provenance_of(rec), records.dataset_of(rec).stage
        if stage:
            out.staged[d] = stage
        base = {**_cell_values(cfg), **_object_client(cfg, prov)}
        # the cell's, for each run
        emulate, record = _emulated(cfg, bool(stage)), str(path.relative_to(folder))
        for run in records.runs_of(rec):
            out.rows.append(_row(base, run, rec.cell_id, prov, emulate, d, record))
            if "posix_calls" in run.recorded:
                out.posix.append(_posix_entry(base, run, d, "measured"))
            if "seq_read_mb_s" in run.recorded:
                out.baselines += _baseline_rows(base, run.recorded, d)
            out.checkpoints += [_checkpoint_row(base, run, ck, d) for ck in run.checkpoints]
        # trace.runs=extra: its calls, not a rate
        if rec.traced_run and "posix_calls" in rec.traced_run:
            out.posix.append(_posix_entry(base, records.typed_run(rec.traced_run), d, "extra"))
    out.cells.sort(key=lambda c: (len(c["cell_dir"]), c["cell_dir"]))
    return out


def _checkpoint_row(base: dict, run: records.Run, ck: Mapping, d: str) -> dict:
    """One row of checkpoints.csv: a checkpoint of a measured run, with its cell's target and tiers."""
    return {
        "cell_dir": d,
        "checkpoint_target": base["checkpoint_target"],
        "checkpoint_mode": base["checkpoint_mode"],
        "checkpoint_tiers": base["checkpoint_tiers"],
        "run": run.run,
        "fallback": run.fallback,
        **{k: ck.get(k) for k in CHECKPOINT_COLUMNS},
    }


def _declare_as_today(declared: declarations.Declared, kinds: set[str]) -> None:
    """The figures of records that keep no declarations (schema 1), as the tool's own workload of their kind
    declares them today; a workload outside the tool declared its own in code the analysis does not run."""
    for kind in sorted(kinds):
        today = declarations.builtin_of(kind)
        if today is not None:
            declared.add(kind, {"figures": today["figures"]})
        else:
            declared.refused.append(
                f"iocampaign: the records of workload {kind!r} keep no declarations (schema 1): its own "
                "metrics are not columns and its figures are not drawn; its runs are in record.json"
            )
            print(declared.refused[-1], file=sys.stderr)


def _planned(folder: Path, out: Collected) -> list[dict]:
    """Every cell the plans under ``folder`` hold (a paper campaign holds one sweep per grid)."""
    planned: list[dict] = []
    for plan_file in sorted(folder.rglob(plan.FILENAME)):
        base = plan_file.parent.relative_to(folder)
        try:
            cells = plan.read(plan_file.parent)
        except plan.PlanError as e:
            out.unreadable.append(str(e))
            continue
        planned += [{"overrides": cell.overrides, "dir": str(base / cell.dir)} for cell in cells]
    return planned


def _emulated(cfg: CampaignConf, staged: bool) -> dict | None:
    """The throttles of the emulated tier the cell's runs read (its ``emulate`` section), None for a real
    device: a staged cell reads its copy on the stage tier and is judged by that tier's, any other by the
    storage tier's."""
    emulate = (cfg.stage if staged and cfg.stage is not None else cfg.storage).emulate
    return dataclasses.asdict(emulate) if emulate is not None else None


def overlap_efficiency(row: dict) -> float | None:
    """max(input-only, compute-only) ÷ steady runtime of an AlexNet run: 1.0 when the run took no
    longer than its slower side alone (the overlap was complete), less by what not overlapping cost."""
    sides = [row.get("input_only_s"), row.get("compute_only_s")]
    steady = row.get("steady_runtime_s")
    if any(v is None or v != v for v in sides) or not steady:
        return None
    return max(sides) / steady


def _throttle(tier: dict | None) -> str:
    """What throttled the cell's own emulated tier: blkio-v1 or io.max-v2 ("" when none did)."""
    return tier["throttle"] if tier else ""


def _row(
    base: dict,
    run: records.Run,
    cell_id: str,
    prov: records.Provenance,
    emulate: dict | None,
    d: str,
    record: str,
) -> dict:
    """One row of results.csv: a measured run of a completed cell."""
    row = {
        **base,
        "run": run.run,
        "cache_state": run.cache_state,
        "device": run.device,
        "checkpoint_effective_target": run.effective_target,
        "checkpoint_fallback": run.fallback,
    }
    row.update({m: run.get(m) for m in METRICS})
    # the cell's, on each row
    row.update(
        device_lock_wait_s=prov.device_lock_wait_s,
        memory_limit_bytes=prov.memory_limit_bytes,
        memory_peak_bytes=prov.memory_peak_bytes,
    )
    sizes = sorted(c["bytes"] for c in run.checkpoints if c.get("bytes"))
    row["checkpoint_mb"] = sizes[len(sizes) // 2] / 1e6 if sizes else None  # median size of one checkpoint
    row["overlap_efficiency"] = overlap_efficiency(row)
    dev, con = run.get("bytes_read_device"), run.get("bytes_consumed")
    row["device_read_ratio"] = dev / con if dev is not None and con else None
    row["bound"], row["bound_reason"] = bounds.label(row, emulate)
    row["train_bound"] = bounds.train_bound(row)
    row["throttle"] = _throttle(prov.emulated_tier)
    row.update(
        fs_type=prov.read_mount.get("fs_type"),
        host=prov.host,
        cell_id=cell_id,
        cell_dir=d,
        record=record,
    )
    row["trace_file"] = str(Path(d) / run.trace_file) if run.trace_file else ""
    row["steps_file"] = str(Path(d) / run.steps_file) if run.steps_file else ""
    return row


def _posix_entry(base: dict, run: records.Run, cell_dir: str, traced: str) -> dict:
    """A traced run: its cell's values, which run it was (``measured``, or the ``extra`` one of
    trace.runs=extra), its posix_* figures, and its files relative to the campaign folder."""

    def rel(p):
        return (
            [str(Path(cell_dir) / x) for x in p]
            if isinstance(p, list)
            else str(Path(cell_dir) / p)
            if p
            else ""
        )

    return {
        **base,
        "run": run.run,
        "traced_run": traced,
        "cell_dir": cell_dir,
        "seconds": run.get("seconds") or run.get("runtime_s"),
        "bytes_consumed": run.get("bytes_consumed"),
        **{
            k: v
            for k, v in run.recorded.items()
            if k.startswith("posix_") and not isinstance(v, (dict, list))
        },
        "posix_size_histogram": run.get("posix_size_histogram") or {},
        "posix_calls_by_kind": run.get("posix_calls_by_kind") or {},
        **{
            k: rel(run.get(k))
            for k in ("posix_trace", "posix_files_table", "posix_threads_table", "posix_device_table")
        },
    }


def _baseline_rows(base: dict, run: dict, cell_dir: str) -> list[dict]:
    common = {
        "storage": base["storage"],
        "dataset": base["dataset"],
        "format": base["format"],
        "run": run["run"],
        "cell_dir": cell_dir,
    }
    rows = [
        {
            **common,
            "measure": "seq_read",
            "readers": 1,
            "mb_per_s": run["seq_read_mb_s"],
            "tool": run["tool"],
            "command": run["commands"]["seq_read"],
        },
        {
            **common,
            "measure": "seq_write",
            "readers": 1,
            "mb_per_s": run["seq_write_mb_s"],
            "tool": run["tool"],
            "command": run["commands"]["seq_write"],
        },
    ]
    for n, mb in run["small_read_mb_s"].items():
        rows.append(
            {
                **common,
                "measure": "small_read",
                "readers": int(n),
                "mb_per_s": mb,
                "tool": run["small_file_tool"],
                "command": run["commands"][f"small_read_{n}"],
            }
        )
    for measure, by_count in run.get("object_mb_s", {}).items():  # an object store: GET and PUT, large, small
        verb, size = measure.split("_")
        rows += [
            {
                **common,
                "measure": measure,
                "readers": int(n),
                "mb_per_s": mb,
                "tool": run["tool"],
                "command": f"{verb.upper()} {size} objects, {n} in flight ({run['tool']} "
                f"{run['tool_version']})",
            }
            for n, mb in by_count.items()
        ]
    return rows


CHECKPOINT_COLUMNS = ("step", "tier", "stall_s", "save_s", "flush_s", "bytes", "copy_s", "drained_after_s")


def checkpoints_frame(c: Collected):
    """Every checkpoint of every measured run: where it went, how long training stalled, how it drained."""
    import pandas as pd

    return pd.DataFrame(
        c.checkpoints,
        columns=[
            "cell_dir",
            "checkpoint_target",
            "checkpoint_mode",
            "checkpoint_tiers",
            "run",
            "fallback",
            *CHECKPOINT_COLUMNS,
        ],
    )


def baselines_frame(c: Collected):
    """Every baseline measurement: storage, run, measure (seq_read, seq_write, small_read), readers, MB/s."""
    import pandas as pd

    return pd.DataFrame(
        c.baselines,
        columns=[
            "storage",
            "dataset",
            "format",
            "run",
            "measure",
            "readers",
            "mb_per_s",
            "tool",
            "command",
            "cell_dir",
        ],
    )


def results_frame(c: Collected):
    """The tidy results table (pandas), columns in the documented order."""
    import pandas as pd

    columns = [*CELL_COLUMNS, *RUN_COLUMNS, *METRICS, *TAIL_COLUMNS]
    frame = pd.DataFrame(c.rows, columns=columns)
    frame["loader_workers"] = frame["loader_workers"].astype("Int64")  # 2, not 2.0; empty for TensorFlow
    return frame


# an object store's cells: the GETs' latency and the requests each image took (s3fs: its HEADs too)
OBJECT_MEDIANS = ("get_latency_p50_ms", "get_latency_p99_ms", "requests_per_image")


def summary_frame(results):
    """Median, min and max of the headline metrics per cell, with the cache states seen."""
    import pandas as pd

    if results.empty:
        return pd.DataFrame()
    keys = [*CELL_COLUMNS, "cell_dir"]
    present = [m for m in SUMMARY_METRICS if results[m].notna().any()]
    agg = {f"{m}_{s}": (m, s) for m in present for s in ("median", "min", "max")}
    agg["runs"] = ("run", "count")
    agg["images_dropped_max"] = ("images_dropped", "max")
    agg["cache_states"] = ("cache_state", lambda s: ",".join(sorted(set(s))))
    agg["checkpoint_fallbacks"] = ("checkpoint_fallback", lambda s: int((text(s) != "").sum()))
    agg["bound_runs"] = (
        "bound",
        lambda s: ", ".join(f"{k} {v}/{len(s)}" for k, v in s.value_counts().items()),
    )
    if "requests" in results and results["requests"].notna().any():  # an object store's requests per image
        results = results.assign(
            requests_per_image=results["requests"] / results["images"].where(results["images"] > 0)
        )
    for m in ("cpu_cores_busy", "cpu_share", "device_busy", "device_read_mb_s", *OBJECT_MEDIANS):
        if m in results and results[m].notna().any():
            agg[f"{m}_median"] = (m, "median")
    g = results.assign(threads=results["threads"].astype(str)).groupby(keys, sort=False, dropna=False)
    out = g.agg(**agg).reset_index()
    cells = {d: bounds.cell(runs) for d, runs in results.groupby("cell_dir")}  # the runs' medians, not a vote
    out.insert(
        int(out.columns.get_loc("bound_runs")), "bound", [cells.get(d, ("", ""))[0] for d in out["cell_dir"]]
    )
    out["bound_reason"] = [
        cells.get(d, ("", ""))[1] or f"its runs disagree: {runs}"
        for d, runs in zip(out["cell_dir"], out["bound_runs"])
    ]
    return out


def text(column):
    """A column as strings, empty where missing (pandas refuses to fill a float column with "")."""
    return column.astype(object).where(column.notna(), "").astype(str)


def runtime_column(df, steady: str = "steady_runtime_s", total: str = "runtime_s") -> str:
    """The runtime the figures and claims compare: without the first step (graph tracing) when every row
    has it, else the whole runtime (records from before it was recorded); the axis label says which."""
    return steady if steady in df and df[steady].notna().all() else total


def _time_and_wait(rec) -> dict:
    """A completed or failed cell's own time and lock wait (a ``jobs.records.CellRecord``), for
    ``collect``'s cell entries (``analysis.standing`` sums them)."""
    try:
        took = (
            datetime.fromisoformat(rec.finished_at) - datetime.fromisoformat(rec.started_at)
        ).total_seconds()
    except (TypeError, ValueError):
        took = None
    return {"wall_s": took, "device_lock_wait_s": records.provenance_of(rec).device_lock_wait_s}
