"""The input pipeline on a tf.data service (``input.service=true``): what it can run, so far."""

from __future__ import annotations

from campaign.checks import Checking
from campaign.checks.workload import able
from campaign.errors import ConfigError
from jobs.cell import select


def service(c: Checking) -> None:
    """What a cell on the tf.data service (input.service=true) can run, so far."""
    cfg = c.cfg
    if not cfg.input.service:
        return
    if not c.workload.service_ready:
        raise ConfigError(
            f"input.service=true: workload={cfg.workload.name} cannot read through the tf.data service "
            f"(the service runs workloads of kind {able('service_ready')} so far)"
        )
    if cfg.dataset.format != "files":
        raise ConfigError(
            f"input.service=true: the service reads one-file-per-image sets so far, not "
            f"dataset.format={cfg.dataset.format}"
        )
    if select(cfg, "workload.batches") is not None or (select(cfg, "workload.read_delay_ms") or 0) > 0:
        raise ConfigError(
            "input.service=true reads whole passes without an added read delay: leave workload.batches "
            "and workload.read_delay_ms unset"
        )
    nodes, per_node = cfg.platform.nodes, cfg.platform.tasks_per_node
    if per_node > 1 or cfg.trace.posix:
        raise ConfigError(
            "input.service=true runs one consumer, untraced: leave platform.tasks_per_node=1 and "
            "trace.posix=false (the workers are the cell's other tasks)"
        )
    if cfg.input.workers < nodes:
        raise ConfigError(
            f"input.workers={cfg.input.workers} spreads the service over platform.nodes={nodes}: "
            "give at least one worker per node"
        )
