"""The cell's framework reads its workload (it has an engine for it), with what this machine has."""

from __future__ import annotations

from campaign.checks import Checking
from jobs import frameworks
from jobs.observe import accelerator
from jobs.storage import roots


def reads_the_workload(c: Checking) -> None:
    gpu = not roots.runs_here(c.cfg) or accelerator.gpu_driver()
    frameworks.check(c.cfg, c.workload.engines, gpu=gpu)
