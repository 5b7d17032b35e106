"""What every framework's input loop shares, whatever reads its samples: the settings a run's loop is
set by (``PipelineSettings``, typed once from the cell's config), how many dropped files a run record
names, and this process's read counters, read before and after the run.

Each framework's own loader lives in its package: TensorFlow's tf.data pipeline in
``jobs.frameworks.tensorflow.pipeline``, PyTorch's DataLoader in ``jobs.frameworks.pytorch.loader``,
Grain's in ``jobs.frameworks.jax.grain_loader``."""

from __future__ import annotations

from dataclasses import dataclass

DROPPED_LISTED = 50  # dropped files named in a run record; the count is always complete


@dataclass(frozen=True, kw_only=True)
class PipelineSettings:
    """What a run that reads through a framework's input pipeline is set by, typed once from the cell's
    config (``from_config``); the micro-benchmark's and AlexNet's settings add their own fields."""

    threads: int | str  # num_parallel_calls: a positive int or "autotune"
    batch_size: int
    prefetch: int  # batches prefetched (0: none)
    image_side: int  # side of the resized square image, pixels
    seed: int  # the run's seed: its sample order
    read_delay_ms: float = 0.0  # extra latency per file read, ms
    shuffle: str = "global"  # global | local | none (jobs.data.order)
    shuffle_buffer: int | None = None
    prefetch_to: str = "host"  # host | device: where prefetched batches wait (training only)

    @property
    def order(self) -> dict:
        """How the run orders its samples, as the frameworks' readers take it."""
        return {"shuffle": self.shuffle, "shuffle_buffer": self.shuffle_buffer, "threads": self.threads}

    @classmethod
    def from_config(cls, cfg, seed: int, **extra):
        """The settings of one run of a cell (``cfg``: its typed config), plus the subclass's ``extra``
        fields."""
        from jobs.schema import threads_value

        return cls(
            threads=threads_value(cfg.threads),
            batch_size=cfg.batch_size,
            prefetch=cfg.prefetch,
            image_side=cfg.workload.image_side,
            seed=seed,
            read_delay_ms=cfg.workload.read_delay_ms,
            shuffle=cfg.shuffle,
            shuffle_buffer=cfg.shuffle_buffer or None,
            prefetch_to=cfg.prefetch_to,
            **extra,
        )


def read_counters() -> tuple[int | None, int | None]:
    """(read_bytes, rchar) of this process from /proc/self/io; None where unavailable."""
    vals: dict[str, int] = {}
    try:
        with open("/proc/self/io") as f:
            for line in f:
                k, _, v = line.partition(":")
                vals[k] = int(v)
    except OSError:
        return None, None
    return vals.get("read_bytes"), vals.get("rchar")


def delta(before: int | None, after: int | None) -> int | None:
    """``after - before`` of a counter read twice (``read_counters``); None where either read had none."""
    return None if before is None or after is None else after - before
