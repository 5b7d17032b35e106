"""The embedded object store spread over a cell's Slurm nodes (``storage=s3 platform=slurm
platform.nodes>1``): a volume server and an S3 gateway on every node of the job, the master and the
filer (the store's namespace) beside the cell's controller. Each node's tasks GET through their own
node's gateway, and the objects lie in the volumes of every node, so a run's reads are served by all
the nodes' disks at once: parallel servers, the mechanism of the paper's Lustre claim, on an object
store.

The nodes' servers are one job step of the cell's job (``srun --overlap``, one task per node), each task
running ``python -m jobs.storage.objectstore.spread node <folder> <root>``: it starts its node's volume
server and gateway, confined to a folder of its own under the tool's folder on ``storage.root`` (as the
embedded server is), bound to the address Slurm reaches the node by (``jobs.nodes``). It hands over
where they listen (``node-<k>.json``: no key) and its servers' counters (``node-<k>.io``, every
``IO_EVERY_S``: the volume server's disk reads and both programs' CPU time) through the cell's own
folder, which every node sees, as the tf.data service's workers do. The keys are made by the runner and
reach the nodes in the step's environment only.

What a user must know: the master's, filer's and volume servers' own ports listen on the nodes' cluster
addresses without keys (SeaweedFS checks keys at the S3 gateway only); they hold the tool's synthetic
dataset, for the cell's length. docs/object-storage.md says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from jobs import lifeline
from jobs.storage.objectstore import server
from jobs.storage.objectstore.endpoint import Credentials, Endpoint

MODULE = "jobs.storage.objectstore.spread"
SUBDIR = "s3nodes"  # the hand-over folder, in the cell's folder
IO_EVERY_S = 0.05
START_TIMEOUT_S = 120.0
STEP_ERR = "step.err"
STOP = "stop"  # the runner's word to every node's task: stop the servers, remove their folder, end
STOP_WAIT_S = 30.0
HEAD_PORTS = ("master", "master_grpc", "filer", "filer_grpc", "metrics")
NODE_PORTS = ("volume", "volume_grpc", "s3", "s3_grpc", "metrics")


class SpreadError(server.ServerError):
    """A node's servers did not start, or ended while the cell ran; the message names the node."""


def _head_command(ip: str, ports: dict[str, int]) -> list[str]:
    """The master and the filer, on the controller's node (no volume: every node has one of its own)."""
    return [
        "-logtostderr",  # no log file: its INFO lines name the access key (read_output blanks it)
        "server",
        f"-ip={ip}",
        f"-ip.bind={ip}",
        "-dir=data",
        "-volume=false",
        f"-master.port={ports['master']}",
        f"-master.port.grpc={ports['master_grpc']}",
        "-master.peers=none",
        "-master.telemetry=false",
        "-master.volumeSizeLimitMB=1024",
        "-filer",
        f"-filer.port={ports['filer']}",
        f"-filer.port.grpc={ports['filer_grpc']}",
        "-filer.localSocket=filer.sock",
        f"-metricsPort={ports['metrics']}",
    ]


def _volume_command(ip: str, ports: dict[str, int], master: str) -> list[str]:
    return [
        "-logtostderr",  # no log file: its INFO lines name the access key (read_output blanks it)
        "volume",
        f"-ip={ip}",
        f"-ip.bind={ip}",
        "-dir=data",
        f"-port={ports['volume']}",
        f"-port.grpc={ports['volume_grpc']}",
        f"-master={master}",
        "-max=100",
        "-minFreeSpace=0",  # as the embedded server's (server._command says why)
    ]


def _gateway_command(ip: str, ports: dict[str, int], filer: str) -> list[str]:
    return [
        "-logtostderr",  # no log file: its INFO lines name the access key (read_output blanks it)
        "s3",
        f"-filer={filer}",
        f"-ip.bind={ip}",
        f"-port={ports['s3']}",
        f"-port.grpc={ports['s3_grpc']}",
        "-port.iceberg=0",
        "-port.lance=0",
        "-localSocket=s3.sock",
        f"-metricsPort={ports['metrics']}",
        "-cacheCapacityMB=0",  # a cold GET reaches the volumes' files
    ]


@dataclass
class Spread:
    """The store over the cell's nodes, as the runner holds it: the head (master and filer), the nodes'
    job step, and where each node's servers listen. ``Store`` reads it as it reads ``server.Server``."""

    head: server.Server
    step: subprocess.Popen
    handover: Path
    nodes: list[dict]  # each node's hand-over (node, address, url, volume_pid, gateway_pid, folder)
    endpoint: Endpoint  # this node's gateway
    credentials: Credentials
    ports: dict = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.head.pid

    @property
    def folder(self) -> Path:
        return self.head.folder

    @property
    def data_dir(self) -> Path:
        """This node's volumes: the folder whose device the runner's own counters are read on."""
        return Path(self.own["folder"]) / "data"

    @property
    def own(self) -> dict:
        from jobs import nodes

        return next((n for n in self.nodes if n["node"] == nodes.name()), self.nodes[0])

    def dead(self) -> str | None:
        """Why the store no longer serves: its head ended, a node's servers ended (that node's task says
        so in ``node-<k>.failed``), or the step did; None while every part serves."""
        if self.head.dead():
            return self.head.dead()
        for failed in sorted(self.handover.glob("node-*.failed")):
            with contextlib.suppress(OSError):
                return failed.read_text().strip()
        if self.step.poll() is not None:
            failed = _failed_node(self.handover / STEP_ERR)
            return f"the S3 servers' Slurm step ended{failed} (exit status {self.step.returncode})"
        return None

    def last_line(self) -> str:
        """The head's last line when it ended; a node's own words are in its ``dead`` reason already."""
        if self.head.dead():
            return self.head.last_line()
        return "the nodes' servers' messages are in the cell's log"

    def requests_served(self) -> int | None:
        return None  # each node's gateway counts its own; the tool counts its requests itself

    def counters(self) -> tuple | None:
        """(bytes every node's volume server read from its disk, CPU seconds of every server, None, and
        each node's disk reads by its name): what the nodes last wrote."""
        time.sleep(3 * IO_EVERY_S)  # the nodes' last writes
        per_node, cpu = {}, 0.0
        for k, hand in enumerate(self.nodes):
            try:
                vals = json.loads((self.handover / f"node-{k}.io").read_text())
            except (OSError, ValueError):
                return None
            per_node[hand["node"]] = int(vals["read_bytes"])
            cpu += float(vals["cpu_s"])
        head = server.proc_counters(self.head.pid)
        return sum(per_node.values()), cpu + (head[1] if head else 0.0), None, per_node

    def files(self) -> tuple[str, ...]:
        """None the runner can evict: each node's tasks evict their own node's volumes (``on_this_node``)."""
        return ()

    def stop(self) -> None:
        """End the nodes' step, then the head; the hand-over files go. Each node's task is asked by a file
        (``stop``) and stops its servers and removes its folder, and the step ends with them; srun's own
        SIGTERM would cancel the step, its tasks killed before they could remove anything."""
        (self.handover / STOP).touch()
        try:
            self.step.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.step.terminate()  # a task that cannot act (its node failed): Slurm ends the step
            try:
                self.step.wait(30)
            except subprocess.TimeoutExpired:
                self.step.kill()
                self.step.wait()
        self.head.stop()
        _clear(self.handover)


def _failed_node(err: Path) -> str:
    from jobs import nodes

    failed = nodes.srun_failure(err)
    return f" on {failed[0]} ({failed[2]})" if failed else ""


def _clear(handover: Path) -> None:
    """The step's messages into the cell's log, then the hand-over files gone (a node's task may write its
    counters once more while it ends)."""
    from jobs import owned

    with contextlib.suppress(OSError):
        sys.stderr.write((handover / STEP_ERR).read_text(errors="replace"))
    owned.remove_handover(handover)


def srun_nodes(nodes: int, cpus: int, handover: Path, root: str) -> list[str]:
    """The job step of the nodes' servers: one task on each node of the cell's job, with a task's CPUs
    (``platform.cpus_per_task``: where Slurm pins tasks to cores, the servers would otherwise share one),
    and this process's environment, the keys in it. No ``--kill-on-bad-exit``: a node whose servers died
    says so, and the others still remove their folders when the runner asks them to stop."""
    from jobs.nodes import srun_step

    return srun_step(
        MODULE,
        "node",
        str(handover),
        root,
        nodes=nodes,
        tasks=nodes,
        per_node=1,
        cpus_per_task=cpus,
        kill_on_bad_exit=False,
    )


def start(root: str, bucket: str, handover: Path, nodes: int, cpus: int, parent: Path, name: str) -> Spread:
    """The head in ``parent / name`` on this node's cluster address, then every node's servers as a job
    step (``cpus`` CPUs each); returns once exactly the nodes' volume servers have joined the master and
    the bucket exists. Raises ServerError (one line) and leaves nothing when any part does not start."""
    from jobs import nodes as cluster

    weed = server.program()
    if weed is None:
        raise server.ServerError("storage=s3: the embedded S3 server needs SeaweedFS's weed program")
    ip = cluster.address()
    folder = server.prepare(parent / name)
    creds = Credentials.fresh()
    try:
        ports = dict(zip(HEAD_PORTS, server._free_ports(len(HEAD_PORTS), ip)))
        proc = server.launch(weed, folder, _head_command(ip, ports), creds, _growth(nodes))
    except OSError as e:  # an address this node cannot bind, unshare missing: one line, nothing left
        server.remove(folder)
        raise SpreadError(f"storage=s3: the store's master could not start on {ip}: {e}") from None
    master = f"http://{ip}:{ports['master']}"
    head = server.watched(server.Server(folder, Endpoint(master, bucket), creds, proc, ports=ports))
    step = None
    try:
        handover.mkdir(parents=True, exist_ok=True)
        for old in handover.iterdir():
            old.unlink()
        _wait_http(f"{master}/cluster/status", head.dead, "the master")
        places = {
            "master": f"{ip}:{ports['master']}.{ports['master_grpc']}",
            "filer": f"{ip}:{ports['filer']}.{ports['filer_grpc']}",
        }
        (handover / "head.json").write_text(json.dumps(places))
        step = _start_step(nodes, cpus, handover, root, creds)
        spread = Spread(head, step, handover, [], Endpoint(master, bucket), creds, ports)
        spread.nodes = _wait_nodes(spread, nodes)
        _wait_joined(f"{master}/dir/status", spread)
        spread.endpoint = Endpoint(spread.own["url"], bucket)
        _make_bucket(spread)
        return spread
    except OSError as e:
        _abandon(head, step, handover, creds)
        raise SpreadError(f"storage=s3: the store over {nodes} nodes could not start: {e}") from None
    except BaseException:
        _abandon(head, step, handover, creds)
        raise


def _growth(nodes: int) -> dict[str, str]:
    """The master's volume growth (SeaweedFS's ``master.volume_growth.copy_1``, 7 by default) set to 8
    volumes per node at each growth, so that every node's volume server holds some of the objects: the
    master places each new volume on a server at random, and 7 volumes over 2 nodes leave one empty in
    1.6% of starts, over 8 nodes always."""
    return {"WEED_MASTER_VOLUME_GROWTH_COPY_1": str(max(7, 8 * nodes))}


def _start_step(nodes: int, cpus: int, handover: Path, root: str, creds: Credentials) -> subprocess.Popen:
    """The nodes' servers' job step, the keys in its environment only."""
    env = {k: v for k, v in lifeline.plain_env().items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=creds.access_key, AWS_SECRET_ACCESS_KEY=creds.secret_key)
    with open(handover / STEP_ERR, "wb") as err:
        return subprocess.Popen(srun_nodes(nodes, cpus, handover, root), env=env, stderr=err)


def _make_bucket(spread: Spread) -> None:
    """The bucket, made through this node's gateway."""
    from jobs.storage.objectstore import client

    client.make_bucket(client.connect(spread.endpoint, spread.credentials), spread.endpoint)


def _abandon(head: server.Server, step, handover: Path, creds: Credentials) -> None:
    """Whatever of a store that did not start is stopped, its folders and hand-over files removed."""
    if step is not None:
        Spread(head, step, handover, [], head.endpoint, creds).stop()
    else:
        head.stop()
        _clear(handover)


def _wait_nodes(spread: Spread, n: int) -> list[dict]:
    found = [spread.handover / f"node-{k}.json" for k in range(n)]

    def died() -> Exception | None:
        why = spread.dead()
        return SpreadError(f"storage=s3: {why} while the nodes' servers started") if why else None

    def late() -> Exception:
        missing = [k for k, f in enumerate(found) if not f.exists()]
        return SpreadError(
            f"storage=s3: the S3 servers of node tasks {missing} did not start in {START_TIMEOUT_S:.0f} s"
        )

    lifeline.wait_ready(
        lambda: all(f.exists() for f in found),
        died=died,
        late=late,
        timeout_s=START_TIMEOUT_S,
        interval_s=0.1,
    )
    return [json.loads(f.read_text()) for f in found]


def _wait_joined(url: str, spread: Spread) -> None:
    """Until the master's volume servers (its topology, ``/dir/status``) are exactly the nodes' own, as
    they handed themselves over; a volume server of anyone else's that joined the master (its ports ask
    for no key) fails the start, so that no object of the run is placed there."""
    want = {f"{n['address']}:{n['volume_port']}" for n in spread.nodes}
    seen: set[str] = set()  # the volume servers the master last listed

    def joined() -> bool | None:
        try:
            topo = json.loads(server._DIRECT.open(url, timeout=2).read())["Topology"]
        except (OSError, ValueError, KeyError):
            return None
        seen.clear()
        seen.update(
            node.get("Url") or node.get("PublicUrl")
            for dc in topo.get("DataCenters") or []
            for rack in dc.get("Racks") or []
            for node in rack.get("DataNodes") or []
        )
        if seen - want:
            raise SpreadError(
                f"storage=s3: volume servers that are not the cell's joined its master at {url}: "
                f"{', '.join(sorted(seen - want))} (its ports are open to the cluster's network: "
                "docs/object-storage.md)"
            )
        return True if seen == want else None

    lifeline.wait_ready(
        joined,
        died=lambda: _failed(spread.dead(), "while the volume servers joined the master"),
        late=lambda: SpreadError(
            f"storage=s3: the {len(want)} nodes' volume servers did not join the master at {url} "
            f"in {START_TIMEOUT_S:.0f} s (joined: {', '.join(sorted(seen)) or 'none'})"
        ),
        timeout_s=START_TIMEOUT_S,
        interval_s=0.1,
    )


def _wait_http(url: str, dead, what: str) -> None:
    """Until ``url`` answers (any HTTP status)."""
    lifeline.wait_ready(
        lambda: server.answers(url),
        died=lambda: _failed(dead(), f"while {what} started"),
        late=lambda: SpreadError(
            f"storage=s3: {what} at {url} did not answer within {START_TIMEOUT_S:.0f} s"
        ),
        timeout_s=START_TIMEOUT_S,
        interval_s=0.1,
    )


def _failed(why: str | None, when: str) -> SpreadError | None:
    """The error of a node's server that ended (``why``) before the spread was up; None while it runs."""
    return SpreadError(f"storage=s3: {why} {when}") if why else None


# ---- a node's task of the step -------------------------------------------------------------------


def node_main(handover: str, root: str) -> int:
    """One node's servers: started, handed over, their counters written until the step ends them."""
    from jobs import nodes, owned

    out, rank = Path(handover), int(os.environ["SLURM_PROCID"])
    parts: list[server.Server] = []
    stopping, folder = [], None

    def stop(*_) -> None:
        stopping.append(True)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        keys = (os.environ.pop("AWS_ACCESS_KEY_ID", None), os.environ.pop("AWS_SECRET_ACCESS_KEY", None))
        if None in keys:
            raise server.ServerError("the store's keys did not reach this node's task (srun --export)")
        creds = Credentials(*keys)
        head = json.loads((out / "head.json").read_text())
        ip = nodes.address()
        weed = server.program()
        if weed is None:
            raise server.ServerError(f"{nodes.name()} has no weed program beside {sys.executable}")
        parent = owned.under_tool_folder(root, server.SUBDIR, setting="storage.root")
        server.clear_stale(parent)
        folder = server.prepare(parent / f"{socket.gethostname()}-{os.getpid()}-0")
        ports = dict(zip(NODE_PORTS, server._free_ports(len(NODE_PORTS), ip)))
        url = f"http://{ip}:{ports['s3']}"
        for args in (_volume_command(ip, ports, head["master"]), _gateway_command(ip, ports, head["filer"])):
            proc = server.launch(weed, folder, args, creds)
            parts.append(server.watched(server.Server(folder, Endpoint(url, "-"), creds, proc, ports=ports)))
        volume, gateway = parts

        def dead() -> str | None:
            for what, p in (("volume server", volume), ("S3 gateway", gateway)):
                if p.process.poll() is not None:
                    return f"the {what} on {nodes.name()} ended: {p.last_line()}"
            return None

        _wait_http(f"http://{ip}:{ports['volume']}/status", dead, f"the volume server on {nodes.name()}")
        _wait_http(url, dead, f"the S3 gateway on {nodes.name()}")
        hand = {
            "node": nodes.name(),
            "address": ip,
            "url": url,
            "volume_pid": volume.pid,
            "volume_port": ports["volume"],
            "gateway_pid": gateway.pid,
            "folder": str(folder),
        }
        tmp = out / f"node-{rank}.json.part"
        tmp.write_text(json.dumps(hand))
        tmp.replace(out / f"node-{rank}.json")
        while not stopping and not (out / STOP).exists():
            why = dead()
            if why:
                _say_failed(out, rank, f"{why} (its S3 gateway {url})")
                return 1
            _write_io(out / f"node-{rank}.io", volume.pid, gateway.pid)
            time.sleep(IO_EVERY_S)
        return 0
    except Exception as e:  # noqa: BLE001 - said to the runner, which fails the cell naming the node
        _say_failed(out, rank, f"{nodes.name()}: {str(e).splitlines()[0] if str(e) else repr(e)}")
        return 1
    finally:
        for p in parts:  # both end before their shared folder goes
            p.end()
        if folder is not None:
            server.remove(folder)


def _say_failed(out: Path, rank: int, why: str) -> None:
    """A node's task's last word to the runner (and to the step's stderr, the cell's log)."""
    print(f"storage=s3: {why}", file=sys.stderr)
    tmp = out / f"node-{rank}.failed.part"
    tmp.write_text(why + "\n")
    tmp.replace(out / f"node-{rank}.failed")


def _write_io(path: Path, volume: int, gateway: int) -> None:
    v, g = server.proc_counters(volume), server.proc_counters(gateway)
    if v is None or g is None:
        return
    tmp = path.with_suffix(".io.part")
    tmp.write_text(json.dumps({"read_bytes": v[0], "cpu_s": v[1] + g[1]}))
    tmp.replace(path)


def main(role: str, *args: str) -> int:
    if role != "node":
        print(f"usage: python -m {MODULE} node HANDOVER ROOT", file=sys.stderr)
        return 2
    return node_main(*args)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
