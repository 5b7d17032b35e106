"""The bucket as files: a dataset's prefix mounted with s3fs-fuse (Debian's ``s3fs``), as many sites
read object stores, so the runs read it with ``tf.io.read_file`` (``storage.reader=fuse``).

The mount point is a new folder below the tool's own folder on ``storage.root``; the keys reach s3fs in
its environment only (``AWSACCESSKEYID``, ``AWSSECRETACCESSKEY``), never on its command line or in a
file. s3fs runs in the foreground as a child that dies with the campaign; ending it unmounts, and the
tool unmounts (lazily) only a mount it made: s3fs's, at its own mount point. The mount point goes at the
end, and ``s3mounts/`` once empty; the empty mount point of a run killed on this host goes at the next
mount. s3fs keeps no data cache here (no ``use_cache``), and FUSE drops a file's pages at each open, so
a cold run's reads reach the server.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import threading
from pathlib import Path

from jobs import owned
from jobs.storage import mounts, systools
from jobs.storage.objectstore.client import StoreError

PROGRAM = "s3fs"
SUBDIR = "s3mounts"  # below the tool's folder on storage.root
FSTYPE = "fuse.s3fs"


def program() -> str | None:
    return shutil.which(PROGRAM)


def version() -> str:
    try:
        out = systools.run([PROGRAM, "--version"]).stdout
    except (OSError, systools.NoAnswer):
        out = ""
    return out.splitlines()[0] if out else PROGRAM


def _ours(point: Path) -> bool:
    got = mounts.mount_at(str(point))
    return got is not None and got[0] == FSTYPE


def _env(store) -> dict:
    """s3fs's environment: the store's keys (the embedded server's, or the user's AWS ones), and no
    proxy for a loopback endpoint (the request and its signature stay on the node)."""
    if store.server is None:  # a user's endpoint: their keys and proxies, as s3fs finds them
        env = dict(os.environ)
        key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    else:  # the embedded server's keys only: no other AWS setting, no proxy
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("AWS") and not k.lower().endswith("_proxy")
        }
        key, secret = store.server.credentials.access_key, store.server.credentials.secret_key
    if key and secret:
        env.update(AWSACCESSKEYID=key, AWSSECRETACCESSKEY=secret)
    return env


@contextlib.contextmanager
def mounted(store, prefix: str, root: str, timeout_s: float = 30.0):
    """``<bucket>:/<prefix>`` of the open ``store`` mounted read-only under ``root``'s tool folder;
    yields the mount point, unmounted and removed at the end (``s3mounts/`` too, once empty)."""
    from jobs import lifeline

    point = _new_point(root)
    e = store.endpoint
    command = [
        PROGRAM,
        f"{e.bucket}:/{prefix}",
        str(point),
        "-f",
        "-o",
        f"url={e.url}",
        "-o",
        "use_path_request_style",
        "-o",
        f"endpoint={e.region}",
        "-o",
        "ro",
        # no retry the run does not see (s3fs's default is 5), and no wait of minutes on a dead server
        "-o",
        "retries=1",
        "-o",
        "connect_timeout=5",
        "-o",
        "readwrite_timeout=30",
    ]
    try:
        proc = subprocess.Popen(
            command,
            env=_env(store),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,  # s3fs in the foreground says why it ended here
            stderr=subprocess.STDOUT,
            preexec_fn=functools.partial(lifeline.bind, os.getpid(), signal.SIGTERM),  # ends, and unmounts
        )
    except BaseException:
        _remove_empty(point)
        _remove_empty(point.parent)
        raise
    said = _Said()  # read as it comes (never blocks it)
    reader = threading.Thread(target=said.read, args=(proc.stdout,), daemon=True)
    reader.start()
    try:
        _wait_mounted(proc, point, e, timeout_s, said, reader)
        with lifeline.own(proc.pid):  # s3fs's CPU is the run's, never another process's (other_cpu_share)
            yield point
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(5)
        proc.stdout.close()
        if _ours(point):
            _unmount(point)
        _remove_empty(point)
        _remove_empty(point.parent)  # s3mounts/ itself, when no other run's mount point is in it


def _new_point(root: str) -> Path:
    """This process's mount point, a new empty folder in ``root``'s ``s3mounts/``; the empty ones of
    killed runs on this host are removed first."""
    for _ in range(3):
        parent = owned.under_tool_folder(root, SUBDIR, setting="storage.root")
        clear_stale(parent)
        point = parent / f"{socket.gethostname()}-{os.getpid()}"
        if point.exists() or point.is_symlink():
            if _ours(point):  # a killed run's mount: ours by type and place
                _unmount(point)
            try:
                point.rmdir()  # an empty folder only, never through a link: anything else stays
            except OSError:
                raise StoreError(
                    f"storage.reader=fuse: {point} exists and is not an empty mount point of the tool's; "
                    "move it away"
                ) from None
        try:
            point.mkdir(mode=0o700)
            return point
        except FileNotFoundError:  # another run removed s3mounts/ as it emptied it: made again
            continue
    raise StoreError(f"storage.reader=fuse: {parent} kept being removed while a mount point was made in it")


def clear_stale(parent: Path) -> None:
    """Remove the mount points in ``parent`` that killed runs on this host left (``<host>-<pid>``, that
    pid gone; its s3fs ended with it): the user's own empty folders only, unmounted first when s3fs's
    mount is still there; never a link, never a folder holding anything."""
    from jobs import lifeline

    host = socket.gethostname()
    for point in parent.iterdir():
        at, _, pid = point.name.rpartition("-")
        if at != host or not pid.isdigit() or int(pid) == os.getpid() or lifeline.alive(int(pid)):
            continue
        try:
            st = os.lstat(point)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        if _ours(point):
            _unmount(point)
        _remove_empty(point)


def _remove_empty(folder: Path) -> None:
    """``folder`` removed if it is an empty folder (``rmdir``: never a link, never one holding anything)."""
    with contextlib.suppress(OSError):
        folder.rmdir()


# s3fs's log lines: ``2026-11-26T12:14:05.365Z [INF] curl.cpp:...``; its own and FUSE's errors are not
_LOG = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z \[(?P<level>[A-Z]+)\] ")


class _Said:
    """What s3fs printed: its last lines, and its last error apart (FUSE's ``fuse: failed to open
    /dev/fuse: Permission denied`` comes before the INFO lines s3fs flushes as it ends)."""

    def __init__(self) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=20)
        self.error: str | None = None

    def read(self, stream) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").strip()
            if not line:
                continue
            self.lines.append(line)
            log = _LOG.match(line)
            if log is None or log["level"] in ("CRT", "ERR"):
                self.error = line if log is None else line[log.end() :]

    def why(self) -> str:
        """Its last error, else its last line."""
        return self.error or (self.lines[-1] if self.lines else "it ended")


def _wait_mounted(proc, point: Path, endpoint, timeout_s: float, said: _Said, reader) -> None:
    from jobs import lifeline

    def died() -> Exception | None:
        if proc.poll() is None:
            return None
        reader.join(5)
        return StoreError(
            f"storage.reader=fuse: s3fs could not mount bucket {endpoint.bucket} of {endpoint.url}: "
            f"{said.why()}"
        )

    lifeline.wait_ready(
        lambda: _ours(point),
        died=died,
        late=lambda: StoreError(
            f"storage.reader=fuse: s3fs did not mount {endpoint.url} within {timeout_s:.0f} s"
        ),
        timeout_s=timeout_s,
    )


def _unmount(point: Path) -> None:
    """Unmount the s3fs mount at ``point`` (lazily: a reader still inside does not keep it)."""
    fusermount = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount"
    tool = ["umount", "-l"] if os.geteuid() == 0 else [fusermount, "-u", "-z"]
    systools.quietly([*tool, str(point)])
