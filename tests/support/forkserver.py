"""A warm interpreter that starts the project's commands by ``fork``: ``python -m <module> <args>`` as the
tests run it, without paying Python's start and the heavy libraries' imports (TensorFlow and Keras,
PyTorch, pandas, matplotlib, Hydra: about 6 s of a 2-core machine's time) once per command.

Each command still runs in a process of its own, from a fresh copy of this interpreter that has imported
the project's command modules too (``COMMANDS``: 0.045 s of CPU less per command), but has run none of
them: the kinds of storage, frameworks and workloads from outside the tool that a test puts on a command's
PYTHONPATH (``iocampaign_backends``, ...) are found on first use, in the command's process, with its own
``sys.path`` (``jobs.storage.backends``, ``jobs.frameworks``, ``jobs.workloads``): its module run as
``__main__`` (``runpy``), in its folder, with its own environment, arguments and standard
streams, and ended as an interpreter ends (``atexit``, threads joined, streams flushed). What differs
from a cold ``python -m``: the preloaded libraries are already in ``sys.modules`` (TensorFlow's start-up
lines are therefore not printed again: the first cell's ``tensorflow_startup.log`` gets the lines of this
server's import, as a warm child's of the tool's does; tests of a cold start use ``fresh=True``), and the
process's parent is a shepherd forked from here rather than the test.

Run as ``python forkserver.py FD [LISTENER]``: FD is one end of a ``SOCK_SEQPACKET`` socket pair, and
LISTENER a listening socket that the suite's other test processes connect to (``Shared``). Each request on
either is one message (JSON: module, args, cwd, env, and whether the command leads a session of its own) with
four descriptors: stdin, stdout and stderr for the command, and one end of a socket pair on which the
shepherd answers ``{"pid": N}`` once the command runs, then ``{"returncode": R}`` when it ends (negative:
the signal that ended it). ``Client.run`` waits for the command, as ``subprocess.run``; ``Client.start``
leaves it running (``Started``, as ``subprocess.Popen``), for a test that signals or kills it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import sys

# what every ``python -m campaign`` imports, and the other commands' parts (not a module run as ``__main__``
# itself: ``runpy`` warns of one imported before): none finds a plug-in at its import
# (tests/campaign/test_layout.py holds that), and none reads the environment there
COMMANDS = (
    "campaign.choices",
    "campaign.helptext",
    "campaign.validate",
    "campaign.sweep",
    "campaign.cell",
    "campaign.launch",
    "campaign.capacity",
    "jobs.runner",
    "analysis.build",
    "analysis.report.page",
    "hydra_plugins.iocampaign_sweeper.campaign_sweeper",
)


def _preload() -> None:
    import matplotlib

    matplotlib.use("Agg")  # as the project's figures choose it, before pyplot
    import hydra  # noqa: F401
    import matplotlib.pyplot  # noqa: F401
    import omegaconf  # noqa: F401
    import pandas  # noqa: F401
    import submitit  # noqa: F401

    from jobs.execution import tfstart

    # TensorFlow and Keras as a cell that builds a Keras model imports them (1 s of CPU less for each
    # command that runs one; one that builds none finds Keras there and never uses it), as a warm server
    # preloads them: without looking for devices, their start-up lines kept for the first cell's log
    # (``tfstart.preload``), so that a command's process is what a warm child of the tool's is, and takes
    # a zygote as one does (``jobs.execution.warm.zygote``)
    tfstart.preload(keras=True)
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    import importlib

    for module in COMMANDS:
        importlib.import_module(module)
    tfstart.out_of_the_collectors_way()  # as a cell's process does after its imports: the commands' children


class _Run(Exception):
    """Raised in the command's process to leave the server's loop before running it."""

    def __init__(self, request: dict):
        self.request = request


def _serve(life: socket.socket, listener: socket.socket | None) -> None:
    """Fork a shepherd for each request, on ``life`` (the starter's own socket) or on a connection the
    ``listener`` accepted (another test process's); end when ``life`` closes."""
    import selectors

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # shepherds are reaped by the kernel
    sockets = selectors.DefaultSelector()
    sockets.register(life, selectors.EVENT_READ)
    if listener is not None:
        sockets.register(listener, selectors.EVENT_READ)
    while True:
        for key, _ in sockets.select():
            sock = key.fileobj
            if sock is listener:
                conn, _ = listener.accept()
                conn.sendall(b"ready")
                sockets.register(conn, selectors.EVENT_READ)
                continue
            try:
                data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
            except OSError:
                data, fds = b"", []
            if not data:  # the starter ended (then so does the server), or a test process that connected
                if sock is life:
                    return
                sockets.unregister(sock)
                sock.close()
                continue
            if os.fork() == 0:  # the shepherd
                for other in list(sockets.get_map().values()):
                    other.fileobj.close()
                sockets.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _shepherd(json.loads(data), fds)  # returns only in the command's process
                return
            for fd in fds:
                os.close(fd)


def _shepherd(request: dict, fds: list[int]) -> None:
    stdin, stdout, stderr, answer_fd = fds
    answer = socket.socket(fileno=answer_fd)
    pid = os.fork()
    if pid == 0:
        answer.close()
        if request.get("session"):  # start_new_session=True: the leader of a session of its own
            os.setsid()
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
            os.close(fd)
        raise _Run(request)
    try:
        for fd in (stdin, stdout, stderr):
            os.close(fd)
        answer.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        answer.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
    finally:  # the test may have gone (a timeout): the shepherd ends all the same
        os._exit(0)


def _run(request: dict) -> None:
    import runpy

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # as ``python -m`` puts its folder first
    # the command's PYTHONPATH in the place of this server's (the checkout, with the folders the client
    # found to shadow nothing imported here: ``commands.warm_runs``), in its order, as Python's start puts it
    at = sys.path.index(_OWN_PATH)
    given = request["env"].get("PYTHONPATH", "").split(os.pathsep)
    sys.path[at : at + 1] = [os.path.abspath(p) for p in given if p]
    sys.argv = ["-m", *request["args"]]
    runpy._run_module_as_main(request["module"])  # what ``python -m`` calls


_OWN_PATH = os.path.abspath(os.environ.get("PYTHONPATH", "."))  # the checkout (commands.python_env)


def main() -> None:
    life = socket.socket(fileno=int(sys.argv[1]))
    listener = socket.socket(fileno=int(sys.argv[2])) if len(sys.argv) > 2 else None
    _preload()
    try:
        life.sendall(b"ready")
    except BrokenPipeError:  # the session ended while this imported (a short run): nobody to serve
        return
    try:
        _serve(life, listener)
    except _Run as run:  # sys.stdin, stdout and stderr are on descriptors 0-2: now the command's
        _exit(_run, run.request)


def _exit(command, request: dict) -> None:
    """Run ``command(request)`` and end this process as the interpreter ends it (the product's own warm
    start does the same: ``jobs.lifeline.exit_as_python``)."""
    from jobs.lifeline import exit_as_python

    exit_as_python(lambda: command(request))


if __name__ == "__main__":
    from jobs.lifeline import exit_as_python

    exit_as_python(main)  # at the end of its tests' process too: without tearing its libraries down


SHARED = "IOCAMPAIGN_TESTS_FORKSERVER"  # the socket of the server the suite's workers share (``Shared``)


class Shared:
    """One server for every worker of the suite (pytest-xdist's): started by the controller before the
    workers, which connect to it by the socket named in their environment (``SHARED``), instead of each
    importing the heavy libraries into a server of its own (about 5 s of CPU each). It ends when the
    controller closes its end (``stop``), or ends itself."""

    def __init__(self, env: dict[str, str]):
        import subprocess
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="iocampaign-forkserver-")  # 0700: the tests' user alone
        self.path = os.path.join(self.folder, "socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(self.path)  # listening before any worker starts: none finds it missing
        listener.listen(16)
        self.life, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(theirs.fileno()), str(listener.fileno())],
            pass_fds=(theirs.fileno(), listener.fileno()),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        theirs.close()
        listener.close()

    def stop(self) -> None:
        import shutil
        import subprocess

        self.life.close()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


class Client:
    """The tests' side: the suite's shared server (``Shared``) where the environment names one, else one
    server for this test process, started on first use (about 6 s) and ended with it."""

    def __init__(self, env: dict[str, str]):
        import subprocess
        import threading

        shared = os.environ.get(SHARED)
        self.process = None
        if shared:
            control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            control.connect(shared)
        else:
            control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self.process = subprocess.Popen(
                [sys.executable, __file__, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
            theirs.close()
        self.control = control
        self.lock = threading.Lock()
        if control.recv(16) != b"ready":
            ended = f"exit {self.process.wait()}" if self.process else f"the suite's, at {shared}"
            raise RuntimeError(f"the fork server ended while importing ({ended})")

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def run(self, module: str, args: list[str], cwd, env: dict[str, str], timeout: float):
        """As ``subprocess.run([python, "-m", module, *args], capture_output=True, text=True, ...)``."""
        import subprocess
        import threading

        argv = [sys.executable, "-m", module, *args]
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        answer, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        null = os.open(os.devnull, os.O_RDONLY)
        request = {"module": module, "args": list(args), "cwd": str(cwd or os.getcwd()), "env": dict(env)}
        try:
            with self.lock:
                socket.send_fds(
                    self.control, [json.dumps(request).encode()], [null, out_w, err_w, theirs.fileno()]
                )
        finally:
            for fd in (null, out_w, err_w):
                os.close(fd)
            theirs.close()
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}

        def drain(fd: int) -> None:
            with open(fd, "rb", buffering=0) as f:
                while block := f.read(65536):
                    chunks[fd].append(block)

        readers = [threading.Thread(target=drain, args=(fd,), daemon=True) for fd in (out_r, err_r)]
        for t in readers:
            t.start()
        lines = answer.makefile("rb")
        answer.settimeout(timeout)
        pid = json.loads(lines.readline())["pid"]
        try:
            status = lines.readline()
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            for t in readers:
                t.join(5)
            out, err = b"".join(chunks[out_r]), b"".join(chunks[err_r])
            raise subprocess.TimeoutExpired(argv, timeout, out, err) from None
        finally:
            answer.close()
        for t in readers:  # what the command started may hold its output open: bounded, as subprocess.run
            t.join(timeout)
        if any(t.is_alive() for t in readers):
            out, err = b"".join(chunks[out_r]), b"".join(chunks[err_r])
            raise subprocess.TimeoutExpired(argv, timeout, out, err)

        def text(fd: int) -> str:
            data = b"".join(chunks[fd]).decode(errors="strict")
            return data.replace("\r\n", "\n").replace("\r", "\n")

        return subprocess.CompletedProcess(argv, json.loads(status)["returncode"], text(out_r), text(err_r))

    def start(self, module: str, args: list[str], cwd, env: dict[str, str], **popen) -> Started:
        """As ``subprocess.Popen([python, "-m", module, *args], ...)``: the command left running.
        ``popen``: ``stdin``, ``stdout`` and ``stderr`` (None, DEVNULL, PIPE, STDOUT for stderr, a file),
        ``start_new_session``, ``text``."""
        import subprocess

        text = popen.pop("text", False) or popen.pop("universal_newlines", False)
        session = popen.pop("start_new_session", False)
        streams = {name: popen.pop(name, None) for name in ("stdin", "stdout", "stderr")}
        if popen:
            raise TypeError(f"the warm start takes no {', '.join(popen)}")
        theirs_fds, ours = [], {}
        for n, name in enumerate(("stdin", "stdout", "stderr")):
            given = streams[name]
            if given is None:
                fd = os.dup(n)
            elif given == subprocess.DEVNULL:
                fd = os.open(os.devnull, os.O_RDWR)
            elif given == subprocess.PIPE:
                r, w = os.pipe()
                fd, mine = (r, w) if n == 0 else (w, r)
                ours[name] = open(mine, ("w" if n == 0 else "r") + ("" if text else "b"))  # noqa: SIM115 - the caller's
            elif given == subprocess.STDOUT:
                fd = os.dup(theirs_fds[1])
            else:
                fd = os.dup(given if isinstance(given, int) else given.fileno())
            theirs_fds.append(fd)
        answer, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        request = {"module": module, "args": list(args), "cwd": str(cwd or os.getcwd()), "env": dict(env)}
        request["session"] = session
        try:
            with self.lock:
                socket.send_fds(self.control, [json.dumps(request).encode()], [*theirs_fds, theirs.fileno()])
        finally:
            for fd in theirs_fds:
                os.close(fd)
            theirs.close()
        return Started([sys.executable, "-m", module, *args], answer, ours)


class Started:
    """A command started warm and left running, as ``subprocess.Popen`` shows it: ``pid``, ``stdin``,
    ``stdout``, ``stderr``, ``returncode``, ``poll``, ``wait``, ``communicate``, ``send_signal``,
    ``terminate``, ``kill``."""

    def __init__(self, args: list[str], answer: socket.socket, streams: dict):
        import threading

        self.args, self.returncode = args, None
        self.stdin, self.stdout, self.stderr = (streams.get(k) for k in ("stdin", "stdout", "stderr"))
        self._lines = answer.makefile("rb")
        self._answer = answer
        self.pid = json.loads(self._lines.readline())["pid"]
        self._ended = threading.Event()
        self._read: dict[str, list] = {}  # what communicate's readers took from stdout and stderr
        self._readers: list[threading.Thread] = []
        threading.Thread(target=self._until_it_ends, daemon=True).start()

    def _until_it_ends(self) -> None:
        line = self._lines.readline()  # the shepherd's answer once the command has ended
        self.returncode = json.loads(line)["returncode"] if line else -signal.SIGKILL
        self._answer.close()
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode if self._ended.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, input=None, timeout: float | None = None):
        """As ``Popen.communicate``: the output read to its end and the command waited for, both within
        ``timeout`` (TimeoutExpired after it; the command left running, a later call goes on reading)."""
        import subprocess
        import threading
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        if self.stdin is not None and not self.stdin.closed:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        if not self._readers:
            for name in ("stdout", "stderr"):
                stream = getattr(self, name)
                if stream is not None:
                    into = self._read[name] = []
                    reader = threading.Thread(target=self._drain, args=(stream, into), daemon=True)
                    reader.start()
                    self._readers.append(reader)
        for reader in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if any(reader.is_alive() for reader in self._readers):
            raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        out, err = (self._joined(name) for name in ("stdout", "stderr"))
        return out, err

    @staticmethod
    def _drain(stream, into: list) -> None:
        while block := stream.read(65536):
            into.append(block)

    def _joined(self, name: str):
        if name not in self._read:
            return None
        empty = "" if isinstance(getattr(self, name), io.TextIOBase) else b""
        return empty.join(self._read[name])

    def send_signal(self, sig: int) -> None:
        """As ``Popen.send_signal``: nothing once the command is known to have ended, and nothing when it ends
        between that check and the signal (its shepherd reaped it before telling us: bpo-40550)."""
        if not self._ended.is_set():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()
