"""Where a run's checkpoints go: the target asked for, or the slow tier when the fast one cannot hold
them (missing, read-only, too small); the fallback is recorded with its reason."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)


def _estimate_bytes(model) -> int:
    # model and Adam's two slots, 4-byte floats, plus 10% for the index and metadata; a Keras model counts
    # its parameters, a torch one lists them
    n = model.count_params() if hasattr(model, "count_params") else sum(p.numel() for p in model.parameters())
    return int(n * 4 * 3 * 1.1)


def _fast_unusable(root: Path | None, need: int) -> str | None:
    """Why checkpoints cannot go to the fast tier (``need``: bytes it must hold at once), or None."""
    if root is None:
        return "no fast tier configured"
    if not root.is_dir():
        return f"fast tier {root} does not exist"
    if not os.access(root, os.W_OK):
        return f"fast tier {root} is not writable"
    try:
        free = shutil.disk_usage(root).free
    except OSError as e:
        return f"fast tier {root} cannot be read ({e.strerror})"
    if free < need:
        return (
            f"fast tier {root} has {free / 1e6:.0f} MB free, the checkpoints it would hold at once "
            f"(checkpoint.max_to_keep + 1) need ~{need / 1e6:.0f} MB"
        )
    return None


def choose_target(s, model, steps: int, with_checkpoints: bool) -> tuple[str, str | None]:
    """(where checkpoints go, why they fell back to the slow tier or None)."""
    if not with_checkpoints or s.target not in ("fast", "burst_buffer"):
        return s.target, None
    # the fast tier holds up to max_to_keep checkpoints, plus the one being written
    held = max(1, min(s.max_to_keep + 1, steps // s.every))
    why = _fast_unusable(s.fast_root, _estimate_bytes(model) * held)
    if why:
        log.warning("checkpoints go straight to the slow tier: %s", why)
        return "slow", why
    return s.target, None
