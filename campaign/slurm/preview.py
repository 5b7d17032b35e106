"""What the dry run of a Slurm campaign prints, on any machine (a laptop without Slurm included): every
planned cell, the sbatch script of every array as submitit writes it, and what only the nodes can
check. Nothing here calls Slurm, looks at the cluster's paths or writes a file."""

from __future__ import annotations

from pathlib import Path

from campaign.slurm import submit
from campaign.slurm.sbatch import sbatch_text


def _tier(key: str, st: dict, free_for_data: bool) -> str:
    name = st.get("name")
    if st.get("model") is not None:
        return f"{key}={name} can be mounted there (FUSE) at {key}.root={st.get('root')}"
    if st.get("emulate") is not None:
        return f"{key}={name} can be built there (root, loop device, cgroup I/O limits) at {key}.root={st.get('root')}"
    fs = st.get("fs_types") if st.get("fs_check") is not False else None  # jobs.storage.fstype
    on = f", is on {' or '.join(map(str, fs))}" if fs else ""
    room = " and has room for the dataset" if free_for_data else ""
    return f"{key}.root={st.get('root')} exists, is writable{on}{room}"


def left_to_nodes(configs: list[dict]) -> list[str]:
    """What planning did not check on this machine for cells that run on Slurm's nodes (each cell's
    resolved config), in the order first met: the tiers' folders, mounts and tools, the dataset's folder,
    the nodes' commands and rights (``jobs.storage.roots.elsewhere``)."""
    from jobs import workloads
    from jobs.configview import View

    out: dict[str, None] = {}
    for config in configs:
        cfg = View(config)
        ds = config.get("dataset") if isinstance(config.get("dataset"), dict) else {}
        synthetic = str(ds.get("source") or "") == "synthetic"
        try:
            built = [t._d for t in workloads.get(str(cfg.workload.kind)).tiers(cfg)]
        except (KeyError, AttributeError):
            built = [config["storage"]]
        named = {id(config["storage"]): "storage", id(config.get("stage")): "stage"}
        ck = config.get("checkpoint") or {}
        named.update({id(ck.get("slow")): "checkpoint.slow", id(ck.get("fast")): "checkpoint.fast"})
        for st in [*built, *([config["stage"]] if isinstance(config.get("stage"), dict) else [])]:
            key = named.get(id(st), "storage")
            out[_tier(key, st, synthetic and key == "storage")] = None
        if ds and not synthetic and ds.get("path"):
            out[f"dataset.path={ds['path']} holds the images"] = None
        if str(cfg.workload.kind) == "baseline":
            out["fio or ior on PATH (workload=baseline)"] = None
        if (config.get("trace") or {}).get("posix"):
            out["dftracer's preload library (trace.posix=true)"] = None
        if config.get("drop_caches"):
            out["root, to drop the page cache (drop_caches=true)"] = None
    locks = {f"platform.lock_dir={c['platform'].get('lock_dir')} is usable": None for c in configs}
    return [*out, *locks]


def unchecked_line(configs: list[dict]) -> str:
    """One line: what the nodes check and this machine did not."""
    return (
        "not checked on this machine, checked when it runs (before it submits, and by each cell on its node): "
        + "; ".join(left_to_nodes(configs))
    )


def dry_run(cells: list, sweep_dir: Path, platform) -> str:
    """The text a dry run prints: every planned cell (``planning.PlannedConfig``) with its key settings,
    the sbatch script of each array, and what only the nodes can check."""
    from campaign.estimate import Estimate

    est = Estimate([c.config for c in cells], local=False)
    parts = submit.groups(cells)
    how = (
        "one Slurm array"
        if len(parts) == 1
        else f"{len(parts)} Slurm arrays (one per job shape), one after the other"
    )
    lines = [
        f"dry run: {len(cells)} cell{'s' if len(cells) != 1 else ''} would be submitted as {how} (nothing was submitted)"
    ]
    for num, c in enumerate(cells):
        cfg = c.config
        lines.append(
            f"  #{num}: workload={cfg['workload']['name']} storage={cfg['storage']['name']} root={cfg['storage']['root']} "
            f"threads={cfg['threads']} batch_size={cfg['batch_size']} prefetch={cfg['prefetch']} "
            f"repeats={cfg['repeats']} [{' '.join(c.overrides)}]{est.cell(num)}"
        )
    lines.extend(est.lines())
    folder = sweep_dir / submit.SUBMITIT_DIR
    for k, ((nodes, per_node), members) in enumerate(parts):
        what = f"{nodes} node(s) x {per_node} task(s) per node, {len(members)} cell(s)"
        after = "starts when the array before it has ended" if k else ""
        lines.append(
            f"sbatch script ({folder}; {what}{'; ' + after if after else ''}):"
            if len(parts) > 1
            else f"sbatch script ({folder}):"
        )
        kw = submit.parameters(sweep_dir, platform, nodes, per_node, "PREVIOUS_ARRAY_ID" if k else None)
        lines.append(sbatch_text(folder, kw, len(members)))
    lines.append(unchecked_line([c.config for c in cells]))
    return "\n".join(lines)
