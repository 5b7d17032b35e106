"""Platform settings -> submitit's Slurm parameters, checked so that no value can add an sbatch
directive or run shell by accident."""

from __future__ import annotations

import re

from campaign.errors import ConfigError

# Values that become "#SBATCH --key=value" lines: names, lists, constraint expressions; no spaces,
# no newlines, no shell (; ` $ ( ) < > quotes backslash).
_DIRECTIVE_VALUE = re.compile(r"^[A-Za-z0-9_.,:+@%&|=\-\[\]/*!]+$")
DIRECTIVE_KEYS = ("partition", "account", "qos", "constraint")


def check(platform) -> None:
    """Raise ConfigError naming the first platform setting that cannot go into an sbatch script."""
    for key in DIRECTIVE_KEYS:
        value = getattr(platform, key)
        if value is None:
            continue
        if not _DIRECTIVE_VALUE.match(str(value)):
            bad = next((c for c in str(value) if not _DIRECTIVE_VALUE.match(c)), "")
            raise ConfigError(
                f"platform.{key}={value!r} is not a plain Slurm {key} name (it holds {bad!r}); "
                "newlines, spaces, ';', quotes, backticks and $ cannot go into an #SBATCH line"
            )
    for i, line in enumerate(platform.setup or []):
        text = str(line)
        if "\n" in text or "\r" in text:
            raise ConfigError(f"platform.setup[{i}] holds a line break: give one shell line per entry")
        if text.lstrip().startswith("#SBATCH"):
            raise ConfigError(
                f"platform.setup[{i}] is an #SBATCH directive: use the platform settings for those"
            )
    python = platform.python
    if python is not None and (not str(python).strip() or any(ord(c) < 32 for c in str(python))):
        raise ConfigError(
            f"platform.python={python!r} must be one path to the nodes' Python, without line breaks"
        )
    cores = platform.cores_per_node
    per_node = platform.tasks_per_node
    if cores is not None and per_node * platform.cpus_per_task > cores:
        raise ConfigError(
            f"platform.tasks_per_node={per_node} x platform.cpus_per_task={platform.cpus_per_task} asks for "
            f"{per_node * platform.cpus_per_task} CPUs on a node of platform.cores_per_node={cores}: set "
            f"platform.cpus_per_task={max(1, cores // per_node)}"
        )
    after = platform.after
    if after is not None and not str(after).isdigit():
        raise ConfigError(f"platform.after={after} must be a Slurm job id (digits: an array's id), or null")


# The sweep folder becomes submitit's folder, named in "#SBATCH --output=<folder>/%j_%t_log.out" lines:
# no line breaks or other control characters, no white space, no '%' (Slurm's filename patterns).
_FOLDER = re.compile(r"^[^\x00-\x20\x7f%]+$")


def check_folder(sweep_dir: str) -> None:
    """Raise ConfigError when the sweep folder cannot go into an sbatch script as it is."""
    if not _FOLDER.match(sweep_dir):
        bad = next((c for c in sweep_dir if not _FOLDER.match(c)), "")
        raise ConfigError(
            f"hydra.sweep.dir={sweep_dir!r} holds {bad!r}: with platform kind slurm the folder goes "
            "into #SBATCH lines, so it cannot hold white space, control characters or '%'"
        )


def executor_parameters(platform, job_name: str, nodes: int = 1, tasks_per_node: int = 1) -> dict:
    """Keyword arguments for ``submitit.SlurmExecutor.update_parameters``. A multi-task cell's job
    holds ``nodes`` × ``tasks_per_node`` tasks; submitit starts the cell's controller as a one-task
    step in it, and the controller starts each run's tasks as a step of their own (jobs.execution.tasks)."""
    params: dict = {
        "job_name": job_name,
        "time": int(platform.timeout_min),
        "cpus_per_task": int(platform.cpus_per_task),
        "mem": f"{int(platform.mem_gb * 1024)}M",
        "array_parallelism": int(platform.array_parallelism),
        "setup": [str(s) for s in platform.setup],
        "stderr_to_stdout": True,
    }
    for key in DIRECTIVE_KEYS:
        if getattr(platform, key):
            params[key] = str(getattr(platform, key))
    if platform.gpus_per_node:
        params["gpus_per_node"] = int(platform.gpus_per_node)
    if platform.exclusive:
        params["exclusive"] = True
    if nodes * tasks_per_node > 1:
        params.update(nodes=nodes, ntasks_per_node=tasks_per_node, srun_args=["--nodes=1", "--ntasks=1"])
    return params
