"""The bucket as files: a dataset's prefix mounted with s3fs-fuse (Debian's ``s3fs``), as many sites
read object stores, so the runs read it with ``tf.io.read_file`` (``storage.reader=fuse``).

The mount point is a new folder below the tool's own folder on ``storage.root``; the keys reach s3fs in
its environment only (``AWSACCESSKEYID``, ``AWSSECRETACCESSKEY``), never on its command line or in a
file. s3fs runs in the foreground as a child that dies with the campaign; ending it unmounts, and the
tool unmounts (lazily) only a mount it made: s3fs's, at its own mount point. s3fs keeps no data cache
here (no ``use_cache``), and FUSE drops a file's pages at each open, so a cold run's reads reach the
server.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from jobs import owned
from jobs.storage import mounts
from jobs.storage.objectstore.client import StoreError

PROGRAM = "s3fs"
SUBDIR = "s3mounts"  # below the tool's folder on storage.root
FSTYPE = "fuse.s3fs"


def program() -> str | None:
    return shutil.which(PROGRAM)


def version() -> str:
    out = subprocess.run([PROGRAM, "--version"], capture_output=True, text=True).stdout
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
    yields the mount point, unmounted and removed at the end."""
    from jobs import lifeline

    parent = owned.under_tool_folder(root, SUBDIR, setting="storage.root")
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
    point.mkdir(mode=0o700)
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
    proc = subprocess.Popen(
        command,
        env=_env(store),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,  # s3fs in the foreground says why it ended here
        stderr=subprocess.STDOUT,
        preexec_fn=functools.partial(lifeline.bind, os.getpid(), signal.SIGTERM),  # ends, and unmounts
    )
    said: collections.deque = collections.deque(
        maxlen=20
    )  # its last lines, read as they come (never blocks it)
    reader = threading.Thread(target=lambda: said.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        _wait_mounted(proc, point, e, timeout_s, said, reader)
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
        with contextlib.suppress(OSError):
            point.rmdir()


def _wait_mounted(proc, point: Path, endpoint, timeout_s: float, said, reader) -> None:
    deadline = time.monotonic() + timeout_s
    while not _ours(point):
        if proc.poll() is not None:
            reader.join(5)
            last = [line.decode(errors="replace").strip() for line in said if line.strip()]
            raise StoreError(
                f"storage.reader=fuse: s3fs could not mount bucket {endpoint.bucket} of {endpoint.url}: "
                f"{last[-1] if last else 'it ended'}"
            )
        if time.monotonic() > deadline:
            raise StoreError(
                f"storage.reader=fuse: s3fs did not mount {endpoint.url} within {timeout_s:.0f} s"
            )
        time.sleep(0.05)


def _unmount(point: Path) -> None:
    """Unmount the s3fs mount at ``point`` (lazily: a reader still inside does not keep it)."""
    fusermount = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount"
    tool = ["umount", "-l"] if os.geteuid() == 0 else [fusermount, "-u", "-z"]
    subprocess.run([*tool, str(point)], capture_output=True)
