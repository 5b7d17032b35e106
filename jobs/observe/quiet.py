"""``platform.wait_quiet``: before a run, wait (up to ``platform.wait_quiet_max_s``) until the machine's
other processes leave its CPU, so that a run on a shared machine measures the storage and not the cores
another campaign took. Measured as the run's own figure is (``jobs.observe.usage.other_share``): the
machine's busy time in /proc/stat less this process's and its children's, over one-second samples.
"""

from __future__ import annotations

import logging
import time

from jobs.observe import usage

log = logging.getLogger(__name__)

SAMPLE_S = 1.0  # one look at the machine: long enough for /proc/stat's ticks (100 a second) to count


def other_now(sample_s: float = SAMPLE_S) -> float | None:
    """The share of the machine's CPU that other processes took over the next ``sample_s`` seconds (None
    where /proc/stat cannot be read)."""
    a = usage.snapshot(None)
    time.sleep(sample_s)
    return usage.other_share(a, usage.snapshot(None))


def wait(below: float | None, max_s: float, sample_s: float = SAMPLE_S) -> float | None:
    """Seconds waited until other processes held less than ``below`` of the machine's cores, at most
    ``max_s`` (then the run goes on, and the log says how busy the machine still was); None when
    ``below`` is None (no wait asked) or the machine's CPU cannot be read."""
    if below is None:
        return None
    started = time.monotonic()
    share = other_now(sample_s)
    if share is None:
        log.warning("platform.wait_quiet: /proc/stat cannot be read; the run starts without waiting")
        return None
    if share < below:
        return 0.0
    log.info(
        "platform.wait_quiet=%g: other processes hold %.0f%% of the cores; waiting up to %.0f s for less "
        "than %.0f%%",
        below,
        100 * share,
        max_s,
        100 * below,
    )
    while share is not None and share >= below and time.monotonic() - started < max_s:
        share = other_now(sample_s)
    waited = time.monotonic() - started
    if share is not None and share >= below:
        log.warning(
            "platform.wait_quiet: waited %.0f s (platform.wait_quiet_max_s); other processes still hold "
            "%.0f%% of the cores; the run starts on a busy machine",
            waited,
            100 * share,
        )
    else:
        log.info(
            "platform.wait_quiet: waited %.0f s; other processes now hold %.1f%%", waited, 100 * (share or 0)
        )
    return waited
