"""Checkpoints of the AlexNet mini-app through PyTorch (``framework=pytorch``): the model's and Adam's
``state_dict()`` written with ``torch.save`` as one file, ``<tag>-<step>.pt``, into the same run folders
on the same tiers as TensorFlow's checkpoints, then flushed, given a manifest, drained and retained by
``saving``'s machinery (``ENGINE``); restored cold with ``torch.load`` into a new model and optimizer
(``fresh``). Saves are synchronous: ``checkpoint.mode=async`` is TensorFlow's asynchronous checkpoint."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch

from jobs.frameworks.pytorch import torch_training
from jobs.workloads.checkpoint import saving

SUFFIX = ".pt"


def tensors(model, opt) -> list:
    """The values a restore must give back, as numpy copies: every tensor of the model's state, then
    Adam's (step, first and second moments) per parameter."""
    out = [t.detach().cpu().numpy().copy() for t in model.state_dict().values()]
    state = opt.state_dict()["state"]
    for k in sorted(state):
        out.extend(torch.as_tensor(v).detach().cpu().numpy().copy() for _, v in sorted(state[k].items()))
    return out


class TorchSaver(saving.Saver):
    """``saving.Saver`` writing ``torch.save({"model", "optimizer", "step"})`` for each checkpoint."""

    def _open(self) -> None:
        pass

    def _write(self, step: int) -> Path:
        prefix = self.folder / f"{self.s.tag}-{step}"
        state = {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "step": step}
        torch.save(state, prefix.parent / (prefix.name + SUFFIX))
        return prefix

    def _weights(self) -> list:
        return tensors(self.model, self.opt)


def _trainer(ds, t, lo):
    """The mini-app's device, model, optimizer, step and batches (``saving.Engine.trainer``), read by the
    DataLoader ``lo`` describes."""
    device = torch_training.device_name(t.device)
    model = torch_training.build_model(max(1, ds.num_classes), t.image_side, t.width, t.seed)
    opt = torch_training.optimizer(model)
    step = torch_training.make_step(model, device, opt)
    return device, model, opt, step, iter(torch_training.Batches(ds, t, lo))


def engine(cfg) -> saving.Engine:
    """The checkpoint workload's engine call (``Workload.engine``): the PyTorch engine of a run fed by the
    DataLoader its ``loader.*`` settings describe; ``end`` joins the DataLoader's workers."""
    from jobs.frameworks.pytorch.loader.build import Loader

    lo = Loader.from_config(cfg)
    return saving.Engine(
        partial(_trainer, lo=lo),
        TorchSaver,
        torch_training.parameters,
        end=_close,
        dropped=lambda batches, *_: len(batches.dropped),  # a failed read raised in its worker
    )


def _close(batches) -> None:
    batches.close()


def fresh(shape: dict):
    """A new AlexNet and Adam (``shape``: num_classes, side, width, seed of the model); returns the
    function that restores a checkpoint prefix into them (``torch.load``) and gives back their values."""
    model = torch_training.build_model(shape["num_classes"], shape["side"], shape["width"], shape["seed"] + 1)
    opt = torch_training.optimizer(model)

    def load(prefix: Path) -> list:
        state = torch.load(prefix.parent / (prefix.name + SUFFIX), map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        return tensors(model, opt)

    return load
