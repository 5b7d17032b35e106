"""The embedded Azure Blob server: Azurite (Microsoft's own emulator, npm's ``azurite``, run with the
machine's Node.js) started on loopback for one campaign, its data in the tool's own folder, and gone when
the campaign ends.

Its account is made fresh for every start (a random name and a 64-byte key), handed to it in its
environment (``AZURITE_ACCOUNTS``: never on its command line, which every user can read in /proc, nor in
a file) and kept in memory: the key reaches no record, plan or log. It binds a port the kernel picks
(``--blobPort 0``) and says which, so no port is chosen first and taken by another process in between.
Unlike SeaweedFS it runs in no mount or network namespace of its own: Node.js and Azurite's package live
outside its folder, and it asks for the account's key on every request. It writes nothing outside its
folder (``--location``; its temporary files go to the folder's ``tmp``), dies with the process that
started it (its parent-death signal), and ``stop`` ends it and removes its folder.
"""

from __future__ import annotations

import base64
import functools
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from jobs import lifeline
from jobs.storage.objectstore import server as servers
from jobs.storage.objectstore.endpoint import Credentials, Endpoint

PACKAGE = "azurite/node_modules/azurite/dist/src/blob/main.js"  # under the venv (make install puts it there)
PROGRAM = "azurite-blob"  # on PATH: npm install -g azurite
_LISTENING = re.compile(r"listens on http://127\.0\.0\.1:(\d+)")


def program() -> list[str] | None:
    """The command that runs Azurite's blob service: the project's own (``make install``), else one on
    PATH; None without one, or without Node.js."""
    node = shutil.which("node")
    own = Path(sys.prefix) / PACKAGE
    if node is not None and own.is_file():
        return [node, str(own)]
    on_path = shutil.which(PROGRAM)
    return [node, os.path.realpath(on_path)] if node is not None and on_path else None


@dataclass
class Azurite(servers.Server):
    """One running Azurite; its account's name and key are ``credentials`` (access key, secret)."""

    product = "Azurite"

    def read_output(self) -> None:
        """Keep its last lines (it logs to stdout), the key blanked out should it ever name it."""
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.output.append(line.replace(self.credentials.secret_key, "<key>"))
            self.said += 1

    def requests_served(self) -> int | None:
        return None  # Azurite counts none it can be asked for (its debug log would write every request)

    def last_line(self) -> str:
        lines = list(self.output)
        if self.said_when_ready is not None:
            lines = lines[max(0, len(lines) - (self.said - self.said_when_ready)) :]
            return next((x for x in reversed(lines) if "rror" in x), "")[:300]
        return lines[-1][:300] if lines else "no output"

    def dead(self) -> str | None:
        code = self.process.poll()
        if code is not None:
            at = self.endpoint.url or f"{self.folder} (before it listened)"
            pid = self.process.pid
            return f"the embedded Azure Blob server (Azurite) at {at} (pid {pid}) {servers.ended(code)}"
        return None

    def end(self) -> None:
        super().end()
        if self.process.stdout is not None:
            self.process.stdout.close()


def fresh_account() -> Credentials:
    """An account Azurite serves for one start: a storage account's name (3-24 lower-case letters and
    digits) and a key of 64 random bytes, base64 as Azure's are."""
    return Credentials("ioc" + secrets.token_hex(6), base64.b64encode(secrets.token_bytes(64)).decode())


def start(service, folder: str | Path, bucket: str, timeout_s: float = 60.0) -> Azurite:
    """Start Azurite with its data in ``folder`` (made, the tool's own; one a killed run left is cleared
    first, any other refused), create the container ``bucket`` through ``service`` (Azure Blob's) and
    return it once it answers. Raises ServerError naming the endpoint."""
    command = program()
    if command is None:
        raise servers.ServerError(f"storage=azure: {service.server_missing()}")
    made = servers.prepare(Path(os.path.abspath(folder)))
    try:
        srv = servers.watched(_launch(command, made, bucket))
    except OSError as e:
        servers.remove(made)
        raise servers.ServerError(f"storage=azure: Azurite could not be started: {e}") from None
    try:
        _wait_ready(srv, timeout_s)
        service.make_bucket(service.connect(srv.endpoint, srv.credentials), srv.endpoint)
        return srv
    except BaseException:
        srv.stop()
        raise


def _launch(command: list[str], folder: Path, bucket: str) -> Azurite:
    from jobs import lifeline

    account = fresh_account()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "AZURITE_", "AWS_"))}
    env.update(AZURITE_ACCOUNTS=f"{account.access_key}:{account.secret_key}", TMPDIR=str(folder / "tmp"))
    proc = subprocess.Popen(
        [
            *command,
            "--blobHost=127.0.0.1",
            "--blobPort=0",  # the kernel picks it; Azurite says which
            f"--location={folder / 'data'}",
            "--skipApiVersionCheck",  # the SDK installed may be newer than the emulator
            "--disableTelemetry",  # Azurite would otherwise report to its makers
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=folder,
        preexec_fn=functools.partial(lifeline.bind, os.getpid(), signal.SIGKILL),  # dies with us
    )
    # the port is known once it says so (``_wait_ready``): 0 until then
    return Azurite(folder, Endpoint("", bucket, service="azure"), account, proc)


def _wait_ready(srv: Azurite, timeout_s: float) -> None:
    """Until Azurite says on which port it listens."""
    port = lifeline.wait_ready(
        lambda: next((m.group(1) for m in map(_LISTENING.search, list(srv.output)) if m), None),
        died=lambda: servers.ended_while_starting(srv, "storage=azure"),
        late=lambda: servers.ServerError(f"storage=azure: Azurite did not listen within {timeout_s:.0f} s"),
        timeout_s=timeout_s,
    )
    url = f"http://127.0.0.1:{port}/{srv.credentials.access_key}"
    srv.endpoint = Endpoint(url, srv.endpoint.bucket, service="azure")
    srv.said_when_ready = srv.said
