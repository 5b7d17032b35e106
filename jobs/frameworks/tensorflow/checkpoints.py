"""Checkpoints of the AlexNet mini-app through TensorFlow (``framework=tensorflow``): the model and Adam
written with ``tf.train.CheckpointManager`` (synchronous) or TensorFlow's own asynchronous checkpoint
(``checkpoint.mode=async``), into the run folders of ``jobs.workloads.checkpoint.saving``'s machinery,
which flushes, drains and retains them (``ENGINE``); restored cold with ``tf.train.Checkpoint.read`` into a
new model and optimizer (``fresh``)."""

from __future__ import annotations

import logging
from pathlib import Path

from jobs.data.datasets import Dataset
from jobs.frameworks.tensorflow import pipeline, sources
from jobs.workloads.alexnet.settings import TrainSettings
from jobs.workloads.checkpoint import saving, store

logging.getLogger("absl").setLevel(logging.WARNING)  # TF logs every checkpoint shard at INFO


class TensorFlowSaver(saving.Saver):
    """``saving.Saver`` writing ``tf.train.Checkpoint(model, optimizer)``: through a ``CheckpointManager``
    when synchronous, one ``Checkpoint`` object per save when asynchronous."""

    def _open(self) -> None:
        import tensorflow as tf

        self.manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(model=self.model, optimizer=self.opt),
            str(self.folder),
            max_to_keep=None,
            checkpoint_name=self.s.tag,
        )
        self.options = (
            tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True)
            if self.s.mode == "async"
            else None
        )

    def _write(self, step: int) -> Path:
        return Path(self.manager.save(checkpoint_number=step))

    def _weights(self) -> list:
        return [v.numpy().copy() for v in self.model.weights]

    def _write_async(self, step: int):
        import tensorflow as tf

        # one Checkpoint object per save: Keras 3 variables break a second async save on the same object
        obj = tf.train.Checkpoint(model=self.model, optimizer=self.opt)
        return obj, Path(obj.write(str(self.folder / f"{self.s.tag}-{step}"), options=self.options))

    def _settle(self, handle) -> None:
        handle.sync()


def _trainer(ds: Dataset, t: TrainSettings):
    """The mini-app's device, model, optimizer, step and input iterator (``t``: the training settings)."""
    import tensorflow as tf

    from jobs.frameworks.tensorflow import training as alexnet
    from jobs.frameworks.tensorflow.adam import Adam

    device = alexnet.device_name(t.device)
    model = alexnet.build_model(max(1, ds.num_classes), t.image_side, t.width, t.seed)
    opt = Adam(model.trainable_variables)
    data = pipeline.build(ds, t, one_hot=True)
    with tf.device("/CPU:0"):
        it = iter(data)
    return device, model, opt, alexnet.make_step(model, device, opt), it


def _dropped(it, ds: Dataset, t: TrainSettings, run: dict) -> int:
    """The images tf.data's ``ignore_errors`` dropped among those the run reached, judged as the other
    workloads' runs judge theirs (``pipeline.dropped``): a failed read fails the run (ReadFailed)."""
    return len(pipeline.dropped(ds, run["seen"], run["exhausted"], t.seed, **t.order))


ENGINE = saving.Engine(
    _trainer,
    TensorFlowSaver,
    lambda model: int(model.count_params()),
    close=sources.close_all,  # the HDF5 files the pipeline opened (dataset.format=hdf5)
    dropped=_dropped,
)


def engine(cfg) -> saving.Engine:
    """The checkpoint workload's engine call (``Workload.engine``): TensorFlow's trainer and saver."""
    return ENGINE


def _model(shape: dict):
    """A new AlexNet and Adam (``shape``: num_classes, side, width, seed of the model)."""
    from jobs.frameworks.tensorflow import training as alexnet
    from jobs.frameworks.tensorflow.adam import Adam

    model = alexnet.build_model(shape["num_classes"], shape["side"], shape["width"], shape["seed"] + 1)
    return model, Adam(model.trainable_variables)


def fresh(shape: dict):
    """A new AlexNet and Adam (``shape``: num_classes, side, width, seed of the model); returns the
    function that restores a checkpoint prefix into them and gives back their weights."""
    import tensorflow as tf

    model, opt = _model(shape)
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)

    def load(prefix: Path) -> list:
        ckpt.read(str(prefix)).assert_existing_objects_matched()
        return [v.numpy() for v in model.weights]  # every value in memory: the restore has ended

    return load


def restore_latest(
    folder: Path, tag: str, num_classes: int, side: int, width: float, seed: int, prefix: Path | None = None
):
    """Rebuild the model and optimizer and restore the newest complete checkpoint of ``folder``
    (or ``prefix``); returns (model, optimizer, prefix)."""
    import tensorflow as tf

    done = [prefix] if prefix is not None else store.complete(folder, tag, checksums=True)
    if not done:
        raise FileNotFoundError(f"no complete checkpoint of {tag} in {folder}")
    model, opt = _model({"num_classes": num_classes, "side": side, "width": width, "seed": seed})
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
    ckpt.read(str(done[-1])).expect_partial()
    return model, opt, done[-1]
