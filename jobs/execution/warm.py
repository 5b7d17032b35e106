"""Processes started warm: ``python -m <module> <args>`` forked from a server that imported the heavy
libraries once (multiprocessing's ``forkserver`` with its preload), instead of a fresh interpreter that
imports them again. TensorFlow with Keras costs 4-5 s of CPU per process, Hydra, pandas and submitit
about 1 s more; a sub-campaign (a grid of the paper study, a round of the capacity search) pays it once
per parent instead of once per grid.

Where the process that starts children already holds what they need, because it was started warm itself
(a grid of the paper study, a round of the capacity search) or forked from a warm interpreter (the tests'),
its server is a copy of it taken as its command began (``zygote``), before the command ran or held
anything: no interpreter imports it all again. Otherwise the server is a fresh interpreter that imports
only what ``start`` was asked to preload, before any cell runs: TensorFlow without looking for its devices
(``tfstart.preload``: CUDA is set up by each child's own first device query, as a process forked after that
could not use it; a zygote is taken only where that query has not been made). Each child then runs its
module as ``python -m`` would: in the parent's folder, with the environment given, ``atexit`` run, threads
joined, its exit status (or the signal that ended it) its own, its standard output and error and its
cgroups (an emulated tier's throttle) the parent's at the time of the call. What differs from a cold
start: its parent is the server, which ends when the process that started it ends (its pipe closes), and
its standard input is ``/dev/null``. A child that binds its life to its parent (``jobs.lifeline``) is bound
to the server.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from multiprocessing import process as _process
from pathlib import Path

TENSORFLOW = "jobs.execution.tfpreload"  # in a preload list: TensorFlow and Keras, quietly (tfstart.preload)
TENSORFLOW_DATA = "jobs.execution.tfdatapreload"  # TensorFlow alone: Keras imported where a cell needs it
COMMON = ("hydra", "omegaconf", "pandas", "submitit", "campaign.choices", "jobs.runner")  # every campaign's
# imported last by the server: it ends without tearing its modules down (lifeline.end_without_teardown)
SERVER_ENDS = "jobs.execution.warmend"


class Started:
    """A warm child, as ``subprocess.Popen`` shows one: ``pid``, ``returncode``, ``poll``, ``wait``,
    ``send_signal``, ``terminate``, ``kill``."""

    def __init__(self, process):
        self._process = process
        self.pid = process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(f"{self._process.name}", timeout)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()


def start(
    module: str, args: Sequence[str], env: dict, preload: Sequence[str] = COMMON, *, stdout: int = 1
) -> Started:
    """``python -m module *args`` with ``env``, in this process's folder, forked from this process's warm
    server (its ``zygote`` where that holds all of ``preload``; else started on the first call, with
    ``preload``; a later call's list is not loaded again); its standard output on this process's descriptor
    ``stdout``, its standard error on this process's."""
    import multiprocessing as mp
    from multiprocessing import forkserver

    context = mp.get_context("forkserver")
    if not _Zygote.serves(preload):
        _Zygote.stop()  # one server per process: a fresh one that imports what the zygote lacks
        # imported by the server at its start, in order
        context.set_forkserver_preload([__name__, *preload, SERVER_ENDS])
        _server_folder()
    forkserver.ensure_running()  # nothing to do once it runs
    process = context.Process(
        target=_run,
        args=(module, list(args), os.getcwd(), dict(env), _Fd(stdout), _Fd(2), cgroups()),
        name=f"python -m {module}",
    )
    process.start()
    return Started(process)


# what a process must hold for a zygote to be worth taking: every command's heavy libraries (a cold
# ``python -m campaign`` has not imported them all as it begins: it starts a fresh server when it needs one)
ZYGOTE_NEEDS = ("hydra", "omegaconf", "pandas", "submitit")
# what each entry of a preload list stands for in ``sys.modules``
_PRELOADED_AS = {TENSORFLOW: ("tensorflow", "keras"), TENSORFLOW_DATA: ("tensorflow",)}


class _Zygote:
    """This process's zygote: a fork of it taken as its command began (``zygote``), which runs
    multiprocessing's forkserver loop as the server ``start`` forks children from; the modules it holds."""

    pid: int | None = None
    holds: frozenset[str] = frozenset()

    @classmethod
    def serves(cls, preload: Sequence[str]) -> bool:
        if cls.pid is None:
            return False
        wanted = (name for entry in preload for name in _PRELOADED_AS.get(entry, (entry,)))
        return all(name in cls.holds for name in wanted)

    @classmethod
    def stop(cls) -> None:
        """End the zygote (its pipe closed: it leaves its loop) and forget it as the server."""
        from multiprocessing import forkserver

        if cls.pid is None:
            return
        server = forkserver._forkserver
        if server._forkserver_pid == cls.pid:
            os.close(server._forkserver_alive_fd)
            os.waitpid(cls.pid, 0)
            server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None
        cls.pid, cls.holds = None, frozenset()


def zygote() -> bool:
    """At a command's start: where this process already holds what its warm children would import
    (``ZYGOTE_NEEDS``, TensorFlow, if imported, without its devices looked for), a fork of it, taken now,
    before the command runs, becomes its warm server: multiprocessing's forkserver loop in that copy, as in
    a fresh server after its preload (0.5-1.4 s of CPU less per process that starts children). Taken before
    the command has registered, opened, locked or started anything that a child would inherit, and ended
    with this process (its pipe), as a fresh server is; its process is named ``iocampaign-warm`` (``ps -o
    comm``). Returns whether it was taken; a process that has one already, runs threads, lacks those modules
    or runs this command among others (``lifeline.among_others``) takes none (``start`` then starts a fresh
    server)."""
    import threading
    from multiprocessing import forkserver

    from jobs import lifeline
    from jobs.execution import tfstart

    if _Zygote.pid is not None or forkserver._forkserver._forkserver_pid is not None:
        return False
    if lifeline.among_others() or sys.stdout is not sys.__stdout__ or sys.stderr is not sys.__stderr__:
        return False  # a command run among others by a driver (its streams the driver's): not its start
    if threading.active_count() > 1 or not tfstart.devices_unseen():
        return False
    if not all(name in sys.modules for name in ZYGOTE_NEEDS):
        return False
    _server_folder()
    _Zygote.pid, _Zygote.holds = _fork_server(), frozenset(sys.modules)
    return True


def _fork_server() -> int:
    """Fork this process into a forkserver (multiprocessing's own loop, nothing preloaded: it holds it
    all); its listening socket in this process's server folder, as ``ForkServer.ensure_running`` makes it.
    Returns its pid, registered as this process's forkserver."""
    import socket
    from multiprocessing import connection, forkserver

    server = forkserver._forkserver
    with socket.socket(socket.AF_UNIX) as listener:
        address = connection.arbitrary_address("AF_UNIX")
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the zygote: serves until every process that holds its pipe's other end has ended
            os.close(alive_w)
            from jobs import lifeline

            lifeline.name_this_process("iocampaign-warm")  # its command line is its parent's
            try:
                forkserver.main(listener.fileno(), alive_r, [])
            finally:
                os._exit(0)
        os.close(alive_r)
    server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = address, alive_w, pid
    return pid


SERVER_FOLDER = "iocampaign-warm-"  # + <pid namespace, hex>-<pid>-<random>: where a server keeps its socket
# the rest of the socket's path: mkdtemp's and mktemp's random parts
SOCKET_NAME = "xxxxxxxx/listener-xxxxxxxx"
SOCKET_PATH_MAX = 107
PID_MAX = 4_194_304  # the most /proc/sys/kernel/pid_max allows (2^22)


def _server_folder() -> None:
    """The folder multiprocessing keeps its server's socket in, named as the tool's own: a fresh 0700
    ``iocampaign-warm-<pid namespace>-<pid>-*`` in the temporary folder, removed at this process's end. A
    process killed with SIGKILL leaves its folder behind; the next start removes those whose process is
    gone (``sweep``). Where this process's multiprocessing already has a folder, that one is kept."""
    import shutil
    import tempfile
    from multiprocessing import process, util

    config = process.current_process()._config
    if config.get("tempdir"):
        return  # kept (every start after this process's first)
    tmp, prefix = tempfile.gettempdir(), f"{SERVER_FOLDER}{_pid_namespace():x}-{os.getpid()}-"
    if len(os.path.join(tmp, prefix, SOCKET_NAME)) > SOCKET_PATH_MAX:
        return  # multiprocessing's own shorter name (a socket's path is at most 107 bytes)
    sweep(tmp)
    folder = tempfile.mkdtemp(prefix=prefix, dir=tmp)
    config["tempdir"] = folder  # where multiprocessing's own ``util.get_temp_dir`` would have made one
    util.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=-100)


def _pid_namespace() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def sweep(tmp: str) -> list[str]:
    """Remove the server folders in ``tmp`` left by processes of this user that are gone (killed with
    SIGKILL): only this user's own folders of the tool's name, made in this pid namespace, and in them
    only sockets; a folder that holds anything else stays. Returns the folders removed."""
    import re

    from jobs import lifeline

    pattern = re.compile(rf"{re.escape(SERVER_FOLDER)}{_pid_namespace():x}-(\d+)-\w+")
    removed = []
    with os.scandir(tmp) as entries:
        for entry in entries:
            m = pattern.fullmatch(entry.name)
            if m is None or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                owner = entry.stat(follow_symlinks=False).st_uid
            except FileNotFoundError:
                continue  # removed since it was listed: its process ended (two commands starting at once)
            if owner != os.geteuid() or not 0 < int(m[1]) <= PID_MAX:
                continue  # another user's, or no pid of this machine's (a name anyone could choose)
            if not lifeline.alive(int(m[1])) and _remove_sockets(entry.path):
                removed.append(entry.path)
    return removed


def _remove_sockets(folder: str) -> bool:
    """Unlink the sockets in ``folder`` (opened without following a link) and the folder, if it holds
    nothing but sockets."""
    import stat

    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        names = os.listdir(fd)
        if not all(stat.S_ISSOCK(os.stat(n, dir_fd=fd, follow_symlinks=False).st_mode) for n in names):
            return False
        for name in names:
            os.unlink(name, dir_fd=fd)
        os.rmdir(folder)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def for_cell(workload, cfg) -> tuple[str, ...]:
    """What a process that runs a cell's runs imports (a local task): TensorFlow where the cell runs in it
    (with Keras where its workload builds a Keras model), else what its framework declares safe to import
    before a fork (``Framework.warm``)."""
    from jobs import frameworks
    from jobs.execution import tfstart

    if tfstart.needed(workload, cfg):
        return (*COMMON, TENSORFLOW if workload.uses_keras else TENSORFLOW_DATA)
    return (*COMMON, *frameworks.of(cfg).warm)


# multiprocessing's record of the main process, as a fresh interpreter has it: in the server, its own, kept
# when the server imports this module first (``start``'s preload list); its children take it back in place of
# their own, which names them after their Process (an import that fails in the server is left to the child,
# which then fails as a cold start would: multiprocessing's forkserver passes over an ImportError)
_SERVERS_OWN = _process.current_process()


def cgroups(pid: int | str = "self") -> dict[str, str]:
    """The cgroups a process is in: {a hierarchy's controllers ("" for cgroup v2's): the group's path}."""
    out = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        out[controllers] = path
    return out


def join(groups: dict[str, str]) -> None:
    """Move this process into ``groups`` (``cgroups``' answer for the process that asked for it) where it is
    elsewhere: a cell's runs put themselves under an emulated tier's throttle, and a child started by
    ``fork`` is in its parent's groups; the server was started earlier, or for another cell."""
    mine = cgroups()
    for controllers, path in groups.items():
        if mine.get(controllers) == path:
            continue
        mount = _mount_of(controllers)
        if mount is None:
            raise OSError(f"no mount of the cgroup hierarchy {controllers or 'v2'!r} to join {path} in")
        with open(os.path.join(mount, path.lstrip("/"), "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))


def _mount_of(controllers: str) -> str | None:
    """Where the cgroup hierarchy of ``controllers`` ("" for cgroup v2's) is mounted."""
    from jobs.storage import mounts

    wanted = set(controllers.split(","))
    for e in mounts.table():
        if controllers and e.fs_type == "cgroup" and wanted <= set(e.options.split(",")):
            return e.point
        if not controllers and e.fs_type == "cgroup2":
            return e.point
    return None


class _Fd:
    """One of this process's file descriptors, handed to the child as it is now (a cell's runs may have put
    a log file on standard error, ``jobs.execution.nativelog``); the child gets it as a number."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):  # while multiprocessing pickles the child's arguments: its own fd passing
        from multiprocessing import reduction

        return (_detach, (reduction.DupFd(self.fd),))


def _detach(dup) -> int:
    return dup.detach()


def _run(module: str, args: list[str], cwd: str, env: dict, stdout: int, stderr: int, groups: dict) -> None:
    """In the child: ``python -m module *args`` with the parent's standard output and error and its cgroups
    as they were when it asked, then this process ends as the interpreter would end it."""
    import runpy

    from jobs import lifeline
    from jobs.execution import tfstart

    _as_a_fresh_interpreter()
    tfstart.out_of_the_collectors_way()  # what the server imported, never walked again here
    join(groups)
    for stream, fd, target in ((sys.stdout, stdout, 1), (sys.stderr, stderr, 2)):
        stream.flush()
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    if lifeline.ENV in env:  # bound to the server, which ends with the process that asked for this one
        os.environ[lifeline.ENV] = str(os.getppid())
    sys.path[0] = cwd  # as ``python -m`` puts its folder first
    sys.argv = ["-m", *args]
    lifeline.exit_as_python(lambda: runpy._run_module_as_main(module))  # what ``python -m`` calls


def _as_a_fresh_interpreter() -> None:
    """Undo what multiprocessing set up in its child, so that the module runs as in a fresh interpreter:
    the pipe end whose holders keep the server alive (the server then ends with the process that started
    it; a child that starts processes warm starts a server of its own, with what it preloads), the default
    start method (the server's ``forkserver``: a DataLoader's workers would no longer be this process's
    children), and this process's identity (the main process, without a parent: some libraries ask)."""
    import multiprocessing
    from multiprocessing import forkserver, process

    server = forkserver._forkserver
    if server._forkserver_alive_fd is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None
    multiprocessing.set_start_method(None, force=True)
    if _SERVERS_OWN is not None:
        process._current_process = _SERVERS_OWN
        _SERVERS_OWN.name = "MainProcess"  # multiprocessing named it after the child's Process meanwhile
    process._parent_process = None
