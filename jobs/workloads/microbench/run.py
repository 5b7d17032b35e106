"""What the micro-benchmark hands each framework's engine (``RunSettings``) and what the engine gives back
for one run (``RunResult``): the same for every framework (``jobs/frameworks/<name>/``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from jobs.data.loading import PipelineSettings


@dataclass(frozen=True, kw_only=True)
class RunSettings(PipelineSettings):
    pipeline: str  # decode_resize | read_only
    batches: int | None  # batches per run; None = one pass
    service: str | None = None  # the tf.data service's dispatcher: the pipeline runs on its workers

    @property
    def order(self) -> dict:
        """How the run orders its samples (a read-only run reads TFRecord shards in blocks)."""
        return {**PipelineSettings.order.fget(self), "payload": self.pipeline != "read_only"}


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
