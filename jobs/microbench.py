"""The Section III-A micro-benchmark and its read-only variant: one timed run over a dataset.

list of paths -> shuffle -> map(read_file -> decode -> resize, num_parallel_calls=threads)
-> ignore_errors -> batch -> [prefetch] -> iterate until the set is consumed (or ``batches``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from jobs import cache
from jobs.datasets import Dataset
from jobs.metrics import MB

DROPPED_LISTED = 50  # dropped files named in a run record; the count is always complete


@dataclass(frozen=True)
class RunSettings:
    pipeline: str  # decode_resize | read_only
    threads: int | str  # positive int or "autotune"
    batch_size: int
    prefetch: int
    image_side: int
    batches: int | None
    seed: int


def num_parallel_calls(threads: int | str) -> int:
    import tensorflow as tf

    return tf.data.AUTOTUNE if str(threads) == "autotune" else int(threads)


def build(ds: Dataset, s: RunSettings):
    """The tf.data pipeline of the paper; elements are (batch, file indices, file bytes)."""
    import tensorflow as tf

    n = len(ds.files)
    index = tf.data.Dataset.from_tensor_slices((tf.range(n, dtype=tf.int64), tf.constant(ds.files)))
    shuffled = index.shuffle(n, seed=s.seed, reshuffle_each_iteration=False)
    decode = s.pipeline == "decode_resize"
    side = s.image_side

    def load(i, path):
        data = tf.io.read_file(path)
        nbytes = tf.cast(tf.strings.length(data, unit="BYTE"), tf.int64)
        if not decode:
            return data, i, nbytes
        img = tf.io.decode_image(data, channels=3, expand_animations=False)
        img = tf.image.resize(img, [side, side])
        return img, i, nbytes

    out = shuffled.map(load, num_parallel_calls=num_parallel_calls(s.threads)).ignore_errors().batch(s.batch_size)
    if s.prefetch > 0:
        out = out.prefetch(s.prefetch)
    return out


def shuffled_order(n: int, seed: int) -> list[int]:
    """The order in which the pipeline's shuffle hands out file indices (no file is read)."""
    import tensorflow as tf

    d = tf.data.Dataset.range(n).shuffle(n, seed=seed, reshuffle_each_iteration=False)
    return [int(x) for x in d.as_numpy_iterator()]


@dataclass(frozen=True)
class RunResult:
    images: int
    images_dropped: int
    dropped_files: list
    batches: int
    seconds: float
    first_batch_s: float
    images_per_s: float
    mb_per_s: float
    bytes_consumed: int
    bytes_read_device: int | None
    bytes_read_syscall: int | None

    def as_dict(self) -> dict:
        return asdict(self)


def _rchar() -> int | None:
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def run_once(ds: Dataset, s: RunSettings) -> RunResult:
    """One timed pass: from the first iterator call to the return of the last one."""
    pipeline = build(ds, s)
    it = iter(pipeline)  # creating the iterator reads nothing: parallel map starts on the first call
    seen: list[int] = []
    consumed = 0
    nb = 0
    exhausted = False
    rb0, rc0 = cache.process_read_bytes(), _rchar()
    t0 = time.perf_counter()
    t_first = t_last = t0
    while s.batches is None or nb < s.batches:
        try:
            _, idx, nbytes = next(it)
        except StopIteration:
            exhausted = True
            break
        t_last = time.perf_counter()
        if nb == 0:
            t_first = t_last
        nb += 1
        seen.extend(int(i) for i in idx.numpy())
        consumed += int(nbytes.numpy().sum())
    del it  # stop read-ahead before the counters are read
    rb1, rc1 = cache.process_read_bytes(), _rchar()
    seconds = t_last - t0
    n = len(ds.files)
    if exhausted:
        attempted = list(range(n))
    else:
        order = shuffled_order(n, s.seed)
        pos = {f: p for p, f in enumerate(order)}
        last = max((pos[i] for i in seen), default=-1)
        attempted = order[: last + 1]
    got = set(seen)
    dropped = [i for i in attempted if i not in got]
    if seconds <= 0 or not seen:
        raise RuntimeError(
            f"the pipeline delivered no image out of {n} files ({len(dropped)} dropped as unreadable or not images)"
        )
    return RunResult(
        images=len(seen),
        images_dropped=len(dropped),
        dropped_files=[ds.files[i] for i in sorted(dropped)[:DROPPED_LISTED]],
        batches=nb,
        seconds=seconds,
        first_batch_s=t_first - t0,
        images_per_s=len(seen) / seconds,
        mb_per_s=consumed / seconds / MB,
        bytes_consumed=consumed,
        bytes_read_device=None if rb0 is None or rb1 is None else rb1 - rb0,
        bytes_read_syscall=None if rc0 is None or rc1 is None else rc1 - rc0,
    )
