"""Where and how a cell's runs execute, typed once from its config: in this process, as local tasks,
as a Slurm job step inside the cell's job, or beside the cell's tf.data service. The runner asks
this instead of reading (and re-casting) platform settings itself."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Placement:
    nodes: int  # platform.nodes
    tasks_per_node: int  # platform.tasks_per_node
    cpus_per_task: int  # platform.cpus_per_task
    timeout_s: float  # platform.timeout_min: the longest a run's tasks may take
    in_slurm_job: bool  # platform=slurm and this process runs inside the cell's Slurm job
    service_workers: int  # input.service=true: the service's workers; 0 without the service
    silence_s: float = 60.0  # platform.task_silence_s: a task without a heartbeat this long has stopped

    @classmethod
    def of(cls, cfg) -> Placement:
        """The placement of the cell whose typed config (``jobs.schema.CampaignConf``) is ``cfg``."""
        plat, inp = cfg.platform, cfg.input
        return cls(
            nodes=plat.nodes,
            tasks_per_node=plat.tasks_per_node,
            cpus_per_task=plat.cpus_per_task,
            timeout_s=plat.timeout_min * 60,
            in_slurm_job=plat.kind == "slurm" and bool(os.environ.get("SLURM_JOB_ID")),
            service_workers=inp.workers if inp.service else 0,
            silence_s=plat.task_silence_s,
        )

    @property
    def tasks(self) -> int:
        """Processes one run is (the service's consumer is one; its workers are the cell's other tasks)."""
        return 1 if self.service_workers else self.nodes * self.tasks_per_node

    @property
    def per_node(self) -> int:
        """Tasks of one run on each node."""
        return self.tasks_per_node if self.tasks > 1 else 1

    def task_step(self, folder: Path) -> list[str] | None:
        """The Slurm job step of a run's tasks (None: local processes)."""
        from jobs.execution import tasks

        return (
            tasks.srun_command(self.nodes, self.tasks_per_node, self.cpus_per_task, folder)
            if self.in_slurm_job
            else None
        )

    def service_step(self) -> tuple[int, int] | None:
        """(nodes, CPUs per task) of the service workers' Slurm job step (None: local processes)."""
        return (self.nodes, self.cpus_per_task) if self.in_slurm_job else None
