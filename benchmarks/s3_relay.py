"""Benchmark: what the relay in front of the embedded S3 server costs (jobs/storage/objectstore/relay.py).

    python -m benchmarks.s3_relay [--storage-root /var/tmp] [--num-objects 512] [--size-kb 113]
                                  [--threads 1,4] [--passes 7] [--log passes.csv]

Starts two embedded servers at once in the tool's folder under ``--storage-root``: one as the servers
spread over a cluster run (its ports on the host's loopback, no relay), one as the tool runs it on one
node (in a network namespace of its own, reached through the relay). Puts the same ``--num-objects``
objects of ``--size-kb`` in each, then GETs them all (boto3, kept-alive connections, that many
threads), pass after pass, alternating which server goes first (``benchmarks.rounds``). Prints, for
each server and thread count, the median GETs/s, the GET latency p50 and p99, and the server's CPU per
GET with the relay's share; then relayed / direct with its interval, the machine's load, the CPU share
other processes took and each side's CPU per GET (client and server). The objects stay in the page
cache: this is the path through the relay, not the disk. Everything it made is removed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import rounds


def _direct(folder: Path):
    """A server on the host's loopback, as before the relay (``launch`` without one, as spread.py
    calls it)."""
    from jobs.storage.objectstore import client, server
    from jobs.storage.objectstore.endpoint import Credentials, Endpoint

    made = server.prepare(folder)
    ports = dict(zip(server.PORTS, server._free_ports(len(server.PORTS))))
    creds = Credentials.fresh()
    proc = server.launch(server.program(), made, server._command(ports), creds)
    endpoint = Endpoint(f"http://127.0.0.1:{ports['s3']}", "iocampaign")
    srv = server.watched(server.Server(made, endpoint, creds, proc, ports=ports))
    try:
        server._wait_ready(srv, 60)
        client.make_bucket(client.connect(srv.endpoint, srv.credentials), srv.endpoint)
    except BaseException:
        srv.stop()
        raise
    return srv


def _pass(s3, n: int, threads: int) -> tuple[float, list[float]]:
    """(seconds, each GET's latency) of GETting every object once with ``threads`` threads."""

    def get(i: int) -> float:
        t0 = time.perf_counter()
        s3.get_object(Bucket="iocampaign", Key=f"relay/{i:06d}")["Body"].read()
        return time.perf_counter() - t0

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        latencies = list(pool.map(get, range(n)))
    return time.perf_counter() - start, latencies


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.s3_relay", description=__doc__.split("\n")[0])
    p.add_argument("--storage-root", default="/var/tmp")
    p.add_argument("--num-objects", type=int, default=512)
    p.add_argument("--size-kb", type=int, default=113)
    p.add_argument("--threads", default="1,4")
    rounds.add_arguments(p, "--passes", help_name="passes a server")
    a = p.parse_args(argv)

    from jobs import owned
    from jobs.storage.objectstore import client, server

    base = owned.under_tool_folder(a.storage_root, "bench-s3-relay", setting="--storage-root")
    servers = {}
    try:
        servers["direct"] = _direct(base / "direct")
        servers["relayed"] = server.start(base / "relayed")
        conns = {k: client.connect(s.endpoint, s.credentials, connections=16) for k, s in servers.items()}
        body = os.urandom(a.size_kb * 1000)
        for s3 in conns.values():
            with ThreadPoolExecutor(8) as pool:
                keys = (f"relay/{i:06d}" for i in range(a.num_objects))
                list(pool.map(lambda k, c=s3: c.put_object(Bucket="iocampaign", Key=k, Body=body), keys))
        threads = [int(t) for t in a.threads.split(",")]
        rows = {(k, t): {"lat": [], "cpu": [], "relay": []} for t in threads for k in servers}
        ratios = {}
        for t in threads:

            def measure(r: int, k: str, t=t) -> rounds.Pass:
                pid = servers[k].pid
                cpu0, own0 = server.tree_counters(pid)[1], server.proc_counters(pid)[1]
                watch = rounds.Watch()
                seconds, latencies = _pass(conns[k], a.num_objects, t)
                row = rows[(k, t)]
                row["lat"] += latencies
                row["cpu"].append(server.tree_counters(pid)[1] - cpu0)
                row["relay"].append(server.proc_counters(pid)[1] - own0 if k == "relayed" else 0.0)
                # the server is this benchmark's, not another process's: its CPU is the side's
                return watch.done(
                    f"threads={t}", r, k, a.num_objects / seconds, a.num_objects, row["cpu"][-1]
                )

            passes = rounds.run(("direct", "relayed"), measure, [("relayed", "direct")], a)
            ratios[t] = rounds.summarize(passes, "relayed", "direct")
        print(
            f"{a.num_objects} GETs of {a.size_kb} KB a pass, {max(x.rounds for x in ratios.values())} passes "
            "a server, alternating; "
            "medians of the passes (GET latencies: of all)"
        )
        for (k, t), row in rows.items():
            s = ratios[t]
            lat = sorted(row["lat"])
            p50, p99 = 1e3 * statistics.median(lat), 1e3 * lat[int(0.99 * (len(lat) - 1))]
            per_get = 1e3 / a.num_objects
            print(
                f"{k:7s} threads={t}: {s.rate_a if k == 'relayed' else s.rate_b:7.1f} GETs/s, "
                f"GET p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
                f"server CPU {per_get * statistics.median(row['cpu']):.3f} ms/GET "
                f"(the relay's {per_get * statistics.median(row['relay']):.3f})",
                flush=True,
            )
        print(f"{'threads':>7} {'relayed/direct':>14} {rounds.HEADER}")
        for t, s in ratios.items():
            print(f"{t:>7} {s.ratio:>14.2f} {rounds.columns(s)}")
        print(rounds.legend("CPU ms per GET, client and server", "relayed", "direct"))
    finally:
        for s in servers.values():
            s.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
