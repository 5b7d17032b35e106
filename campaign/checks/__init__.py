"""The checks of a cell's settings that types cannot express, one module per section of its config;
``campaign/validate.py`` runs them in order, and each failure is one line naming the setting.

- ``settings``: the cell's own numbers and choices: threads, every declared bound, the shuffle's buffer,
  drop_caches;
- ``platform``: where and how the cell runs: the account, its tasks and nodes, the service's workers, the
  lock folder, Slurm's fields, the memory limit;
- ``workload``: the workload's own checks and what it asks of the pipeline: batches prefetched to a
  device, traced runs, enough batches a run;
- ``framework``: the framework reads that workload, on this machine;
- ``tiers``: the tiers' roots, where the data and a stage lie against each other, an object store's
  needs, the space a synthetic set takes;
- ``dataset``: its images (listed once per planning pass), and arrays read only as arrays;
- ``inputs``: the tf.data service.

Each check takes the cell being checked (``Checking``): its typed config, its workload's declaration, the
images a run reads (counted by the dataset's check), and the memo shared across one planning pass.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from campaign.errors import ConfigError


@dataclass
class Checking:
    """A cell being checked: a ``jobs.cell.Cell`` and the memo of its planning pass (a dict shared by the
    pass's cells, so that file-system checks run once per distinct tier and dataset; None: no pass)."""

    cell: Any
    memo: dict | None = None
    # images a run reads (None: the workload reads no dataset), counted by ``dataset.images`` for the checks
    # after it
    images: int | None = None

    @property
    def cfg(self):
        return self.cell.config

    @functools.cached_property
    def workload(self):
        """The declaration of the cell's workload (``jobs.workloads.Workload``)."""
        from jobs import workloads

        try:
            return workloads.get(self.cfg.workload.kind)
        except KeyError as e:
            raise ConfigError(e.args[0]) from None
