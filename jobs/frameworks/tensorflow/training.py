"""The Section III-B AlexNet mini-application with a per-step breakdown (NERSC TimeLogger style).

Every step is timed in two parts: waiting for the next batch (the iterator call) and computing
(forward, backward and Adam update, synchronised by reading the loss back). Runtime is the time
from the first iterator call to the end of the last step; the first step (graph tracing) is kept
apart.
"""

from __future__ import annotations

import time
from pathlib import Path

import keras  # with this module, not in build_model: never inside a run (a cell's: tfstart imports it first)

from jobs import interrupts
from jobs.data import loading
from jobs.data.datasets import Dataset
from jobs.frameworks.tensorflow import overlap, pipeline, sources
from jobs.workloads.alexnet.settings import TrainResult, TrainSettings, result, write_steps  # noqa: F401 - its API


def device_name(choice: str) -> str:
    """The TensorFlow device a run trains on: the first GPU if there is one (or asked), else the CPU."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    if choice == "gpu":
        if not gpus:
            raise RuntimeError("workload.device=gpu but TensorFlow sees no GPU")
        return gpus[0].name
    if choice == "cpu" or not gpus:
        return "/CPU:0"
    return gpus[0].name


def build_model(num_classes: int, side: int, width: float, seed: int):
    """AlexNet: five convolutions, three max-poolings, three dense layers, ReLU (58.7 M parameters at
    224x224x3, width 1, 102 classes; 62.4 M with 1,000)."""
    from keras import layers

    keras.utils.set_random_seed(seed)

    def w(n: int) -> int:
        return max(4, int(round(n * width)))

    return keras.Sequential(
        [
            keras.Input((side, side, 3)),
            layers.Rescaling(1.0 / 255),
            layers.Conv2D(w(96), 11, strides=4, padding="same", activation="relu"),
            layers.MaxPooling2D(3, 2),
            layers.Conv2D(w(256), 5, padding="same", activation="relu"),
            layers.MaxPooling2D(3, 2),
            layers.Conv2D(w(384), 3, padding="same", activation="relu"),
            layers.Conv2D(w(384), 3, padding="same", activation="relu"),
            layers.Conv2D(w(256), 3, padding="same", activation="relu"),
            layers.MaxPooling2D(3, 2),
            layers.Flatten(),
            layers.Dense(w(4096), activation="relu"),
            layers.Dense(w(4096), activation="relu"),
            layers.Dense(num_classes),
        ],
        name="alexnet",
    )


def make_step(model, device: str, opt=None):
    """A compiled training step (Adam, softmax cross-entropy on one-hot labels) returning the loss."""
    import tensorflow as tf

    from jobs.frameworks.tensorflow.adam import Adam

    opt = opt or Adam(model.trainable_variables)
    loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True)

    @tf.function(autograph=False)  # its loops and branches are Python's: traced once, unconverted
    def step(x, y):
        with tf.device(device):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def _train(it, step, steps: int, t0: float) -> dict:
    """Up to ``steps`` training steps from iterator ``it``, each timed as waiting for its batch and
    computing."""
    out = {
        "waits": [],
        "computes": [],
        "seen": [],
        "consumed": 0,
        "exhausted": False,
        "loss": float("nan"),
        "t_last_call": t0,
    }
    with interrupts.deferred():
        for _ in range(steps):
            interrupts.check()  # Ctrl-C and SIGTERM end the run here, between steps
            a = time.perf_counter()
            try:
                x, idx, nbytes, y = interrupts.waiting(next, it)
            except StopIteration:
                out["exhausted"] = True
                break
            b = time.perf_counter()
            out["t_last_call"] = b
            # reading the loss waits for the step to finish, GPU included
            out["loss"] = float(interrupts.waiting(step, x, y).numpy())
            out["last"] = (x, y)
            out["computes"].append(time.perf_counter() - b)
            out["waits"].append(b - a)
            out["seen"].extend(int(i) for i in idx.numpy())
            out["consumed"] += int(nbytes.numpy().sum())
        out["t_end"] = time.perf_counter()
    return out


def _iterator(ds: Dataset, s: TrainSettings, device: str):
    """The run's batches (one epoch of full batches unless ``s.steps``) and the steps to train."""
    import tensorflow as tf

    data = pipeline.build(ds, s, one_hot=True)
    per_epoch = len(ds.files) // s.batch_size
    if s.steps is None:
        data = data.take(per_epoch)  # one epoch of full batches, as the paper's 142 x 64 of 9,144
    if s.prefetch_to == "device":  # the paper's prefetch_to_device('/gpu:0'): the last transformation
        data = data.apply(tf.data.experimental.prefetch_to_device(device, s.prefetch))
    with tf.device("/CPU:0"):
        return iter(data), s.steps or per_epoch


def run_once(
    ds: Dataset, s: TrainSettings, steps_csv: Path | None = None, model=None, mark=lambda name: None
) -> TrainResult:
    """Train for ``s.steps`` steps (or one epoch); write every step's wait and compute to ``steps_csv``.
    ``mark(name)`` is called with "start" and "end" around the timed loop (the runner's usage window);
    after it, ``s.compute_only_steps`` steps on the last batch give the compute-only time."""
    device = device_name(s.device)
    model = model or build_model(max(1, ds.num_classes), s.image_side, s.width, s.seed)
    step = make_step(model, device)
    it, steps = _iterator(ds, s, device)
    rb0, rc0 = loading.read_counters()
    mark("start")
    t0 = time.perf_counter()
    loop = _train(it, step, steps, t0)
    mark("end")
    del it  # stop read-ahead before the counters are read
    sources.close_all()
    rb1, rc1 = loading.read_counters()
    waits, computes = loop["waits"], loop["computes"]
    # first: a failed read is the reason
    drops = pipeline.dropped(ds, loop["seen"], loop["exhausted"], s.seed, **s.order)
    if not waits:
        raise RuntimeError(f"the pipeline delivered no batch out of {len(ds.files)} files")
    if steps_csv is not None:
        write_steps(steps_csv, waits, computes)
    solo = (
        overlap.compute_only(step, *loop["last"], device, len(waits) - 1, s.compute_only_steps)
        if s.compute_only_steps and len(waits) > 1
        else None
    )
    counters = ((rb0, rc0), (rb1, rc1))
    return result(
        ds,
        loop,
        drops,
        counters,
        t0=t0,
        compute_only_s=solo,
        device=device,
        parameters=int(model.count_params()),
    )


def run(ctx, s: TrainSettings, steps_csv: Path) -> TrainResult:
    """AlexNet's engine call (``Workload.engine``): one training run of the cell in ``ctx``."""
    return run_once(ctx.ds, s, steps_csv=steps_csv, mark=ctx.mark)


def input_pass(ctx, s: TrainSettings, steps: int) -> float:
    """AlexNet's engine call for the cell's input-only time: ``steps`` batches through tf.data, no model."""
    return overlap.input_only(ctx.ds, s, steps)
