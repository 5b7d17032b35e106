"""Benchmark: TensorFlow's read -> decode -> resize pipeline over the same cold images as files and as
objects of the embedded S3 server (SeaweedFS, on this machine's disk), by the native S3 reader with each
object client: boto3 (the tool's), and s3dlio (MLPerf Storage v3.0's, whose Rust core makes the request
with the GIL released).

    python -m benchmarks.s3_reader [--storage-root /var/tmp] [--num-images 2048] [--threads 1,2,4]
                                   [--clients boto3,s3dlio] [--rounds 7] [--side 192] [--log passes.csv]

Makes ``--num-images`` noise JPEGs of ``--side`` pixels (about 34 KB each at 192; the size is printed)
in the tool's folder under ``--storage-root``, starts the embedded server there and
uploads them, one object each. For every thread count and round, in an order that alternates: the
files, or the server's volume files, are evicted from the page cache (``jobs.storage.cache.evict`` and
drop_caches: needs root), then read once, ``map(read -> decode -> resize)`` with that many parallel
calls, each GET made by one client (``--clients``). Prints each path's median images/s, the device's
bytes ÷ the bytes consumed (cold: about 1), and for the clients the GET latency p50/p99 and the mean
requests in flight; then each client ÷ files and s3dlio ÷ boto3 with its interval, the machine's load,
the CPU share other processes took and each path's CPU per image, the server's included
(``benchmarks.rounds``). Everything it made is removed; s3dlio is given the server's keys in this
process's environment only, for the benchmark's time.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import time
from pathlib import Path

from benchmarks import rounds
from benchmarks.presets import quiet


def _images(folder: Path, n: int, side: int) -> list[Path]:
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        p = folder / f"img{i:06d}.jpg"
        Image.fromarray(rng.integers(0, 255, (side, side, 3), dtype=np.uint8)).save(p, quality=90)
        out.append(p)
    return out


def _device_bytes(disk: str | None) -> int | None:
    from jobs.observe import usage

    c = usage._disk(disk)
    return None if c is None else c[1] * 512


def _cpu_s(server, pid: int) -> float:
    """CPU seconds of the server ``pid`` and its processes so far (0 when /proc cannot say)."""
    got = server.tree_counters(pid)
    return 0.0 if got is None else got[1]


def _run(read, n: int, threads: int) -> tuple[float, int]:
    import tensorflow as tf

    def load(i):
        i, data, nbytes, _ = read(i)
        img = tf.image.resize(tf.io.decode_image(data, channels=3, expand_animations=False), [224, 224])
        return img, nbytes

    pipe = tf.data.Dataset.range(n).map(load, num_parallel_calls=threads).batch(64)
    start, consumed = time.perf_counter(), 0
    for _, nbytes in pipe:
        consumed += int(tf.reduce_sum(nbytes))
    return time.perf_counter() - start, consumed


@quiet  # TensorFlow's and CUDA's lines in a file, not on the terminal
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.s3_reader", description=__doc__.split("\n")[0])
    p.add_argument("--storage-root", default="/var/tmp")
    p.add_argument("--num-images", type=int, default=2048)
    p.add_argument("--threads", default="1,2,4")
    p.add_argument("--clients", default="boto3,s3dlio", help="object clients that GET: boto3, s3dlio")
    rounds.add_arguments(p, "--rounds")
    p.add_argument("--side", type=int, default=192)
    a = p.parse_args(argv)
    import tensorflow as tf

    from jobs import owned
    from jobs.data import s3 as s3_reader
    from jobs.observe.trace import device_of
    from jobs.storage import cache
    from jobs.storage.objectstore import client, objects, server

    base = owned.under_tool_folder(a.storage_root, "bench-s3", setting="--storage-root")
    srv = None
    try:
        files = _images(base / "files", a.num_images, a.side)
        srv = server.start(base / "server")
        s3 = client.connect(srv.endpoint, srv.credentials, connections=64)
        listed, _ = objects.upload(s3, srv.endpoint, files, "bench")
        labels = tf.zeros([len(files)], tf.int32)
        paths = tf.constant([str(f) for f in files])
        disk = device_of(str(base))

        def file_read(i):
            data = tf.io.read_file(tf.gather(paths, i))
            return i, data, tf.cast(tf.strings.length(data, unit="BYTE"), tf.int64), tf.gather(labels, i)

        clients = [c for c in a.clients.split(",") if c]
        stack = contextlib.ExitStack()
        fetchers = _fetchers(clients, s3, srv, stack)
        sides = ("files", *clients)
        # each client over files, and each later one over the first (s3dlio over boto3)
        pairs = [(c, "files") for c in clients] + [(c, clients[0]) for c in clients[1:]]
        rows: dict[tuple[str, int], list[dict]] = {}
        ratios: dict[tuple[int, str, str], rounds.Summary] = {}
        for threads in (int(t) for t in a.threads.split(",")):

            def measure(r: int, path: str, threads=threads) -> rounds.Pass:
                stats = objects.Requests()
                if path == "files":
                    cache.evict([str(f) for f in files], drop_caches=True)
                    read = file_read
                else:
                    cache.evict([str(f) for f in srv.data_dir.glob("*.dat")], drop_caches=True)
                    fetch = fetchers[path]
                    read = s3_reader.reader(
                        listed.keys,
                        labels,
                        lambda k, st=stats, f=fetch: objects.counted(st, srv.endpoint, k, f),
                    )
                server0 = _cpu_s(server, srv.pid)
                before = _device_bytes(disk)
                watch = rounds.Watch()
                seconds, consumed = _run(read, len(files), threads)
                after = _device_bytes(disk)
                # the server is this benchmark's: its CPU is the side's, not another process's
                served = _cpu_s(server, srv.pid) - server0
                row = {"images_per_s": len(files) / seconds, "consumed": consumed, **stats.summary(seconds)}
                row["device_ratio"] = (after - before) / consumed if before is not None else None
                rows.setdefault((path, threads), []).append(row)
                return watch.done(f"threads={threads}", r, path, row["images_per_s"], len(files), served)

            passes = rounds.run(sides, measure, pairs, a)
            for x, y in pairs:
                ratios[threads, x, y] = rounds.summarize(passes, x, y)
        mb = listed.bytes / 1e6
        print(
            f"{len(files)} images, {mb:.0f} MB, cold every round; medians of at least {a.rounds} rounds, "
            "the order alternating"
        )
        for (path, threads), rs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            med = {k: statistics.median(r[k] for r in rs) for k in ("images_per_s", "device_ratio")}
            line = f"{path:6s} threads={threads}: {med['images_per_s']:7.1f} images/s"
            line += f", device/consumed {med['device_ratio']:.2f}"
            if path != "files":
                p50 = statistics.median(r["get_latency_p50_ms"] for r in rs)
                p99 = statistics.median(r["get_latency_p99_ms"] for r in rs)
                fl = statistics.median(r["requests_in_flight_mean"] for r in rs)
                line += f", GET p50 {p50:.1f} ms, p99 {p99:.1f} ms, {fl:.1f} requests in flight"
            print(line, flush=True)
        print(f"{'threads':>7} {'ratio':>14} {'':>5} {rounds.HEADER}")
        for (threads, x, y), r in ratios.items():
            print(f"{threads:>7} {x + '/' + y:>14} {r.ratio:>5.2f} {rounds.columns(r)}")
        print(
            rounds.legend(
                "CPU ms per image, the client's and the server's", "the ratio's first side", "its second"
            )
        )
    finally:
        if "stack" in locals():
            stack.close()
        if srv is not None:
            srv.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


def _fetchers(names: list[str], s3, srv, stack: contextlib.ExitStack) -> dict:
    """``client -> fetch(key) -> bytes`` of each asked-for object client
    (``jobs.storage.objectstore.clients``) against the server ``srv``, each made ready as a cell's runs
    make it (``reading``: s3dlio's endpoint configured and the server's keys lent to this process's
    environment until ``stack`` closes)."""
    from jobs.frameworks import PAPERS
    from jobs.storage.objectstore import clients, tier

    store = tier.Store(endpoint=srv.endpoint, client=s3, server=srv)
    able = [c.name for c in clients.serving(PAPERS)]  # the clients of TensorFlow's map
    out = {}
    for name in names:
        if name not in able:
            raise SystemExit(f"--clients={name}: TensorFlow's map GETs with one of {', '.join(able)}")
        client = clients.get(name)
        stack.enter_context(client.reading(store, None, "", ""))
        out[name] = client.get(store)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
