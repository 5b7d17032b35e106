"""Signals that end a campaign (SIGINT from Ctrl-C, SIGTERM from scancel or kill), raised only where
unwinding is safe.

Raised asynchronously inside TensorFlow's Python iterator code, while its worker threads run, an
interrupt can corrupt the heap on the way out (seen in 1 of 3 tries: ``malloc_consolidate(): invalid
chunk size``, exit -6). So while TensorFlow iterates (inside ``deferred()``), a signal is only noted,
and ``check()``, which the batch loops call between batches, raises it; elsewhere it is raised at
once. SIGINT raises KeyboardInterrupt, SIGTERM ``Interrupted``; both unwind the cell (tiers torn
down, locks released) up to ``campaign.__main__``.

Raised inside TensorFlow's C++ bindings (building a pipeline traces Python functions through pybind11),
the interrupt comes back out as a ``RuntimeError`` ("MISMATCH of original and normalized active
exception types ... REPLACED BY KeyboardInterrupt"; seen in 1 of 16 CI runs, which then recorded the
cell as failed and ended with status 1). So every signal is also remembered (``received()``), and the
cell turns an exception that follows one back into the interrupt (``campaign.cell``).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

_pending: list[int] = []  # a signal noted while TensorFlow iterated
_depth = [0]  # how many deferred() blocks the main thread is in
_received: list[int] = []  # every signal routed here, in order
_repeat = [True]  # whether a second signal interrupts again (False: it is only noted, clean-up goes on)


class Interrupted(BaseException):
    """SIGTERM (or another signal) asked the campaign to end."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exception(signum: int) -> BaseException:
    """What a signal raises: KeyboardInterrupt for SIGINT, ``Interrupted`` for the others."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Interrupted(signum)


def _raise(signum: int) -> None:
    raise exception(signum)


def received() -> int | None:
    """The first signal that asked this process to end, if one did."""
    return _received[0] if _received else None


def _handler(signum: int, frame) -> None:
    _received.append(signum)
    if len(_received) > 1 and not _repeat[0]:
        return
    if _depth[0] > 0:
        _pending.append(signum)
        return
    _raise(signum)


def install(repeat: bool = True) -> None:
    """Route SIGINT and SIGTERM through this module (main thread only). ``repeat=False``: only the first
    signal is raised, later ones are noted (a child whose parent passes on a signal it also had)."""
    _repeat[0] = repeat
    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)


def check() -> None:
    """Raise the signal noted while TensorFlow iterated, if any (call between batches)."""
    if _pending:
        signum = _pending[0]
        _pending.clear()
        _raise(signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A block in which signals wait for the next ``check()`` (or the end of the block)."""
    _depth[0] += 1
    try:
        yield
    finally:
        _depth[0] -= 1
    check()
