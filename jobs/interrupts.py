"""Signals that end a campaign (SIGINT from Ctrl-C, SIGTERM from scancel or kill), raised only where
unwinding is safe.

Raised asynchronously inside TensorFlow's Python iterator code, while its worker threads run, an
interrupt can corrupt the heap on the way out (seen in 1 of 3 tries: ``malloc_consolidate(): invalid
chunk size``, exit -6). So while TensorFlow iterates (inside ``deferred()``), a signal is only noted,
and ``check()``, which the batch loops call between batches, raises it; elsewhere it is raised at
once. SIGINT raises KeyboardInterrupt, SIGTERM ``Interrupted``; both unwind the cell (tiers torn
down, locks released) up to ``campaign.__main__``.

A signal cannot reach a thread that is inside C++ code: an AlexNet step that takes tens of seconds on a
busy CPU, or a GET of TensorFlow's native reader that waits 60 s on a store that stopped answering,
would hold it until it returned. So the loops run each batch's fetch and each step through
``waiting()``: on a helper thread of its own, while the main thread only waits and calls ``check()``
every ``WAIT_S``. A signal then ends the run within that time; the helper, left inside its call, is a
daemon thread, and ``campaign.__main__`` ends the process without waiting for it (``abandoned()``).

Raised inside TensorFlow's C++ bindings (building a pipeline traces Python functions through pybind11),
the interrupt comes back out as a ``RuntimeError`` ("MISMATCH of original and normalized active
exception types ... REPLACED BY KeyboardInterrupt"; seen in 1 of 16 CI runs, which then recorded the
cell as failed and ended with status 1). So every signal is also remembered (``received()``), and an
exception that follows one is turned back into the interrupt: by the cell (``campaign.cell``), and by
``surfaced()`` around the whole of a campaign's run under Hydra, whose own handler would print it.

Python ignores whatever a finalizer raises ("Exception ignored in: <function AtomicFunction.__del__>"):
a signal that arrived while TensorFlow's garbage ran its ``__del__`` was lost, and the campaign ended
with status 0 as if no one had pressed Ctrl-C (1 of 948 tests in one CI run). So a signal that lands
inside a ``__del__`` is sent to the main thread again ``AGAIN_S`` later, to be raised once the finalizer
has returned, and ``settle()`` waits for it where a command ends.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")
WAIT_S = 0.1  # how often the main thread looks for a signal while a helper computes or fetches
AGAIN_S = 0.01  # how soon a signal that landed inside a finalizer is sent again

_pending: list[int] = []  # a signal noted while TensorFlow iterated
_depth = [0]  # how many deferred() blocks the main thread is in
_received: list[int] = []  # every signal routed here, in order
_abandoned: list[threading.Thread] = []  # helpers left inside a call when a signal ended the wait
_repeat = [True]  # whether a second signal interrupts again (False: it is only noted, clean-up goes on)
_hard_exit: list[Callable[[], None]] = []  # what must run even where the process ends without its shutdown
_held_from: list[int] = []  # how many signals had come when ``hold()`` was called (none: not held)
_again: list[int] = []  # signals that landed inside a finalizer, being sent to the main thread again


class Interrupted(BaseException):
    """SIGTERM (or another signal) asked the campaign to end."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exception(signum: int) -> BaseException:
    """What a signal raises: KeyboardInterrupt for SIGINT, ``Interrupted`` for the others."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Interrupted(signum)


def signum_of(e: BaseException) -> int:
    """The signal that ``e`` stands for: SIGINT for KeyboardInterrupt, the signal of ``Interrupted``,
    SIGTERM for anything else (what a parent passes on to its children as it unwinds)."""
    if isinstance(e, KeyboardInterrupt):
        return signal.SIGINT
    return e.signum if isinstance(e, Interrupted) else signal.SIGTERM


def name_of(e: BaseException) -> str:
    """The name of the signal that ``e`` stands for (``signum_of``), as a command's last line says it."""
    return signal.Signals(signum_of(e)).name


def _raise(signum: int) -> None:
    raise exception(signum)


def received() -> int | None:
    """The first signal that asked this process to end, if one did."""
    return _received[0] if _received else None


def _handler(signum: int, frame) -> None:
    if signum in _again:  # this module's own sending of a signal that landed inside a finalizer
        _again.remove(signum)
    else:
        _received.append(signum)
    if _held_from or (len(_received) > 1 and not _repeat[0]):
        return
    if _depth[0] > 0:
        _pending.append(signum)
        return
    if _in_finalizer(frame):
        _send_again(signum)
        return
    _raise(signum)


def _in_finalizer(frame) -> bool:
    """Whether ``frame`` runs inside a ``__del__``, where Python ignores whatever is raised."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _send_again(signum: int) -> None:
    """Send ``signum`` to the main thread again in ``AGAIN_S``, from a thread of its own."""
    _again.append(signum)
    main = threading.main_thread().ident
    timer = threading.Timer(AGAIN_S, _kill_quietly, (main, signum))
    timer.daemon = True
    timer.start()


def _kill_quietly(thread_id: int, signum: int) -> None:
    with contextlib.suppress(OSError, ValueError):  # the process is ending: nothing to interrupt
        signal.pthread_kill(thread_id, signum)


def settle(limit_s: float = 1.0) -> None:
    """Wait, at most ``limit_s``, for a signal that landed inside a finalizer to come again and be raised
    here (where a command ends: otherwise it would come during the clean-up, only noted)."""
    deadline = time.monotonic() + limit_s
    while _again and time.monotonic() < deadline:
        time.sleep(AGAIN_S / 2)


ENDING = {signal.SIGINT, signal.SIGTERM}  # the signals that end a campaign


def pending() -> bool:
    """Whether a SIGINT or SIGTERM waits for the main thread, which the kernel holds inside a system call
    only SIGKILL interrupts (a read on a FUSE mount whose layer stopped answering): the kernel's own
    pending sets (``/proc``, ``ShdPnd`` of the process and ``SigPnd`` of the main thread). A handler that
    already ran leaves none."""
    main = threading.main_thread().native_id
    mask = 0
    for path, field in ((f"/proc/self/task/{main}/status", "SigPnd"), ("/proc/self/status", "ShdPnd")):
        with contextlib.suppress(OSError, ValueError), open(path) as f:
            mask |= next(int(line.split()[1], 16) for line in f if line.startswith(field + ":"))
    return any(mask & (1 << (sig - 1)) for sig in ENDING)


def install(repeat: bool = True) -> None:
    """Route SIGINT and SIGTERM through this module (main thread only). ``repeat=False``: only the first
    signal is raised, later ones are noted (a child whose parent passes on a signal it also had)."""
    _repeat[0] = repeat
    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)


def hold() -> None:
    """From now until the process ends, SIGINT and SIGTERM are only noted, never raised: the campaign is
    over, and what is left is clean-up that must finish (its embedded servers stopped, their folders
    removed), each step bounded by its own timeout. A signal raised there cut a folder's removal short,
    its marker gone first, so that no later campaign could tell the folder was the tool's."""
    if not _held_from:
        _held_from.append(len(_received))


def release() -> None:
    """Undo ``hold()``: for a process that runs another command after one ended in it (the dry runs of
    ``campaign.subcampaign``, each ``python -m campaign`` in turn)."""
    _held_from.clear()


def late() -> int | None:
    """The first signal that came after ``hold()``, if one did."""
    return _received[_held_from[0]] if _held_from and len(_received) > _held_from[0] else None


def check() -> None:
    """Raise the signal noted while TensorFlow iterated, if any (call between batches)."""
    if _pending:
        signum = _pending[0]
        _pending.clear()
        _raise(signum)


@contextlib.contextmanager
def surfaced() -> Iterator[None]:
    """A block in which an error raised after a signal came is raised as that signal's interrupt, its cause
    the error: a library that caught the interrupt and raised an error of its own instead does not turn
    Ctrl-C or SIGTERM into a traceback (TensorFlow's bindings; OmegaConf, whose clean-up of a node the
    interrupt left half built fails with AttributeError, seen once in a CI run beside a CPU hog)."""
    try:
        yield
    except Exception as e:
        surface(e)
        raise


def surface(error: Exception) -> None:
    """Raise the interrupt of the signal that came, if one did, its cause ``error``: for a handler that
    catches every error (a planning check that reports a library's error as a refusal), so that the error
    a signal left is not taken for the check's answer."""
    signum = received()
    if signum is not None:
        raise exception(signum) from error


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A block in which signals wait for the next ``check()`` (or the end of the block)."""
    _depth[0] += 1
    try:
        yield
    finally:
        _depth[0] -= 1
    check()


class _Helper:
    """One daemon thread that runs the calls ``waiting()`` gives it, one at a time."""

    def __init__(self) -> None:
        self.calls: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="iocampaign-step", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            fn, args, box, done = self.calls.get()
            try:
                box.append((True, fn(*args)))
            except BaseException as e:  # StopIteration included: the caller re-raises it
                box.append((False, e))
            done.set()
            # the result is the caller's now: held here until the next call, the last batch of a run would
            # keep its memory (Grain's in /dev/shm: 38 MB a task and run, until the campaign ended)
            del fn, args, box, done


_helper: list[_Helper] = []


def waiting(fn: Callable[..., T], *args) -> T:
    """``fn(*args)``, run on a helper thread while the main thread waits for it and raises a signal within
    ``WAIT_S`` (in or out of ``deferred()``); outside the main thread, simply ``fn()``."""
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    check()
    if not _helper:
        _helper.append(_Helper())
    helper, box, done = _helper[0], [], threading.Event()
    helper.calls.put((fn, args, box, done))
    try:
        while not done.wait(WAIT_S):
            check()
    except BaseException:
        if not done.is_set():  # the helper is still inside fn: leave it there, and use a new one
            _abandoned.append(helper.thread)
            _helper.clear()
        raise
    ok, value = box[0]
    if ok:
        return value
    raise value


def abandoned() -> bool:
    """Whether a helper was left inside a call that a signal stopped waiting for."""
    return any(t.is_alive() for t in _abandoned)


def before_hard_exit(func: Callable[[], None]) -> None:
    """Run ``func`` before the process ends even where ``campaign.__main__`` ends it at once (a helper
    abandoned inside a call: ``atexit`` does not run then). For what must not outlive the process and
    touches nothing the helper holds: the embedded object-store servers and their folders."""
    if func not in _hard_exit:
        _hard_exit.append(func)


def run_hard_exit() -> None:
    """The ``before_hard_exit`` functions, each once, the last registered first; one that fails does not
    keep the others from running."""
    while _hard_exit:
        func = _hard_exit.pop()
        try:
            func()
        except Exception:  # noqa: BLE001 - the process is ending: the others still run
            pass
