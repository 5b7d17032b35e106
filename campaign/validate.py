"""Checks that types cannot express: every check of a cell's settings, in one order, each in the module
of the section it checks (``campaign/checks/``); each failure is one line naming the setting.

The checks read a planned cell's typed config (``jobs.cell.Cell``), so that planning thousands of cells
costs no DictConfig traversal; a memo shared across one planning pass keeps a storage root from being
probed, or a dataset folder listed, once per cell.
"""

from __future__ import annotations

from campaign.checks import Checking, dataset, framework, inputs, platform, settings, tiers, workload
from campaign.errors import ConfigError
from jobs.storage.roots import storage_root

__all__ = ["ConfigError", "check", "storage_root"]

# in the order a user meets them: what the site needs, the cell's own numbers, its workload and framework,
# its tiers, its dataset and what the tasks and batches make of it, then the machine it runs on
CHECKS = (
    tiers.kinds,
    platform.account,
    settings.threads,
    settings.bounds,
    workload.its_own,
    dataset.samples,
    framework.reads_the_workload,
    workload.prefetch_to,
    workload.trace,
    tiers.service_is_the_presets,
    tiers.its_kinds_own,
    tiers.apart,
    tiers.modelled,
    settings.shuffle_buffer,
    dataset.images,
    platform.tasks,
    workload.batches,
    tiers.data_where_it_lies,
    tiers.space,
    inputs.service,
    platform.machine,
    settings.drop_caches,
)


def check(cell, memo: dict | None = None) -> None:
    """Raise ConfigError for the first setting of a cell (``jobs.cell.Cell``) that cannot run. ``memo``:
    a dict shared across one planning pass, so file-system checks run once per distinct tier and dataset."""
    checking = Checking(cell, memo)
    for one in CHECKS:
        one(checking)
