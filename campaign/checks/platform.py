"""Where and how the cell runs: the site's account, its tasks and nodes, the tf.data service's workers,
the shared lock folder, Slurm's fields and the memory limit of its runs."""

from __future__ import annotations

import os

from campaign import limits
from campaign.checks import Checking
from campaign.checks.workload import able
from campaign.errors import ConfigError
from jobs.storage import backends
from jobs.storage.roots import elsewhere, memoised


def account(c: Checking) -> None:
    platform = c.cfg.platform
    if platform.needs_account and not platform.account:
        raise ConfigError(
            f"platform.account is not set: platform={platform.name} needs your allocation, "
            "e.g. platform.account=2024-1-23"
        )


def tasks(c: Checking) -> None:
    """What a multi-task cell (platform.tasks_per_node > 1, or several nodes) can run, so far."""
    cfg = c.cfg
    nodes, per_node = cfg.platform.nodes, cfg.platform.tasks_per_node
    if nodes * per_node == 1:
        return
    what = f"platform.nodes={nodes} platform.tasks_per_node={per_node}"
    if nodes > 1 and cfg.platform.kind != "slurm":
        raise ConfigError(
            f"{what}: a cell across several nodes is a Slurm job step (platform=slurm or a site preset); "
            "here, on one machine, use platform.nodes=1"
        )
    if nodes > 1 and not backends.of(cfg.storage).every_node:
        raise ConfigError(
            f"{what}: every node reads the dataset, but storage={cfg.storage.name} (kind {cfg.storage.kind}) "
            "is one machine's; a multi-node cell needs a shared file system "
            "(e.g. storage=lustre or storage=shared "
            "storage.root=<its scratch folder>)"
        )
    if not c.workload.shardable:
        raise ConfigError(
            f"{what}: workload={cfg.workload.name} cannot split a run into tasks (multi-task cells run "
            f"workloads of kind {able('shardable')} so far)"
        )
    if cfg.dataset is not None and cfg.dataset.format != "files":
        raise ConfigError(
            f"{what}: tasks shard one-file-per-image sets so far, not dataset.format={cfg.dataset.format}"
        )
    if cfg.trace.posix:
        raise ConfigError(f"{what}: trace.posix=true traces one process; leave it false for multi-task cells")
    n = c.images
    if n is not None and n // (nodes * per_node) < cfg.batch_size:
        raise ConfigError(
            f"{what}: each of the {nodes * per_node} tasks would read {n // (nodes * per_node)} of the "
            f"{n} images, fewer than batch_size={cfg.batch_size}; use fewer tasks or more images"
        )


def machine(c: Checking) -> None:
    """The service's workers this machine can run, the lock folder, Slurm's fields, the memory limit."""
    from jobs.storage import locks

    cfg, memo = c.cfg, c.memo
    limits.workers(cfg)
    if not elsewhere(cfg):
        memoised(
            memo,
            ("lock_dir", cfg.platform.lock_dir),
            lambda: locks.check_dir(cfg.platform.lock_dir),
        )
    if cfg.platform.kind == "slurm":
        from campaign.slurm import params

        params.check(cfg.platform)
    if cfg.platform.memory_limit_gb is not None and not elsewhere(cfg):
        from jobs.execution import memlimit

        why = memoised(memo, ("memory limit",), memlimit.available)
        if why is not None:
            raise ConfigError(f"{memlimit.SETTING}={cfg.platform.memory_limit_gb}: {why}")
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if cfg.platform.memory_limit_gb * 1e9 >= total:
            raise ConfigError(
                f"{memlimit.SETTING}={cfg.platform.memory_limit_gb} is not below this machine's memory "
                f"({total / 1e9:.1f} GB): it would limit nothing; give less, or leave it unset"
            )
