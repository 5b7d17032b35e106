"""The node a process runs on, as the cluster knows it: its name, the address other nodes reach it by,
the kernel whose counters it reads, and what Slurm says of a node.

Processes on different nodes find each other by these (the tf.data service's dispatcher and workers),
and a multi-node run keeps its counters per node by them. On Slurm the name is the node's Slurm name
(``SLURMD_NODENAME``) and the address is the one ``slurmctld`` itself uses (the node's ``NodeAddr``), so
nodes reach each other wherever Slurm reaches them, whether or not their host names resolve; off
Slurm both are the host name. Two nodes on one kernel (containers or namespaces on one machine) share
its block-device counters: ``kernel()`` tells them apart, so those counters are taken once per kernel.
"""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys


def name() -> str:
    """This node's name: Slurm's for it inside a job, else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


@functools.cache
def address() -> str:
    """The address other nodes reach this one by: the node's NodeAddr in Slurm (inside a job), else the
    host name."""
    node = os.environ.get("SLURMD_NODENAME")
    if node:
        try:
            out = subprocess.run(
                ["scontrol", "show", "node", node, "-o"], capture_output=True, text=True, timeout=30
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        for field in out.split():
            if field.startswith("NodeAddr=") and field != "NodeAddr=":
                return field.split("=", 1)[1]
    return socket.gethostname()


@functools.cache
def kernel() -> str:
    """The running kernel's boot id: equal on two nodes that share a kernel (and its /proc/diskstats)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return socket.gethostname()


def slurm_state(node: str) -> str | None:
    """What Slurm says of ``node`` now (``idle``, ``mixed*``: a trailing * means not responding), or None."""
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-n", node, "-o", "%T"], capture_output=True, text=True, timeout=10
        ).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[0] if out else None


def srun_failure(err_path) -> tuple[str, str, str] | None:
    """(node, task ranks, how) from the first ``srun: error: <node>: task(s) <k>: <how>`` line of a job
    step's stderr, or None: srun names the node and the task that ended first."""
    import re

    try:
        with open(err_path, errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"^srun: error: (\S+): tasks? ([\d,-]+): (.+)$", text, re.M)
    return (m.group(1), m.group(2), m.group(3).strip()) if m else None


def srun_step(
    module: str,
    *args: str,
    nodes: int,
    tasks: int,
    cpus_per_task: int,
    per_node: int | None = None,
    kill_on_bad_exit: bool = True,
) -> list[str]:
    """The command line of one job step inside the cell's Slurm allocation running ``python -m module args``
    in ``tasks`` tasks over ``nodes`` nodes (``per_node`` each, where given), ``cpus_per_task`` CPUs each:
    ``--overlap`` (the controller's own one-task step keeps its CPUs), this process's environment
    (``--export=ALL``: an object store's keys in it, whatever the job was given), no memory of its own
    (``--mem=0``: the job's), output unbuffered, and ``--kill-on-bad-exit`` (a failing task ends the
    others) unless asked not to. The tasks, the tf.data service's workers and the store's servers on every
    node are each one such step."""
    return [
        "srun",
        "--overlap",
        f"--nodes={nodes}",
        f"--ntasks={tasks}",
        *([f"--ntasks-per-node={per_node}"] if per_node else []),
        f"--cpus-per-task={cpus_per_task}",
        "--export=ALL",
        "--mem=0",
        *(["--kill-on-bad-exit=1"] if kill_on_bad_exit else []),
        "--unbuffered",
        sys.executable,
        "-m",
        module,
        *args,
    ]
