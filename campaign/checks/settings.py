"""The cell's own numbers and choices: threads, every bound its fields declare, the shuffle's buffer and
dropping the caches (root's)."""

from __future__ import annotations

import os

from campaign import limits
from campaign.checks import Checking
from campaign.errors import ConfigError
from jobs.storage.roots import elsewhere


def threads(c: Checking) -> None:
    limits.threads(c.cfg)


def bounds(c: Checking) -> None:
    """Every number within the bounds its field declares (``campaign.limits.bounds``)."""
    limits.bounds(c.cfg, checked=None if c.memo is None else c.memo.setdefault("bounded sections", {}))


def shuffle_buffer(c: Checking) -> None:
    cfg = c.cfg
    if cfg.shuffle_buffer is not None and cfg.shuffle == "none":
        raise ConfigError(
            f"shuffle_buffer={cfg.shuffle_buffer} has no effect with shuffle=none: leave it unset, or "
            "choose shuffle=global|local"
        )


def drop_caches(c: Checking) -> None:
    if c.cfg.drop_caches and os.geteuid() != 0 and not elsewhere(c.cfg):
        raise ConfigError(
            "drop_caches=true needs root (it writes /proc/sys/vm/drop_caches); "
            "leave it false to evict per file"
        )
