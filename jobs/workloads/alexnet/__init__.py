"""Section III-B AlexNet mini-app (Figs. 6-8): the input pipeline feeding Adam training steps, each
step timed as waiting for data and computing, with the device's I/O traced."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.errors import ConfigError
from jobs.metrics import of
from jobs.workloads import PAPER_LAYOUT, Figure, RunContext, Workload, register
from jobs.workloads.schema import Device, InputPipelineConf


@dataclass
class AlexNetConf(InputPipelineConf):
    width: float = 1.0  # multiplier of filters and dense units (1.0 = the paper's, 58.7 M params)
    steps: int | None = None  # training steps per run; null = one epoch (images // batch_size)
    device: Device = Device.auto  # where the model trains
    trace_interval_s: float = 1.0  # device I/O sampling interval, s (0.05 to 10)


def check_alexnet(cfg) -> None:
    """AlexNet's shape limits (shared with the checkpoint workload)."""
    if cfg.workload.image_side < 64:
        raise ConfigError(f"workload.image_side={cfg.workload.image_side} is too small for AlexNet's three poolings (64 or more)")
    if cfg.workload.width <= 0:
        raise ConfigError(f"workload.width={cfg.workload.width} must be positive (1.0 = the paper's AlexNet)")
    if not 0.05 <= cfg.workload.trace_interval_s <= 10:
        raise ConfigError(f"workload.trace_interval_s={cfg.workload.trace_interval_s} must be between 0.05 and 10 seconds")


@register
class AlexNet(Workload):
    name = "alexnet"
    schema = AlexNetConf
    metrics = of("steps", "runtime_s", "steady_runtime_s", "data_wait_s", "compute_s", "first_step_s", "images_per_s", "mb_per_s",
                 "bytes_read_syscall")
    record_keys = ("dropped_files", "first_step_wait_s", "device", "parameters", "final_loss", "trace_file",
                   "trace_device", "steps_file")
    packages = ("tensorflow", "keras")
    figures = (
        Figure("fig6", "analysis.training:fig6", "Fig. 6: AlexNet runtime against map threads, prefetch on and off",
               PAPER_LAYOUT, order=6),
        Figure("fig7", "analysis.training:fig7", "Fig. 7: AlexNet runtime against batch size", PAPER_LAYOUT, order=7),
        Figure("fig8", "analysis.training:fig8", "Fig. 8: device reads during AlexNet training", order=8),
    )

    def check(self, cfg) -> None:
        check_alexnet(cfg)

    def run_once(self, ctx: RunContext) -> dict:
        from jobs.observe import trace
        from jobs.workloads.alexnet import training as alexnet

        cfg = ctx.cfg
        settings = alexnet.TrainSettings.from_config(cfg, ctx.seed, width=float(cfg.workload.width),
                                                     steps=cfg.workload.steps, device=str(cfg.workload.device))
        tracer = trace.Tracer(ctx.disk, float(cfg.workload.trace_interval_s)).start()
        try:
            result = alexnet.run_once(ctx.ds, settings, steps_csv=ctx.job_dir / f"steps_{ctx.tag}.csv").as_dict()
        finally:
            tracer.stop()
        tracer.mark(trace.FIRST, result.pop("t_first_iterator_call"))
        tracer.mark(trace.LAST, result.pop("t_last_iterator_call"))
        tracer.write(ctx.job_dir / f"trace_{ctx.tag}.csv")
        result["trace_file"] = f"trace_{ctx.tag}.csv"
        result["trace_device"] = ctx.disk or "all disks"
        result["steps_file"] = f"steps_{ctx.tag}.csv"
        return result

    def describe(self, result: dict) -> str:
        return (f"{result['runtime_s']:.2f} s runtime ({result['data_wait_s']:.2f} s waiting for data, "
                f"{result['compute_s']:.2f} s computing, first step {result['first_step_s']:.2f} s) on {result['device']}")
