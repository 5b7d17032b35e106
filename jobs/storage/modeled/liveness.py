"""Whether a modelled tier still serves. Its FUSE layer is a process of its own: killed (SIGKILL, the
OOM killer), the kernel answers every read on the mount with ENOTCONN, and a tf.data pipeline that
drops unreadable images (``ignore_errors``) would go on and report the few images it read before as
the tier's speed. So the runner asks the tier before and after every run, and whenever a run raised:
a run whose tier died fails, naming it, and none of its numbers is kept.

A layer that stops answering (stopped, deadlocked) is worse: every read on the mount waits for it, in
the kernel, without end. So while a cell has the tier mounted, a ``Watch`` in the process that mounted it
asks the layer for its counters each second; one that leaves a question unanswered for
``storage.model.answer_s`` is ended (SIGKILL), which makes the kernel fail every waiting read, and the
run fails naming why.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import threading
import time

from jobs import interrupts
from jobs.storage.modeled.mount import ModeledTier, ModelError, counters, layer_runs, mark_unanswered

log = logging.getLogger(__name__)

ASK_EVERY_S = 1.0


class Watch:
    """A thread that asks ``tier``'s layer for its counters every ``ASK_EVERY_S`` and ends the layer when
    a question waits ``answer_s`` (``start``, then ``stop`` before the tier's tear-down). The question is
    asked on a thread of its own, as it waits in the kernel; one at a time.

    A campaign that is being stopped (a SIGINT or SIGTERM handled, or waiting for a main thread that a
    read on the mount holds in the kernel) does not wait ``answer_s``: a question unanswered for
    ``ASK_EVERY_S`` ends the layer then, during the runs and at ``stop`` (the tear-down, which would wait
    for the layer too)."""

    def __init__(self, tier: ModeledTier, answer_s: float):
        self.tier, self.answer_s = tier, answer_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"watch {tier.name}", daemon=True)
        self._question: tuple[threading.Event, float] | None = None  # the last one, and when it was asked
        self._ended = False

    def start(self) -> Watch:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop asking, before the tier's tear-down, with a last question (the one still unanswered, or a
        new one): one left unanswered is waited for as the watch would wait for it, and the layer is then
        ended, since the tear-down would wait for it too."""
        self._stopped.set()
        self._thread.join(ASK_EVERY_S + 1)
        if self._ended:
            return
        if self._question is None or self._question[0].is_set():
            self._ask_again()
        waited = self._silence(*self._question, stoppable=False)
        if waited:
            self._end(waited)

    def _watch(self) -> None:
        # SIGINT and SIGTERM are left to the main thread (the questions' threads inherit this mask). Taken
        # here, a Ctrl-C meant for a main thread held on the mount ran only Python's C-level handler: the
        # kernel no longer showed it pending, and the watch waited ``answer_s`` (31.7 s at 30; 2-3 s now).
        signal.pthread_sigmask(signal.SIG_BLOCK, interrupts.ENDING)
        while not self._stopped.wait(ASK_EVERY_S):
            self._ask_again()
            waited = self._silence(*self._question, stoppable=True)
            if waited:
                self._end(waited)
                return

    def _ask_again(self) -> None:
        self._question = threading.Event(), time.monotonic()
        threading.Thread(target=self._ask, args=(self._question[0],), daemon=True).start()

    def _ask(self, answered: threading.Event) -> None:
        counters(self.tier.device)  # None where the layer died: an answer all the same
        answered.set()

    def _silence(self, answered: threading.Event, asked: float, stoppable: bool) -> float:
        """The whole seconds the question asked at ``asked`` has gone unanswered once the layer is to be
        ended: ``answer_s``, or ``ASK_EVERY_S`` while the campaign is being stopped. 0 once it is answered
        (or, where ``stoppable``, once the watch is stopped)."""
        while not answered.is_set():
            waited = time.monotonic() - asked
            stopping = interrupts.received() is not None or interrupts.pending()
            limit = ASK_EVERY_S if stopping else self.answer_s
            if waited >= limit:
                return max(limit, math.floor(waited))
            if answered.wait(min(ASK_EVERY_S, limit - waited)) or (stoppable and self._stopped.is_set()):
                break
        return 0.0

    def _end(self, waited: float) -> None:
        t, self._ended = self.tier, True
        if not layer_runs(t.pid, t.backing):
            return  # died meanwhile: the runs name that
        why = f"the tier's FUSE layer (pid {t.pid}) did not answer for {waited:g} s and was ended"
        try:
            mark_unanswered(t, why)  # before the kill: a run that sees the layer gone reads why
        except OSError as e:  # a full disk under the backing folder: the runs then say it died
            log.warning("storage=%s: could not keep why its layer was ended (%s)", t.name, e)
        log.error("storage=%s: %s", t.name, why)
        with contextlib.suppress(ProcessLookupError):
            os.kill(t.pid, signal.SIGKILL)  # the kernel then fails every request that waits for it


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
def named(tiers: list[ModeledTier]):
    """A failure while a cell has the modelled ``tiers`` mounted, outside its runs (its dataset listed,
    generated or staged there), named as the tier's (TierDied) where one of them no longer serves, not as
    the ``OSError`` a read on a dead mount raises; a run's own TierDied passes as it is."""
    try:
        yield
    except TierDied:
        raise
    except Exception as e:
        err = dead_one(tiers, "while the cell used it")
        if err is None:
            raise
        raise err from e


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
