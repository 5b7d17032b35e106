"""Section III-A micro-benchmark (Fig. 4) and its read-only variant (Fig. 5, ``pipeline: read_only``):
the paper's tf.data pipeline iterated without compute."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.metrics import Metric, declare, of
from jobs.schema import InputPipelineConf, bounded
from jobs.workloads import PAPER_LAYOUT, Figure, RunContext, Workload, register


@dataclass
class MicrobenchConf(InputPipelineConf):
    batches: int | None = bounded(None, 1)  # stop after this many batches; null = the whole set


STARTUP = declare(
    Metric(
        "startup_s",
        "s",
        "lower",
        "framework=pytorch: iter(DataLoader) until its last worker was ready to load, part of seconds",
    )
)
WORKERS = declare(
    Metric(
        "workers", "processes", "", "framework=pytorch: DataLoader worker processes that read (0: in process)"
    )
)


@register
class Microbench(Workload):
    name = "microbench"
    shardable = True  # each task reads every N-th image
    service_ready = True  # its pipeline is what the service distributes
    schema = MicrobenchConf
    metrics = (
        *of("batches", "seconds", "first_batch_s", "images_per_s", "mb_per_s", "bytes_read_syscall"),
        STARTUP,
        WORKERS,
    )
    record_keys = ("dropped_files", "start_method")
    objects = True  # with the frameworks whose engine reads objects (Framework.reads_objects)
    object_tasks = True  # each task GETs its shard with a client of its own; the runner merges the requests
    uses_keras = False  # tf.data and tf.io only
    run_model = "decode"
    figures = (
        Figure(
            "fig4",
            "analysis.figures.bandwidth:bandwidth_figure",
            where=(("pipeline", "decode_resize"), *PAPER_LAYOUT),
            order=4,
            title="Fig. 4: input pipeline read → decode → resize 224×224 (median of runs)",
        ),
        Figure(
            "fig5",
            "analysis.figures.bandwidth:bandwidth_figure",
            where=(("pipeline", "read_only"), *PAPER_LAYOUT),
            order=5,
            title="Fig. 5: input pipeline with read_file only (median of runs)",
        ),
        Figure(
            "service",
            "analysis.figures.scaling:service_figure",
            order=5.8,
            title="The tf.data service: the consumer's images/s and MB/s against the service's workers "
            "(median of runs)",
        ),
        Figure(
            "scaling",
            "analysis.figures.scaling:scaling_figure",
            order=5.7,
            title="Scaling with tasks: aggregate images/s and MB/s of a cell's tasks (median of runs), "
            "ideal dashed",
        ),
        Figure(
            "layouts",
            "analysis.figures.layouts:layouts_figure",
            order=5.5,
            title="Data layout and shuffling: images/s by dataset.format × shuffle (median of runs)",
        ),
    )

    def estimate_model(self, cfg) -> str | None:
        return "read" if cfg.workload.pipeline == "read_only" else "decode"

    def decodes(self, cfg) -> bool:
        return cfg.workload.pipeline != "read_only"

    def parallelism(self, cfg, result: dict | None = None) -> int | None:
        from jobs import frameworks
        from jobs.schema import threads_value

        if frameworks.of(cfg).readers == "workers":
            return max(1, frameworks.workers(cfg))  # worker processes (0: the training process reads)
        threads = threads_value(cfg.threads)
        return threads if isinstance(threads, int) and threads > 0 else None  # autotune: any core

    def run_once(self, ctx: RunContext) -> dict:
        from jobs.workloads.microbench.run import RunSettings

        cfg = ctx.cfg
        settings = RunSettings.from_config(
            cfg,
            ctx.seed,
            pipeline=cfg.workload.pipeline,
            batches=cfg.workload.batches,
            service=ctx.service,
        )
        return self.engine(cfg).run(ctx, settings).as_dict()

    def describe(self, result: dict) -> str:
        return f"{result['images_per_s']:.0f} images/s, {result['mb_per_s']:.1f} MB/s"
