"""Benchmark: TensorFlow's read -> decode -> resize pipeline over the same cold images as files and as
objects of the embedded S3 server (SeaweedFS, on this machine's disk), by the native S3 reader with each
object client: boto3 (the tool's, a GET per image in the map), and s3dlio (MLPerf Storage v3.0's: a batch
of keys a call, ``threads`` GETs in flight, its Rust core making each with the GIL released); and the
store's own GET rate, rclone copying the same objects with ``--transfers`` = threads into memory.

    python -m benchmarks.s3_reader [--storage-root /var/tmp] [--num-images 2048] [--threads 1,2,4]
                                   [--clients boto3,s3dlio] [--rounds 7] [--side 192] [--log passes.csv]
                                   [--pipeline decode_resize|read] [--rclone]

``--pipeline read``: the images read and counted, not decoded (what rclone does); ``--rclone`` (needs
rclone, Debian's ``apt-get install rclone``): rclone as a side of its own, each client ÷ rclone printed.

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


def _run(source, threads: int, decode: bool) -> tuple[float, int]:
    """One pass over ``source`` ((stream, read), as ``jobs.frameworks.tensorflow.sources.source`` gives
    them): seconds and bytes consumed."""
    import tensorflow as tf

    stream, read = source

    def load(*element):
        i, data, nbytes, _ = read(*element)
        if not decode:
            return tf.zeros([]), nbytes
        img = tf.image.resize(tf.io.decode_image(data, channels=3, expand_animations=False), [224, 224])
        return img, nbytes

    pipe = stream.map(load, num_parallel_calls=threads).batch(64)
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
    p.add_argument("--pipeline", choices=("decode_resize", "read"), default="decode_resize")
    p.add_argument("--rclone", action="store_true", help="rclone's copy of the objects, as the store's rate")
    a = p.parse_args(argv)
    if a.rclone and shutil.which("rclone") is None:
        raise SystemExit("--rclone: rclone is not installed (Debian: apt-get install rclone)")
    import tensorflow as tf

    from jobs import owned
    from jobs.frameworks.tensorflow import object_reads as s3_reader
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
        stores = _stores(clients, s3, srv, stack)
        sides = ("files", *clients, *(("rclone",) if a.rclone else ()))
        # each client over files, and each later one over the first (s3dlio over boto3), and over rclone
        pairs = [(c, "files") for c in clients] + [(c, clients[0]) for c in clients[1:]]
        pairs += [(c, "rclone") for c in clients if a.rclone]
        order = tf.data.Dataset.range(len(files))
        rows: dict[tuple[str, int], list[dict]] = {}
        ratios: dict[tuple[int, str, str], rounds.Summary] = {}
        for threads in (int(t) for t in a.threads.split(",")):

            def measure(r: int, path: str, threads=threads) -> rounds.Pass:
                stats = objects.Requests()
                if path == "files":
                    cache.evict([str(f) for f in files], drop_caches=True)
                    source = (order, file_read)
                else:
                    cache.evict([str(f) for f in srv.data_dir.glob("*.dat")], drop_caches=True)
                if path in stores:
                    store = stores[path]
                    store.begin_run()
                    stats = store.requests
                    if store.get_batch is not None:  # as the tool reads through it: a batch of keys a call
                        source = s3_reader.batched(order, listed.keys, labels, store.fetch_batch, threads)
                    else:
                        source = (order, s3_reader.reader(listed.keys, labels, store.fetch))
                server0 = _cpu_s(server, srv.pid)
                before = _device_bytes(disk)
                watch = rounds.Watch()
                if path == "rclone":
                    seconds, consumed = _rclone(srv, listed.prefix, threads)
                else:
                    seconds, consumed = _run(source, threads, a.pipeline == "decode_resize")
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
            f"{len(files)} images, {mb:.0f} MB, cold every round, pipeline {a.pipeline}; medians of at least "
            f"{a.rounds} rounds, the order alternating"
        )
        for (path, threads), rs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            med = {k: statistics.median(r[k] for r in rs) for k in ("images_per_s", "device_ratio")}
            line = f"{path:6s} threads={threads}: {med['images_per_s']:7.1f} images/s"
            line += f", device/consumed {med['device_ratio']:.2f}"
            if path in stores:
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


def _stores(names: list[str], s3, srv, stack: contextlib.ExitStack) -> dict:
    """``client -> the open store reading through it`` (``tier.Store``, its GETs counted) of each asked-for
    object client (``jobs.storage.objectstore.clients``) against the server ``srv``, each made ready as a
    cell's runs make it (``reading``: s3dlio's endpoint configured and the server's keys lent to this
    process's environment until ``stack`` closes)."""
    from jobs.frameworks import PAPERS
    from jobs.storage.objectstore import clients, tier

    able = [c.name for c in clients.serving(PAPERS)]  # the clients of TensorFlow's reader
    out = {}
    for name in names:
        if name not in able:
            raise SystemExit(f"--clients={name}: TensorFlow's reader GETs with one of {', '.join(able)}")
        client = clients.get(name)
        store = tier.Store(endpoint=srv.endpoint, client=s3, server=srv)
        stack.enter_context(client.reading(store, None, "", ""))
        stack.enter_context(store.reading_with(client))
        out[name] = store
    return out


def _rclone(srv, prefix: str, transfers: int) -> tuple[float, int]:
    """rclone copying every object under ``prefix`` into memory (a folder of /dev/shm, removed after) with
    ``transfers`` GETs at once: (seconds, bytes). Its remote is given in its environment only (rclone's
    ``RCLONE_CONFIG_<NAME>_<KEY>``), the server's keys with it."""
    import os
    import subprocess
    import tempfile

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RCLONE_", "AWS_"))}
    env.update(
        RCLONE_CONFIG_STORE_TYPE="s3",
        RCLONE_CONFIG_STORE_PROVIDER="Other",
        RCLONE_CONFIG_STORE_ENDPOINT=srv.endpoint.url,
        RCLONE_CONFIG_STORE_ACCESS_KEY_ID=srv.credentials.access_key,
        RCLONE_CONFIG_STORE_SECRET_ACCESS_KEY=srv.credentials.secret_key,
        RCLONE_CONFIG_STORE_FORCE_PATH_STYLE="true",
    )
    out = tempfile.mkdtemp(dir="/dev/shm", prefix="iocampaign-rclone-")
    try:
        start = time.perf_counter()
        subprocess.run(
            [
                "rclone",
                "copy",
                f"store:{srv.endpoint.bucket}/{prefix}",
                out,
                f"--transfers={transfers}",
                f"--checkers={transfers}",
                "--ignore-checksum",
                "--s3-no-check-bucket",
                "--no-traverse",
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        seconds = time.perf_counter() - start
        consumed = sum(p.stat().st_size for p in Path(out).iterdir() if p.name != "manifest.json")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return seconds, consumed


if __name__ == "__main__":
    raise SystemExit(main())
