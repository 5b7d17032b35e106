"""What the dry run of a Slurm campaign prints, on any machine (a laptop without Slurm included): every
planned cell, the sbatch script of every array as submitit writes it, and what only the nodes can
check. Nothing here calls Slurm, looks at the cluster's paths or writes a file."""

from __future__ import annotations

from pathlib import Path

from campaign.slurm import submit
from campaign.slurm.sbatch import sbatch_text
from jobs import workloads
from jobs.storage import backends


def _tier(key: str, st, free_for_data: bool) -> str:
    """What the nodes check of one tier (``st``: its typed settings)."""
    where = f"{key}.root={st.root}"
    if st.model is not None:
        return f"{key}={st.name} can be mounted there (FUSE) at {where}"
    if st.emulate is not None:
        return f"{key}={st.name} can be built there (root, loop device, cgroup I/O limits) at {where}"
    fs = st.fs_types if st.fs_check else None  # jobs.storage.fstype
    on = f", is on {' or '.join(map(str, fs))}" if fs else ""
    room = " and has room for the dataset" if free_for_data else ""
    return f"{where} exists, is writable{on}{room}"


def _embedded_store(st, nodes: int) -> str:
    """What the nodes check of the tier's embedded object store (``st``: its typed settings): its server
    starts there, with what its service says it needs; spread over several nodes, each node's part listens
    on its cluster address."""
    from jobs.storage.objectstore import services

    service = services.get(st.service)
    if nodes > 1:
        return (
            f"{service.preset}: the embedded {service.product} server starts a part on each of the {nodes} "
            f"nodes ({service.server_needs}), listening on the node's cluster address"
        )
    needs = service.server_needs
    return f"{service.preset}: the embedded {service.product} server starts on the node ({needs})"


def _tiers(cfg) -> list[tuple[str, object]]:
    """(setting, typed tier) of every tier a cell touches: its workload's, then the stage."""
    from jobs import workloads

    named = [("storage", cfg.storage), ("checkpoint.slow", cfg.checkpoint.slow)]
    named += [("checkpoint.fast", cfg.checkpoint.fast)]
    try:
        built = workloads.get(cfg.workload.kind).tiers(cfg)
    except KeyError:
        built = [cfg.storage]
    keys = [next((k for k, st in named if st is tier), "storage") for tier in built]
    return [*zip(keys, built), *([("stage", cfg.stage)] if cfg.stage is not None else [])]


def left_to_nodes(cells: list) -> list[str]:
    """What planning did not check on this machine for cells that run on Slurm's nodes, in the order
    first met: the tiers' folders, mounts and tools, the dataset's folder, the nodes' commands and rights
    (``jobs.storage.roots.elsewhere``)."""
    out: dict[str, None] = {}
    for cell in cells:
        cfg = cell.config
        ds = cfg.dataset
        synthetic = ds is not None and ds.source == "synthetic"
        for key, st in _tiers(cfg):
            out[_tier(key, st, synthetic and key == "storage")] = None
        if ds is not None and not synthetic and ds.path:
            out[f"dataset.path={ds.path} holds the images"] = None
        if backends.of(cfg.storage).embedded(cfg.storage):
            out[_embedded_store(cfg.storage, cfg.platform.nodes)] = None
        for need in workloads.get(cfg.workload.kind).node_needs:
            out[f"{need} (workload={cfg.workload.name})"] = None
        if cfg.trace.posix:
            out["dftracer's preload library (trace.posix=true)"] = None
        if cfg.drop_caches:
            out["root, to drop the page cache (drop_caches=true)"] = None
    locks = {f"platform.lock_dir={c.config.platform.lock_dir} is usable": None for c in cells}
    return [*out, *locks]


def unchecked_line(cells: list) -> str:
    """One line: what the nodes check and this machine did not."""
    return (
        "not checked on this machine, checked when it runs (before it submits, and by each cell on its "
        "node): " + "; ".join(left_to_nodes(cells))
    )


def shown_python(platform) -> tuple[str, str]:
    """(the Python the sbatch script names, a line saying which it is). ``platform.python`` when set; else the
    one that submits, which is this one only where this machine submits (sbatch on PATH: the login node);
    elsewhere (a laptop) its path on the login node is not known here, and the script says ``python``."""
    import shlex
    import shutil
    import sys

    if platform.python:
        return submit.nodes_python(platform), f"the cells run with platform.python={platform.python}"
    if shutil.which("sbatch"):
        return shlex.quote(sys.executable), f"the cells run with the Python that submits: {sys.executable}"
    return "python", (
        "the cells run with the Python that submits the campaign on the login node (platform.python=null; "
        "shown as python: this machine has no sbatch); name the nodes' one with platform.python=<its path>"
    )


def dry_run(cells: list, sweep_dir: Path, platform) -> str:
    """The text a dry run prints: every planned cell (``jobs.cell.Cell``) with its key settings,
    the sbatch script of each array, and what only the nodes can check."""
    from campaign.estimate import Estimate

    est = Estimate(cells, local=False)
    parts = submit.groups(cells)
    how = (
        "one Slurm array"
        if len(parts) == 1
        else f"{len(parts)} Slurm arrays (one per job shape), one after the other"
    )
    many = "s" if len(cells) != 1 else ""
    lines = [f"dry run: {len(cells)} cell{many} would be submitted as {how} (nothing was submitted)"]
    for num, c in enumerate(cells):
        cfg = c.config
        lines.append(
            f"  #{num}: workload={cfg.workload.name} storage={cfg.storage.name} root={cfg.storage.root} "
            f"threads={cfg.threads} batch_size={cfg.batch_size} prefetch={cfg.prefetch} "
            f"repeats={cfg.repeats} [{' '.join(c.overrides)}]{est.cell(num)}"
        )
    lines.extend(est.lines())
    python, which = shown_python(platform)
    lines.append(which)
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
        lines.append(sbatch_text(folder, kw, len(members), python))
    lines.append(unchecked_line(cells))
    return "\n".join(lines)
