"""The cell's workload: its own checks (``Workload.check``, in its package), and what it asks of the
pipeline: batches prefetched to a device it has, traced runs of a framework's I/O, enough full batches a
run."""

from __future__ import annotations

from campaign.checks import Checking
from campaign.errors import ConfigError
from jobs.storage.roots import elsewhere

TRACE_RUNS = ("all", "extra")


def its_own(c: Checking) -> None:
    """The workload is registered, and its own checks hold."""
    c.workload.check(c.cfg)


def prefetch_to(c: Checking) -> None:
    cfg = c.cfg
    if cfg.prefetch_to != "device":
        return
    if not c.workload.prefetches_to_device:
        raise ConfigError(
            f"prefetch_to=device: workload={cfg.workload.name} has no training device to prefetch to "
            "(workload=alexnet or alexnet_small has); use prefetch_to=host"
        )
    if cfg.prefetch < 1:
        raise ConfigError(
            "prefetch_to=device needs prefetch=1 or more (batches to hold in the device's memory)"
        )


def trace(c: Checking) -> None:
    """trace.posix=true: the workload's I/O is a framework's, and dftracer's preload library is here;
    trace.runs names which runs are traced, and only for a traced cell."""
    cfg = c.cfg
    runs = cfg.trace.runs
    if runs not in TRACE_RUNS:
        raise ConfigError(
            f"trace.runs={runs} is not one of {', '.join(TRACE_RUNS)} (all: every run traced; extra: the "
            "measured runs untraced and one more run traced for its calls)"
        )
    if not cfg.trace.posix:
        if runs != "all":
            raise ConfigError(
                f"trace.runs={runs} names the runs trace.posix=true traces; add trace.posix=true (or leave "
                "trace.runs out)"
            )
        return
    if not c.workload.posix_traceable:
        raise ConfigError(
            f"trace.posix=true traces a framework's I/O; workload={cfg.workload.name} does not use one "
            "(leave trace.posix=false for it)"
        )
    if elsewhere(cfg):
        return  # dftracer's library is the nodes'
    from jobs.execution import traced
    from jobs.observe import posix

    try:
        traced.preload_library()
    except posix.PosixTraceError as e:
        raise ConfigError(str(e)) from None


def batches(c: Checking) -> None:
    """Enough full batches per run (or per task) for what the workload measures (``min_batches``)."""
    cfg, n = c.cfg, c.images
    tasks = cfg.platform.nodes * cfg.platform.tasks_per_node
    if n is None or c.workload.min_batches <= 1:
        return
    got = n // tasks // cfg.batch_size
    if got < c.workload.min_batches:
        each = f"each of the {tasks} tasks" if tasks > 1 else "a run"
        raise ConfigError(
            f"workload={cfg.workload.name} needs {c.workload.min_batches} batches a run "
            "(the first is left out): "
            f"{each} would get {got} of batch_size={cfg.batch_size} from {n} images; use more images "
            "(dataset.num_images), a smaller batch_size or fewer tasks"
        )


def able(capability: str) -> str:
    """The workloads (their kinds) that declare ``capability``."""
    from jobs import workloads

    return ", ".join(k for k in workloads.names() if getattr(workloads.get(k), capability)) or "no workload"
