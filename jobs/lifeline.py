"""Helper processes never outlive the process that started them.

A campaign killed with SIGKILL runs no clean-up, so its helpers (the traced child, multi-task tasks,
the tf.data service's dispatcher and workers, the burst buffer's drain) must end by themselves: each
asks the kernel for a signal when its parent dies (``prctl(PR_SET_PDEATHSIG)``), and checks that the
parent which started it is still its parent (it may have died before the request was made).

The parent passes its pid in ``IOCAMPAIGN_PARENT_PID`` (``child_env``); ``bind`` removes it from the
helper's own environment, so that processes the helper starts in turn are bound to the helper, and a
Slurm job step (whose tasks' parent is ``slurmstepd``, ended by Slurm with the job) is never bound.

How each of the tool's processes ends is here too (``exit_as_python``): as the interpreter would end it,
without tearing down the libraries it loaded.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

ENV = "IOCAMPAIGN_PARENT_PID"
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
# pids of the cell's own processes that live across its runs, not waited for until the cell ends (s3fs under
# storage.reader=fuse, the tf.data service's dispatcher and workers): their CPU is the cell's, not another's
# (jobs.observe.usage, other_cpu_share)
HELPERS: set[int] = set()


def child_env(base: dict | None = None) -> dict:
    """The environment for a helper process started by this one (``subprocess.Popen(env=...)``)."""
    return {**(os.environ if base is None else base), ENV: str(os.getpid())}


def plain_env(base: dict | None = None) -> dict:
    """The environment for a process that must not bind to this one (a Slurm job step's srun)."""
    env = dict(os.environ if base is None else base)
    env.pop(ENV, None)
    return env


def bind(parent: int | None = None, sig: int = signal.SIGTERM) -> bool:
    """In a helper: receive ``sig`` when the parent dies, and end now if the parent that started this
    process (``parent``, else ``IOCAMPAIGN_PARENT_PID``) is already gone. Returns whether it bound
    (False when nothing says which parent: a task of a Slurm step)."""
    pid = parent if parent is not None else os.environ.pop(ENV, None)
    if pid is None:
        return False
    if _libc().prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != int(pid):  # the parent died before the request: the signal will never come
        os.kill(os.getpid(), sig)
    return True


def name_this_process(name: str) -> None:
    """This process's name as ``ps -o comm`` and ``/proc/<pid>/comm`` show it (``prctl(PR_SET_NAME)``, at
    most 15 bytes): for a helper whose command line is its parent's (a warm server forked from it)."""
    _libc().prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def alive(pid: int) -> bool:
    """A process ``pid`` runs on this host (another user's too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True


def parent_alive(parent: int) -> bool:
    """Whether ``parent`` is still this process's parent (for waits that poll)."""
    return os.getppid() == parent


@contextlib.contextmanager
def own(*pids: int):
    """The processes ``pids`` count as the cell's own while the block runs (``HELPERS``)."""
    HELPERS.update(pids)
    try:
        yield
    finally:
        HELPERS.difference_update(pids)


def wait_ready(
    ready: Callable[[], T],
    *,
    died: Callable[[], Exception | None],
    late: Callable[[], Exception],
    timeout_s: float,
    interval_s: float = 0.05,
) -> T:
    """Poll until a helper is ready: ``ready()``'s first true value. Raise ``died()``'s error as soon as it
    gives one (the helper ended first: its own words, not a wait to the end), and ``late()``'s once
    ``timeout_s`` have passed. The one wait every helper's start goes through (a mount, a server, the
    service's processes, the nodes' servers)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = ready()
        if value:
            return value
        failure = died()
        if failure is not None:
            raise failure
        if time.monotonic() > deadline:
            raise late()
        time.sleep(interval_s)


_IN_ONE_PROCESS: list[bool] = []


@contextlib.contextmanager
def in_one_process():
    """Commands run inside this block end as their ``__main__`` ends them, by SystemExit, without ending
    this process (``exit_as_python`` runs them and no more): a driver that runs several commands' modules
    one after another in one process (``campaign.subcampaign``) catches each one's end."""
    _IN_ONE_PROCESS.append(True)
    try:
        yield
    finally:
        _IN_ONE_PROCESS.pop()


def among_others() -> bool:
    """Whether this command runs among others in one process (``in_one_process``): its process began
    before it, and goes on after it."""
    return bool(_IN_ONE_PROCESS)


def exit_as_python(command: Callable[[], object]) -> None:
    """Run ``command`` and end this process as the interpreter ends it (the exit code of its SystemExit, an
    uncaught exception's traceback and 1, threads joined, ``atexit`` run, streams flushed), without tearing
    down every module: 0.9-1.1 s of CPU with TensorFlow and Keras loaded (1.4 s with PyTorch, pandas and
    matplotlib beside them), in every process that ends. Each command's ``__main__`` ends this way, cold
    or warm (``jobs.execution.warm``); a file the command left open unflushed would be lost, as the
    tool's own files are written in ``with`` blocks (``analysis.outputs``, ``jobs.jsonfiles``)."""
    import atexit
    import threading
    import traceback

    if _IN_ONE_PROCESS:  # a driver runs this command among others (in_one_process): it catches the end
        command()
        return
    code: object = 0
    interrupted = False
    try:
        command()
    except SystemExit as e:
        code = e.code
    except BaseException as e:
        traceback.print_exc()
        code, interrupted = 1, isinstance(e, KeyboardInterrupt)
    threading._shutdown()
    _skip_torch_library_teardown()
    atexit._run_exitfuncs()
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    _flush_standard_streams()
    if interrupted:  # as Python ends on an uncaught KeyboardInterrupt: by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit((code or 0) & 0xFF)


def _skip_torch_library_teardown() -> None:
    """PyTorch's operator libraries, which deregister their operators as the interpreter ends (a
    ``weakref.finalize`` of ``torch.library._del_library`` for each of the 134 it makes at import), left
    registered: memory the process gives back as it ends, 0.03 s of CPU in every process that imported
    PyTorch. Every other finalizer still runs at exit."""
    library = sys.modules.get("torch.library")
    teardown = getattr(library, "_del_library", None)
    if teardown is None:
        return
    import weakref

    for finalizer, info in list(getattr(weakref.finalize, "_registry", {}).items()):
        if info.func is teardown:
            finalizer.atexit = False


def end_without_teardown() -> None:
    """This process, when it ends by returning or by SystemExit, ends at once: its logging and standard
    streams flushed, without tearing its modules down. For a warm server (``jobs.execution.warmend``), which
    owns no file, process or folder of its own: its ``atexit`` functions registered before this one are
    not run. A process forked from it ends on its own (``exit_as_python``)."""
    import atexit

    own = os.getpid()

    def end() -> None:
        if os.getpid() != own:
            return
        import logging

        logging.shutdown()
        _flush_standard_streams()
        os._exit(0)

    atexit.register(end)


def _flush_standard_streams() -> None:
    """Standard output and error flushed, as the interpreter flushes them as it ends (a closed or broken
    stream, such as a pipe whose reader left, passed over)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
