"""Whether a modelled tier still serves. Its FUSE layer is a process of its own: killed (SIGKILL, the
OOM killer), the kernel answers every read on the mount with ENOTCONN, and a tf.data pipeline that
drops unreadable images (``ignore_errors``) would go on and report the few images it read before as
the tier's speed. So the runner asks the tier before and after every run, and whenever a run raised:
a run whose tier died fails, naming it, and none of its numbers is kept.
"""

from __future__ import annotations

import contextlib

from jobs.storage.modeled.mount import ModeledTier, ModelError


class TierDied(ModelError):
    """A modelled tier stopped serving while a cell used it; the message names the tier and the run."""


def _what(run: int) -> str:
    return f"run {run}" if run > 0 else f"warm-up {1 - run}"


def dead_one(tiers: list[ModeledTier], when: str) -> TierDied | None:
    """The error for the first of ``tiers`` that no longer serves (``when``: when it was seen), or None."""
    for t in tiers:
        why = t.dead()
        if why:
            return TierDied(f"storage={t.name}: {why} {when}; its numbers are dropped")
    return None


@contextlib.contextmanager
def watched(tiers: list[dict] | None, run: int):
    """Run ``run`` (a warm-up when <= 0) on the modelled tiers ``tiers`` (as provenance keeps them):
    TierDied when one is dead before the run starts, after it ends, or when the run raised while one
    was dead (the run's own error is then a consequence, kept as the cause)."""
    live = [ModeledTier(**t) for t in tiers or ()]
    err = dead_one(live, f"before {_what(run)}")
    if err:
        raise err
    try:
        yield
    except Exception as e:
        err = dead_one(live, f"during {_what(run)}")
        if err is None:
            raise
        raise err from e
    err = dead_one(live, f"during {_what(run)}")
    if err:
        raise err
