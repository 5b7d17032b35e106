"""The embedded server's only way in from the host: a relay in the server's own network namespace.

The server (SeaweedFS) runs in a network namespace of its own (``unshare --net``), where all its ports
(master, volume, filer, their gRPC ports, S3, IAM, metrics) listen on a loopback no other process of
the host can reach: without keys, those ports would let any local user read and write every object.
The tool binds two listening sockets on the host's loopback before the server starts (port 0: the
kernel picks, so no other user can take them first) and hands them over: the S3 endpoint, which asks
for the keys, and the metrics endpoint, which the tool reads. This process, the first of the
namespace, accepts on them and forwards each connection to the matching port inside, both ways, with
``splice`` through a pipe (the bytes never enter Python); the clients that need a TCP endpoint
(s3torchconnector's CRT client, s3fs, TensorFlow's reader) reach the server as before.

It forks the server and waits for it: the server dies with the relay (its parent-death signal), and
the relay ends when the server does, with the server's own exit status or signal, so whoever started
the relay sees how the server ended. Run from ``confine.py`` with the standard library alone (the
server's root holds no Python once it is confined: everything is imported before).
"""

import ctypes
import errno
import fcntl
import os
import resource
import signal
import socket
import struct
import sys
import threading
from typing import NoReturn

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
PR_SET_PDEATHSIG = 1
PIPE_BYTES = 256 * 1024  # each direction's pipe: an image or a part of a checkpoint in a few splices
STACK_BYTES = 256 * 1024  # a forwarding thread only loops on splice
INSIDE = "127.0.0.1"


def loopback_up() -> None:
    """Bring the namespace's loopback up (a new network namespace starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


class _Connection:
    """One client's connection and its twin inside; closed when both directions have ended."""

    def __init__(self, outer: socket.socket, inner: socket.socket) -> None:
        self.outer, self.inner = outer, inner
        self.left = 2
        self.lock = threading.Lock()

    def pump(self, src: socket.socket, dst: socket.socket) -> None:
        """Forward ``src`` to ``dst`` until ``src`` ends, then half-close ``dst`` (the other direction
        goes on); a reset on either side ends both directions."""
        r, w = os.pipe()
        try:
            try:
                fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
            except OSError:
                pass  # the user's pipe budget is spent: the default size still works
            while True:
                n = os.splice(src.fileno(), w, PIPE_BYTES, flags=os.SPLICE_F_MOVE)
                if n == 0:
                    break
                while n:
                    n -= os.splice(r, dst.fileno(), n, flags=os.SPLICE_F_MOVE)
            _shutdown(dst, socket.SHUT_WR)
        except OSError:
            _shutdown(self.outer, socket.SHUT_RDWR)  # wakes the other direction, blocked in its splice
            _shutdown(self.inner, socket.SHUT_RDWR)
        finally:
            os.close(r)
            os.close(w)
            self.done()

    def done(self) -> None:
        with self.lock:
            self.left -= 1
            last = self.left == 0
        if last:
            self.outer.close()
            self.inner.close()


def _shutdown(s: socket.socket, how: int) -> None:
    try:
        s.shutdown(how)
    except OSError:
        pass  # already closed by its peer


def _serve(listener: socket.socket, port: int) -> None:
    """Accept on ``listener`` (on the host) for ever, each connection forwarded to ``port`` inside."""
    while True:
        try:
            outer, _ = listener.accept()
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                threading.Event().wait(0.05)  # out of descriptors for a moment: the backlog waits
            elif e.errno != errno.ECONNABORTED:
                return  # the socket itself failed: its clients are refused, the server goes on
            continue
        try:
            threading.Thread(target=_forward, args=(outer, port), daemon=True).start()
        except RuntimeError:  # no thread to be had: this client is closed, the next may fare better
            outer.close()


def _forward(outer: socket.socket, port: int) -> None:
    inner = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        inner.connect((INSIDE, port))
    except OSError:  # the server is not listening yet (starting) or any more: the client sees a close
        inner.close()
        outer.close()
        return
    for s in (outer, inner):  # the relay adds no delay of its own to a small request or answer
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = _Connection(outer, inner)
    try:
        threading.Thread(target=conn.pump, args=(inner, outer), daemon=True).start()
    except RuntimeError:
        conn.done()  # the other direction's share: this one closes both when it ends
        _shutdown(outer, socket.SHUT_RDWR)
    conn.pump(outer, inner)


def _exec_bound(parent: int, listeners: list[socket.socket], program: str, argv: list[str]) -> None:
    """In the forked child: die with the relay, hold none of its sockets, become the server."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:
            os._exit(1)  # the relay is already gone (or the kernel refused): no server without it
        for s in listeners:
            s.close()
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # Python ignores it; the server gets the default
        os.execv(program, argv)
    except BaseException as e:  # noqa: BLE001 - nothing of the relay may go on in the child
        os.write(2, f"relay: could not start the server: {e}\n".encode())
    os._exit(1)


def run(routes: list[tuple[socket.socket, int]], program: str, argv: list[str]) -> NoReturn:
    """Start ``program`` (``argv``) as a child bound to this process, forward each listener of
    ``routes`` to its port inside, and end as the child ended: with its exit status, or killed by its
    signal. It never returns: with its forwarding threads alive, an interpreter's exit would abort in the
    confined root, which holds no ``libgcc_s`` for their ``pthread_exit`` (the server's last words would
    be lost behind "libgcc_s.so.1 must be installed for pthread_exit to work")."""
    parent = os.getpid()
    listeners = [s for s, _ in routes]
    child = os.fork()
    if child == 0:
        _exec_bound(parent, listeners, program, argv)
    threading.stack_size(STACK_BYTES)
    for listener, port in routes:
        threading.Thread(target=_serve, args=(listener, port), daemon=True).start()
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the server's core is not the relay's
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # their action cannot be set, nor need be
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os.kill(os.getpid(), signal.SIGKILL)  # a signal whose default is not to end the process
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(os.waitstatus_to_exitcode(status))
