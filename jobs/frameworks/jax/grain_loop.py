"""The emulated accelerator through JAX's Grain (``framework=jax``): the same step as ``loop`` (take the
next batch, sleep the accelerator's compute time for it) fed by a ``grain.DataLoader`` whose worker
processes load ahead while the step sleeps (``jobs.frameworks.jax.grain_loader``: one read thread a
worker); the steps are cut here from the samples the workers deliver, each worker's short last batch
joined to the others', so an epoch reads every full step as the other frameworks' do.

Time runs from the ``iter(loader)`` call, which starts the workers: the first step's wait holds their
start-up, and AU leaves it out. At the end the workers are joined, so their CPU time and reads count in the
run's."""

from __future__ import annotations

import time

import numpy as np

from jobs import interrupts
from jobs.data import loading
from jobs.data.datasets import Dataset
from jobs.frameworks.jax import grain_loader
from jobs.workloads.emulated.steps import EmulatedSettings, result


def run_once(ds: Dataset, s: EmulatedSettings, workers: int, mark=lambda name: None) -> dict:
    """One epoch of full batches (the dataset or the task's shard), each followed by the step's sleep."""
    steps = len(ds.files) // s.batch_size
    if steps < 2:
        raise RuntimeError(
            f"{len(ds.files)} images make {steps} batch(es) of {s.batch_size}: AU leaves the first step "
            "out, so a run needs at least two (more images, or fewer accelerators)"
        )
    # every worker batches the samples it reads and leaves its own short batch: up to workers x (batch - 1)
    # samples of an epoch never read. The steps are cut here instead, from what the workers deliver, so an
    # epoch reads every full step's samples, as the other frameworks' do
    dl = grain_loader.loader(ds, s, workers, decode=ds.holds_images)
    waits, computes, seen, drops, consumed = [], [], [], [], 0
    pending: list[tuple[int, bool, int]] = []  # (index, usable, bytes) delivered, not yet in a step
    rb0, rc0 = loading.read_counters()
    mark("start")
    t0 = time.perf_counter()
    it = iter(dl)
    try:
        with interrupts.deferred():
            for _ in range(steps):
                interrupts.check()  # Ctrl-C and SIGTERM end the run here, between steps
                a = time.perf_counter()
                if not _fill(it, pending, s.batch_size):
                    break
                step, pending[:] = pending[: s.batch_size], pending[s.batch_size :]
                b = time.perf_counter()
                time.sleep(s.step_time_s)  # the accelerator computes; the workers keep reading meanwhile
                computes.append(time.perf_counter() - b)
                waits.append(b - a)
                seen.extend(i for i, ok, _ in step if ok)
                drops.extend(i for i, ok, _ in step if not ok)
                consumed += sum(n for _, ok, n in step if ok)
            t_end = time.perf_counter()
    finally:
        grain_loader.shut_down(it)  # joined: the workers' reads are in this process's counters now
    mark("end")  # after the join: a worker's CPU time is in RUSAGE_CHILDREN only once it is waited for
    rb1, rc1 = loading.read_counters()
    if len(waits) < 2:
        raise RuntimeError(f"Grain delivered {len(waits)} batch(es) out of {len(ds.files)} files")
    drops = sorted(set(drops))
    steps = {
        "waits": waits,
        "computes": computes,
        "seen": seen,
        "consumed": consumed,
        "t0": t0,
        "t_end": t_end,
    }
    return result(ds, s, steps, drops, ((rb0, rc0), (rb1, rc1)))


def _fill(it, pending: list, size: int) -> bool:
    """Take the workers' batches from ``it`` into ``pending`` until it holds ``size`` samples; False when the
    epoch ended first."""
    while len(pending) < size:
        try:
            batch = interrupts.waiting(next, it)
        except StopIteration:
            return False
        ok, index = np.asarray(batch["ok"], bool), np.asarray(batch["index"])
        pending.extend(zip(index.tolist(), ok.tolist(), np.asarray(batch["nbytes"]).tolist()))
        del batch  # its shared memory goes back before the workers end
    return True


def run(ctx, s: EmulatedSettings) -> dict:
    """The emulated accelerator's engine call (``Workload.engine``): one run of the cell in ``ctx``."""
    from jobs import frameworks

    return run_once(ctx.ds, s, frameworks.workers(ctx.cfg), mark=ctx.mark)
