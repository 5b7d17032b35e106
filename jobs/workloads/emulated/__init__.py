"""Emulated accelerators (``workload=emulated accelerator=<profile>``): the input pipeline feeding a
step that sleeps the accelerator's compute time. Each task of a cell (``platform.tasks_per_node``,
``platform.nodes``) is one accelerator; a cell's AU is its slowest task's (MLPerf Storage's rule).

Two engines: tf.data with ``prefetch`` batches ready (``loop``), or with ``framework=pytorch`` a
DataLoader whose workers load ``loader.prefetch_factor`` batches ahead each (``torch_loop``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jobs.errors import ConfigError
from jobs.metrics import of
from jobs.schema import InputPipelineConf
from jobs.workloads import Figure, RunContext, Workload, register


@dataclass
class EmulatedConf(InputPipelineConf):
    pass


def step_time(cfg) -> float:
    """The accelerator's step time for the cell's batch size: the profile's, scaled by batch size ÷ the
    profile's batch size (exact at the profile's own batch size)."""
    acc = cfg.accelerator
    return acc.step_time_s * cfg.batch_size / acc.batch_size


@register
class Emulated(Workload):
    name = "emulated"
    schema = EmulatedConf
    shardable = True  # each task is one accelerator, reading every N-th image
    min_batches = 2  # AU leaves the first step out
    run_model = "emulated"
    metrics = of(
        "steps",
        "runtime_s",
        "steady_runtime_s",
        "data_wait_s",
        "compute_s",
        "first_step_s",
        "images_per_s",
        "mb_per_s",
        "train_au_percentage",
        "seconds",
        "bytes_read_syscall",
    )
    record_keys = ("step_time_s", "dropped_files")
    objects = True  # with the frameworks whose engine reads objects (Framework.reads_objects)
    uses_keras = False  # tf.data and tf.io only
    figures = (
        Figure(
            "capacity",
            "analysis.figures.capacity:capacity_figure",
            order=11,
            title="Emulated accelerators: AU against accelerators per tier, the threshold and the prediction",
        ),
    )

    def check(self, cfg) -> None:
        if cfg.accelerator is None:
            raise ConfigError(
                "workload=emulated emulates an accelerator: choose its profile with accelerator=<name> "
                f"(conf/accelerator/: {', '.join(_profiles())})"
            )
        if cfg.accelerator.step_time_s <= 0 or cfg.accelerator.batch_size < 1:
            raise ConfigError(
                f"accelerator={cfg.accelerator.name}: step_time_s and batch_size must be positive"
            )
        from jobs import frameworks

        if not frameworks.of(cfg).prefetch:  # a DataLoader's workers load ahead: its settings say how far
            self._check_loader(cfg)
        elif cfg.prefetch < 1:
            raise ConfigError(
                "workload=emulated needs prefetch=1 or more: an accelerator's data loader fills the next "
                "batches while it computes (as MLPerf Storage's and DLIO's do); with prefetch=0 every step "
                "would wait for its batch to be read and decoded first (try prefetch=2)"
            )
        if not 0 < cfg.accelerator.au_threshold <= 1:
            raise ConfigError(f"accelerator.au_threshold={cfg.accelerator.au_threshold} must be in (0, 1]")

    @staticmethod
    def _check_loader(cfg) -> None:
        from jobs import frameworks

        if frameworks.workers(cfg) < 1:
            raise ConfigError(
                "workload=emulated with framework=pytorch needs loader.num_workers (or threads) of 1 or "
                "more: an accelerator's data loader fills the next batches while it computes; with 0 the "
                "training process would read every batch between its steps"
            )

    def parallelism(self, cfg, result: dict | None = None) -> int | None:
        from jobs import frameworks
        from jobs.schema import threads_value

        if frameworks.of(cfg).readers == "workers":
            return max(1, frameworks.workers(cfg))  # the worker processes; the step sleeps
        threads = threads_value(cfg.threads)
        # the step sleeps: no core of its own
        return threads if isinstance(threads, int) and threads > 0 else None

    def run_once(self, ctx: RunContext) -> dict:
        from jobs.workloads.emulated.steps import EmulatedSettings

        s = EmulatedSettings.from_config(ctx.cfg, ctx.seed, step_time_s=step_time(ctx.cfg))
        return self.engine(ctx.cfg).run(ctx, s)

    def describe(self, result: dict) -> str:
        return (
            f"AU {result['train_au_percentage']:.0f}% "
            f"({result['steps']} steps of {result['step_time_s'] * 1000:.0f} ms, "
            f"{result['data_wait_s']:.2f} s waiting for data), {result['images_per_s']:.0f} images/s"
        )


def _profiles() -> list[str]:
    """The accelerator profiles conf/accelerator/ holds (the names accelerator= takes)."""
    folder = Path(__file__).resolve().parents[3] / "conf" / "accelerator"
    return sorted(p.stem for p in folder.glob("*.yaml"))
