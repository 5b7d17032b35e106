"""A toy workload: everything a new workload takes besides its preset (``conf/workload/toy_sleep.yaml``).

It sleeps ``workload.sleep_s`` per run and reports how long it slept. It lives in the namespace
package ``iocampaign_workloads``, which the campaign imports from anywhere on ``sys.path``.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from campaign.errors import ConfigError
from jobs.metrics import Metric
from jobs.schema import WorkloadConf
from jobs.workloads import Figure, RunContext, Workload, register


@dataclass
class ToySleepConf(WorkloadConf):
    sleep_s: float = 0.01  # how long one run sleeps, s
    # the run gets SIGINT and fails as TensorFlow's C++ bindings do then (a RuntimeError, not the interrupt)
    signal_as_error: bool = False


@register
class ToySleep(Workload):
    name = "toy_sleep"
    schema = ToySleepConf
    metrics = (Metric("slept_s", "s", "", "Toy: time one run slept"),)
    needs_dataset = False
    in_tensorflow = False  # it only sleeps: a signal is raised at once
    figures = (
        Figure("toy_slept", "iocampaign_workloads.toy_sleep:draw_slept", "Toy: time slept per run", order=50),
    )

    def check(self, cfg) -> None:
        if cfg.workload.sleep_s < 0:
            raise ConfigError(f"workload.sleep_s={cfg.workload.sleep_s} must not be negative")

    def run_once(self, ctx: RunContext) -> dict:
        t0 = time.perf_counter()
        time.sleep(ctx.cfg.workload.sleep_s)
        if ctx.cfg.workload.signal_as_error:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the handler raises here
            except KeyboardInterrupt:
                raise RuntimeError(
                    "pybind11::error_already_set: MISMATCH of original and normalized active exception "
                    "types: ORIGINAL InvalidArgumentError REPLACED BY KeyboardInterrupt"
                ) from None
        return {
            "slept_s": time.perf_counter() - t0,
            "images": 0,
            "images_dropped": 0,
            "bytes_consumed": 0,
            "bytes_read_device": None,
        }


def draw_slept(rows, folder, figure) -> list:
    """The toy's figure: the time each run slept, one bar per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis.figures import plotting

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(range(len(rows)), rows["slept_s"], color="0.6", edgecolor="black")
    ax.set_xlabel("run")
    ax.set_ylabel("slept (s)")
    ax.set_title(figure.title, fontsize=9)
    return plotting.save(fig, folder / figure.key)
