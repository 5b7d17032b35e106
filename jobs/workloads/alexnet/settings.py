"""What one run of the AlexNet mini-app is set by and what it measures, shared by its engines
(``training``: TensorFlow and Keras; ``torch_training``: PyTorch) without importing either."""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass
from pathlib import Path

from jobs.data.loading import PipelineSettings


@dataclass(frozen=True, kw_only=True)
class TrainSettings(PipelineSettings):
    width: float  # multiplier of filters and dense units (1.0 = the paper's AlexNet)
    steps: int | None  # training steps; None = one epoch, images // batch_size (142 at 9,144 / 64)
    device: str = "auto"  # auto | cpu | gpu
    compute_only_steps: int = 5  # steps timed on one batch in the device's memory after the loop (0: none)


@dataclass(frozen=True)
class TrainResult:
    steps: int
    images: int
    images_dropped: int
    dropped_files: list
    runtime_s: float
    data_wait_s: float
    compute_s: float
    first_step_s: float
    steady_runtime_s: float  # runtime without the first step (graph tracing): what figures and claims compare
    first_step_wait_s: float
    train_au_percentage: float  # MLPerf Storage's AU: steady compute ÷ steady runtime × 100
    compute_only_s: float | None  # the steady steps' time without an input pipeline (overlap.compute_only)
    images_per_s: float
    mb_per_s: float
    bytes_consumed: int
    bytes_read_device: int | None
    bytes_read_syscall: int | None
    device: str
    parameters: int
    final_loss: float
    t_first_iterator_call: float  # perf_counter times, for the I/O trace's marks
    t_last_iterator_call: float

    def as_dict(self) -> dict:
        return asdict(self)


def write_steps(path: Path, waits: list, computes: list) -> None:
    """Every step's wait and compute time, one row a step (the run's ``steps_<run>.csv``)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "wait_s", "compute_s"])
        w.writerows((k + 1, round(a, 6), round(b, 6)) for k, (a, b) in enumerate(zip(waits, computes)))


def parameters(num_classes: int, side: int, width: float) -> int:
    """AlexNet's trainable parameters as ``training.build_model`` (and ``torch_training``'s twin) builds it,
    counted without building it: 58.7 M at 224 px, width 1, 102 classes."""

    def w(n: int) -> int:
        return max(4, int(round(n * width)))

    def pooled(n: int) -> int:  # MaxPooling2D(3, 2), valid
        return (n - 3) // 2 + 1

    convs = [
        (3, w(96), 11),
        (w(96), w(256), 5),
        (w(256), w(384), 3),
        (w(384), w(384), 3),
        (w(384), w(256), 3),
    ]
    out = sum(k * k * cin * cout + cout for cin, cout, k in convs)
    n = pooled(pooled(pooled(-(-side // 4))))  # conv 1 (stride 4, same), then the three poolings
    dense = [(n * n * w(256), w(4096)), (w(4096), w(4096)), (w(4096), num_classes)]
    return out + sum(i * o + o for i, o in dense)


def result(
    ds, loop: dict, drops: list, counters: tuple, *, t0: float, compute_only_s, device: str, parameters: int
) -> TrainResult:
    """A training run's result, the same for every framework's engine: ``loop`` holds its ``waits`` and
    ``computes`` (one per step), ``seen`` (the delivered images), ``consumed`` (their bytes), ``loss``,
    ``t_end`` and ``t_last_call``; ``counters``, (read_bytes, rchar) before and after
    (``loading.read_counters``). AU leaves the first step out."""
    from jobs.data import loading
    from jobs.metrics import MB

    waits, computes, seen, consumed = loop["waits"], loop["computes"], loop["seen"], loop["consumed"]
    (rb0, rc0), (rb1, rc1) = counters
    runtime = loop["t_end"] - t0
    steady = runtime - (waits[0] + computes[0])
    return TrainResult(
        steps=len(waits),
        images=len(seen),
        images_dropped=len(drops),
        dropped_files=[ds.where(i) for i in drops[: loading.DROPPED_LISTED]],
        runtime_s=runtime,
        data_wait_s=sum(waits),
        compute_s=sum(computes),
        first_step_s=waits[0] + computes[0],
        steady_runtime_s=steady,
        first_step_wait_s=waits[0],
        train_au_percentage=100 * sum(computes[1:]) / steady if steady > 0 else float("nan"),
        compute_only_s=compute_only_s,
        images_per_s=len(seen) / runtime,
        mb_per_s=consumed / runtime / MB,
        bytes_consumed=consumed,
        bytes_read_device=loading.delta(rb0, rb1),
        bytes_read_syscall=loading.delta(rc0, rc1),
        device=device,
        parameters=parameters,
        final_loss=loop["loss"],
        t_first_iterator_call=t0,
        t_last_iterator_call=loop["t_last_call"],
    )
