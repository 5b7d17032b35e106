"""Section III-B AlexNet mini-app (Figs. 6-8): the input pipeline feeding Adam training steps, each
step timed as waiting for data and computing, with the device's I/O traced.

Two engines (``framework=``): TensorFlow and Keras (``training``), and PyTorch (``torch_training``: the
same layers in ``torch.nn``, fed by a DataLoader). Prefetch differs between them: tf.data's
``prefetch=0`` reads each batch with the map threads only when the step asks for it, ``prefetch=1`` has
the next one read while the step computes. A DataLoader's workers always load ahead, so
``framework=pytorch`` takes no ``prefetch``; its run *without prefetch* is ``loader.num_workers=0`` (the
training process reads and decodes every batch itself, between its steps), and with workers
(``loader.num_workers`` or ``threads``) it reads ahead ``loader.prefetch_factor`` batches each."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.errors import ConfigError
from jobs.frameworks import PAPERS
from jobs.metrics import of
from jobs.schema import Device, InputPipelineConf
from jobs.workloads import PAPER_LAYOUT, Figure, RunContext, Workload, register

# the paper's figures of its own framework's cells (prefetch on and off is tf.data's transformation)
PAPERS_LAYOUT = (*PAPER_LAYOUT, ("framework", PAPERS))


@dataclass
class AlexNetConf(InputPipelineConf):
    width: float = 1.0  # multiplier of filters and dense units (1.0 = the paper's, 58.7 M params)
    steps: int | None = None  # training steps per run; null = one epoch (images // batch_size)
    device: Device = Device.auto  # where the model trains
    trace_interval_s: float = 1.0  # device I/O sampling interval, s (0.05 to 10)
    # steps timed on one batch held in the device's memory after each run (0: none)
    compute_only_steps: int = 5
    input_only: bool = True  # drain the pipeline without training once per cell, after its runs (overlap)


def check_alexnet(cfg) -> None:
    """AlexNet's shape limits (shared with the checkpoint workload)."""
    from jobs.observe import accelerator
    from jobs.storage import roots

    if cfg.workload.image_side < 64:
        side = cfg.workload.image_side
        raise ConfigError(
            f"workload.image_side={side} is too small for AlexNet's three poolings (64 or more)"
        )
    if cfg.workload.width <= 0:
        raise ConfigError(f"workload.width={cfg.workload.width} must be positive (1.0 = the paper's AlexNet)")
    if cfg.workload.compute_only_steps < 0:
        raise ConfigError(
            f"workload.compute_only_steps={cfg.workload.compute_only_steps} must be 0 (none) or more"
        )
    if not 0.05 <= cfg.workload.trace_interval_s <= 10:
        raise ConfigError(
            f"workload.trace_interval_s={cfg.workload.trace_interval_s} must be between 0.05 and 10 seconds"
        )
    if cfg.workload.device == "gpu" and roots.runs_here(cfg) and not accelerator.gpu_driver():
        raise ConfigError(
            "workload.device=gpu: this machine has no GPU (no NVIDIA or ROCm driver); "
            "use workload.device=auto (a GPU when there is one) or cpu"
        )


def training_parallelism(cfg, result: dict | None) -> int | None:
    """Cores a training run may keep busy: its map threads, plus the training thread when the model
    trains on the CPU (None with autotune: any core)."""
    from jobs import frameworks
    from jobs.schema import threads_value

    on_cpu = "CPU" in str((result or {}).get("device") or "CPU").upper()
    if frameworks.of(cfg).readers == "workers":  # the worker processes (0: the training process reads)
        return max(1, frameworks.workers(cfg) + on_cpu)
    threads = threads_value(cfg.threads)
    if not isinstance(threads, int) or threads <= 0:
        return None
    return threads + on_cpu


def _settings(ctx: RunContext):
    from jobs.workloads.alexnet.settings import TrainSettings

    w = ctx.cfg.workload
    return TrainSettings.from_config(
        ctx.cfg,
        ctx.seed,
        width=w.width,
        steps=w.steps,
        device=w.device,
        compute_only_steps=w.compute_only_steps,
    )


@register
class AlexNet(Workload):
    name = "alexnet"
    schema = AlexNetConf
    metrics = of(
        "steps",
        "runtime_s",
        "steady_runtime_s",
        "data_wait_s",
        "compute_s",
        "first_step_s",
        "images_per_s",
        "mb_per_s",
        "bytes_read_syscall",
        "train_au_percentage",
        "accelerator_busy_percentage",
        "compute_only_s",
        "input_only_s",
    )
    record_keys = (
        "dropped_files",
        "first_step_wait_s",
        "device",
        "parameters",
        "final_loss",
        "trace_file",
        "trace_device",
        "steps_file",
    )
    prefetches_to_device = True
    run_model = "training"  # on this machine's CPU; elsewhere:
    not_modelled = "AlexNet training on a GPU or a cluster's node, whose speed is not known here"
    # Fig. 6 draws both frameworks (PyTorch's bars per DataLoader worker count, 0 workers its run without
    # prefetch); Figs. 7 and 8 are TensorFlow's (prefetch on and off is tf.data's): PyTorch's rows of them
    # are in results.csv and the report's tables
    figures = (
        Figure(
            "fig6",
            "analysis.figures.training:fig6",
            # the caption of every study, PyTorch's or not: the figure's axis names what its readers are
            "Fig. 6: AlexNet runtime against the input pipeline's parallel readers, prefetch on and off",
            PAPER_LAYOUT,
            order=6,
        ),
        Figure(
            "fig7",
            "analysis.figures.training:fig7",
            "Fig. 7: AlexNet runtime against batch size (TensorFlow's cells)",
            PAPERS_LAYOUT,
            order=7,
        ),
        Figure(
            "fig8",
            "analysis.figures.training:fig8",
            "Fig. 8: device reads during AlexNet training (TensorFlow's cells)",
            (("framework", PAPERS),),
            order=8,
        ),
    )

    def decodes(self, cfg) -> bool:
        return True  # the model trains on decoded images

    def check(self, cfg) -> None:
        check_alexnet(cfg)

    def parallelism(self, cfg, result: dict | None = None) -> int | None:
        return training_parallelism(cfg, result)

    def probe(self, ctx: RunContext) -> dict:
        """The cell's input-only time (``workload.input_only``), after its runs."""
        if not ctx.cfg.workload.input_only:
            return {}
        s = _settings(ctx)
        steps = (s.steps or len(ctx.ds.files) // s.batch_size) - 1
        return {"input_only_s": self.engine(ctx.cfg).input_pass(ctx, s, steps)}

    def run_once(self, ctx: RunContext) -> dict:
        from jobs.observe import accelerator, trace

        cfg = ctx.cfg
        settings = _settings(ctx)
        steps_csv = ctx.job_dir / f"steps_{ctx.tag}.csv"
        tracer = trace.Tracer(ctx.disk, cfg.workload.trace_interval_s).start()
        gpu = accelerator.Sampler(min(0.1, cfg.workload.trace_interval_s)).start()
        try:
            result = self.engine(cfg).run(ctx, settings, steps_csv).as_dict()
        finally:
            tracer.stop()
            gpu.stop()
        result["accelerator_busy_percentage"] = gpu.busy(
            result["t_first_iterator_call"], result["t_first_iterator_call"] + result["runtime_s"]
        )
        tracer.mark(trace.FIRST, result.pop("t_first_iterator_call"))
        tracer.mark(trace.LAST, result.pop("t_last_iterator_call"))
        tracer.write(ctx.job_dir / f"trace_{ctx.tag}.csv")
        result["trace_file"] = f"trace_{ctx.tag}.csv"
        result["trace_device"] = ctx.disk or "all disks"
        result["steps_file"] = f"steps_{ctx.tag}.csv"
        return result

    def describe(self, result: dict) -> str:
        return (
            f"{result['runtime_s']:.2f} s runtime ({result['data_wait_s']:.2f} s waiting for data, "
            f"{result['compute_s']:.2f} s computing, first step {result['first_step_s']:.2f} s) "
            f"on {result['device']}, AU {result['train_au_percentage']:.0f}%"
        )
