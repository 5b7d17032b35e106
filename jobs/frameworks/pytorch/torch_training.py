"""The AlexNet mini-app through PyTorch (``framework=pytorch``): the Keras model's layers and widths
written with ``torch.nn``, trained with Adam (1e-4, as the TensorFlow engine's ``make_step``: the same
update work and the same optimizer state to checkpoint) on batches from a ``torch.utils.data.DataLoader``
(``loader``), each step timed as waiting for data and computing, as TensorFlow's ``training`` times them.

The loader yields NHWC float batches (as tf.data does); each step moves them to the device and views
them as NCHW (a channels-last view, no copy), inside the step's compute time. The loss is read back with
``.item()``, which waits for the step to finish on a GPU too.

Prefetch: a DataLoader's workers always load ahead (``loader.prefetch_factor`` batches each), so tf.data's
``prefetch=N`` has no counterpart and ``framework=pytorch`` refuses it (``jobs.frameworks``). The
PyTorch run *without prefetch* is ``loader.num_workers=0``: the training process reads and decodes each
batch itself, between its steps, as PyTorch's default DataLoader does; with 1 or more workers the input
is read while the model computes.

Time runs from the ``iter(loader)`` call, which starts the workers (their start-up lands in the first
step, which steady runtime and AU leave out); at the end the workers are joined, so their reads count."""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from jobs import interrupts
from jobs.data import loading
from jobs.data.datasets import Dataset
from jobs.frameworks.pytorch.loader.build import Loader
from jobs.workloads.alexnet.settings import TrainResult, TrainSettings, result, write_steps


def device_name(choice: str) -> str:
    """The torch device a run trains on: the first CUDA (or ROCm) GPU if there is one (or asked), else
    the CPU."""
    if choice == "gpu":
        if not torch.cuda.is_available():
            raise RuntimeError("workload.device=gpu but PyTorch sees no GPU")
        return "cuda:0"
    if choice == "cpu" or not torch.cuda.is_available():
        return "cpu"
    return "cuda:0"


class Rescale(nn.Module):
    """Keras's ``Rescaling(1 / 255)``: pixel values to [0, 1]."""

    def forward(self, x):
        return x * (1.0 / 255)


def _same(side: int, kernel: int, stride: int) -> nn.ZeroPad2d:
    """Keras's ``padding="same"`` for a strided convolution: out = ceil(side / stride), the odd pixel of
    padding on the right and bottom (torch's own ``padding="same"`` takes stride 1 only)."""
    total = max((math.ceil(side / stride) - 1) * stride + kernel - side, 0)
    return nn.ZeroPad2d((total // 2, total - total // 2, total // 2, total - total // 2))


def build_model(num_classes: int, side: int, width: float, seed: int) -> nn.Sequential:
    """AlexNet as ``training.build_model`` builds it in Keras: five convolutions, three max-poolings, three
    dense layers, ReLU; the same parameter count (58,699,238 at 224x224x3, width 1, 102 classes)."""
    torch.manual_seed(seed)

    def w(n: int) -> int:
        return max(4, int(round(n * width)))

    def pooled(n: int) -> int:
        return (n - 3) // 2 + 1

    flat = pooled(pooled(pooled(math.ceil(side / 4))))
    return nn.Sequential(
        Rescale(),
        _same(side, 11, 4),
        nn.Conv2d(3, w(96), 11, stride=4),
        nn.ReLU(),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(w(96), w(256), 5, padding="same"),
        nn.ReLU(),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(w(256), w(384), 3, padding="same"),
        nn.ReLU(),
        nn.Conv2d(w(384), w(384), 3, padding="same"),
        nn.ReLU(),
        nn.Conv2d(w(384), w(256), 3, padding="same"),
        nn.ReLU(),
        nn.MaxPool2d(3, 2),
        nn.Flatten(),
        nn.Linear(flat * flat * w(256), w(4096)),
        nn.ReLU(),
        nn.Linear(w(4096), w(4096)),
        nn.ReLU(),
        nn.Linear(w(4096), num_classes),
    )


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=1e-4)


def make_step(model: nn.Module, device: str, opt: torch.optim.Optimizer):
    """A training step on one NHWC batch (softmax cross-entropy on the class indices, Adam) returning the
    loss as a float: reading it back waits for the step to finish."""
    model.to(device).train()
    loss_fn = nn.CrossEntropyLoss()

    def step(x, y) -> float:
        x = x.to(device, non_blocking=True).permute(0, 3, 1, 2)  # NHWC -> NCHW, a channels-last view
        y = torch.as_tensor(y).to(device, non_blocking=True)  # the loader's labels: a numpy array
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def compute_only(step, x, y, device: str, steps: int, sample: int | None = None) -> float:
    """Seconds of ``steps`` training steps on one batch (``x``, ``y``) held in ``device``'s memory, as
    ``overlap.compute_only`` times them: one untimed step, then ``sample`` steps timed and their median
    scaled to ``steps`` (all ``steps`` timed without ``sample``)."""
    x, y = x.to(device), torch.as_tensor(y).to(device)
    interrupts.waiting(step, x, y)
    timed = steps if sample is None else max(1, min(sample, steps))
    times = []
    for _ in range(timed):
        t = time.perf_counter()
        interrupts.waiting(step, x, y)  # as the training loop's steps: a signal ends the wait
        times.append(time.perf_counter() - t)
    return sum(times) if sample is None else statistics.median(times) * steps


class Batches:
    """One run's batches from its DataLoader, as (images, indices, nbytes, labels) with the dropped images
    kept apart; ``close`` joins the workers (their reads then count in this process's)."""

    def __init__(self, ds: Dataset, s: TrainSettings, lo: Loader):
        from jobs.frameworks.pytorch.loader import build

        self.data, sampler = build.dataset(ds, s, decode=True)
        self.loader = build.loader(self.data, sampler, s, lo)
        self.dropped: list[int] = []
        self.it = None

    def __iter__(self):
        self.it = iter(self.loader)  # starts the workers
        return self

    def __next__(self):
        from jobs.frameworks.pytorch.loader import build

        try:
            batch = next(self.it)
        except RuntimeError as e:
            dead = build.died(e)
            if dead is None:
                raise
            raise dead from None
        self.dropped.extend(i for i in batch.dropped if i >= 0)
        return batch.images, batch.indices, batch.nbytes, batch.labels

    def close(self) -> None:
        from jobs.frameworks.pytorch.loader.build import shut_down

        if self.it is not None:
            shut_down(self.it, self.loader, self.data)
            self.it = None


def _train(batches: Batches, step, steps: int) -> dict:
    """Up to ``steps`` training steps, each timed as waiting for its batch and computing."""
    out = {"waits": [], "computes": [], "seen": [], "consumed": 0, "loss": float("nan")}
    t0 = time.perf_counter()
    out["t0"] = out["t_last_call"] = t0
    it = iter(batches)  # starts the DataLoader's workers: part of the first step's wait for data
    with interrupts.deferred():
        for _ in range(steps):
            interrupts.check()  # Ctrl-C and SIGTERM end the run here, between steps
            a = time.perf_counter() if out["waits"] else t0  # so the run is its waits and computes
            try:
                x, idx, nbytes, y = interrupts.waiting(next, it)
            except StopIteration:
                break
            b = time.perf_counter()
            out["t_last_call"] = b
            if x is not None:
                out["loss"] = interrupts.waiting(step, x, y)
                out["last"] = (x, y)
            out["computes"].append(time.perf_counter() - b)
            out["waits"].append(b - a)
            out["seen"].extend(idx.tolist())
            out["consumed"] += int(nbytes.sum())
        out["t_end"] = time.perf_counter()
    return out


def run_once(
    ds: Dataset, s: TrainSettings, lo: Loader, steps_csv: Path | None = None, mark=lambda name: None
) -> TrainResult:
    """Train for ``s.steps`` steps (or one epoch of full batches); as ``training.run_once``, with the
    DataLoader ``lo`` describes."""
    device = device_name(s.device)
    model = build_model(max(1, ds.num_classes), s.image_side, s.width, s.seed)
    step = make_step(model, device, optimizer(model))
    steps = s.steps or len(ds.files) // s.batch_size
    batches = Batches(ds, s, lo)
    rb0, rc0 = loading.read_counters()
    mark("start")
    try:
        loop = _train(batches, step, steps)
    except RuntimeError as e:  # PyTorch's SIGCHLD handler raises wherever the loop is, a step included
        from jobs.frameworks.pytorch.loader import build

        dead = build.died(e)
        if dead is None:
            raise
        raise dead from None
    finally:
        batches.close()
    mark("end")  # after the join: a worker's CPU time is in RUSAGE_CHILDREN only once it is waited for
    rb1, rc1 = loading.read_counters()
    waits, computes = loop["waits"], loop["computes"]
    if not waits:
        raise RuntimeError(f"the DataLoader delivered no batch out of {len(ds.files)} files")
    if steps_csv is not None:
        write_steps(steps_csv, waits, computes)
    drops = sorted(batches.dropped)
    solo = (
        compute_only(step, *loop["last"], device, len(waits) - 1, s.compute_only_steps)
        if s.compute_only_steps and len(waits) > 1 and "last" in loop
        else None
    )
    counters = ((rb0, rc0), (rb1, rc1))
    t0 = loop["t0"]
    return result(
        ds, loop, drops, counters, t0=t0, compute_only_s=solo, device=device, parameters=parameters(model)
    )


def input_only(ds: Dataset, s: TrainSettings, lo: Loader, steps: int) -> float:
    """Seconds to draw ``steps`` batches after the first from the run's DataLoader without training
    (``overlap.input_only``'s measure: the first batch, with the workers' start-up, is left out)."""
    batches = Batches(ds, s, lo)
    try:
        it = iter(batches)
        interrupts.waiting(next, it)
        t0 = time.perf_counter()
        for _ in range(steps):
            try:
                interrupts.waiting(next, it)  # Ctrl-C and SIGTERM end the wait for a batch
            except StopIteration:
                break
        return time.perf_counter() - t0
    finally:
        batches.close()


def run(ctx, s: TrainSettings, steps_csv: Path) -> TrainResult:
    """AlexNet's engine call (``Workload.engine``): one training run of the cell in ``ctx``, fed by the
    DataLoader its ``loader.*`` settings describe."""
    return run_once(ctx.ds, s, Loader.from_config(ctx.cfg), steps_csv=steps_csv, mark=ctx.mark)


def input_pass(ctx, s: TrainSettings, steps: int) -> float:
    """AlexNet's engine call for the cell's input-only time: ``steps`` batches through the DataLoader."""
    return input_only(ctx.ds, s, Loader.from_config(ctx.cfg), steps)
