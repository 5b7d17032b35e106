"""The sbatch script submitit submits, built without a live cluster (submitit's executor asks for srun
on PATH): what a dry run prints anywhere, and what ``submit.sbatch_script`` shows of an executor."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def sbatch_text(folder: Path, parameters: dict, count: int, python: str | None = None) -> str:
    """The sbatch script submitit submits for ``count`` jobs (an array when more than one) of an executor
    with ``parameters`` (what ``SlurmExecutor.update_parameters`` was given) and ``folder``.

    Wraps submitit's private script builder (``submitit.slurm.slurm._make_sbatch_string``) and the command
    its executor runs (``SlurmExecutor._submitit_command_str``), because building a ``SlurmExecutor`` asks
    for srun on PATH; tests/campaign/test_dry_run_elsewhere.py pins both against a real executor.
    """
    from submitit.slurm import slurm

    folder = Path(folder).expanduser().absolute()
    python = shlex.quote(sys.executable) if python is None else python
    command = " ".join([python, "-u -m submitit.core._submit", shlex.quote(str(folder))])
    array = {"map_count": count} if count > 1 else {}
    return slurm._make_sbatch_string(command=command, folder=folder, **parameters, **array)
