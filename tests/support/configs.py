"""The small configs many tests repeat, and a cell's config composed as the campaign composes it."""

from __future__ import annotations

from support.paths import CONF, TOY_CONF

# one measured run of four batches over 16 synthetic images: a cell that is over in seconds
TINY = ("repeats=1", "warmup=0", "batch_size=4", "dataset.num_images=16")
# a Slurm cell of two runs over 128 images, its jobs polled every second
SLURM_TINY = ("dataset.num_images=128", "batch_size=32", "repeats=2", "platform.poll_s=1")
# the toy's config folder on Hydra's search path: its workload, accelerator and checkpoint presets
TOY_SEARCHPATH = f"hydra.searchpath=[file://{TOY_CONF}]"


def two_runs(images: int, root, out) -> tuple[str, ...]:
    """Two measured runs (no warm-up) of batches of 8 over ``images`` synthetic images generated in
    ``root``, the sweep's folder ``out``: the tail of the multi-process cells' campaigns."""
    return (
        f"dataset.num_images={images}",
        "batch_size=8",
        "repeats=2",
        "warmup=0",
        f"storage.root={root}",
        f"hydra.sweep.dir={out}",
    )


def one_run_of_folder(root, data) -> tuple[str, ...]:
    """One measured run (no warm-up) in batches of 4 over the user's images in ``data``, ``root`` the
    storage root: the tail of the checkpoint workload's campaigns."""
    return (
        f"storage.root={root}",
        "dataset.source=folder",
        f"dataset.path={data}",
        "batch_size=4",
        "repeats=1",
        "warmup=0",
    )


def compose_cell(overrides: list[str]):
    """A cell's config composed as the campaign composes it (Hydra left uninitialised between calls)."""
    from hydra import compose, initialize_config_dir

    from campaign import schema

    schema.register()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def children_cpu() -> float:
    """CPU seconds of this process's waited-for children."""
    import resource

    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def run_in_process(overrides, ds, job_dir, rank_run=1):
    """One run of the composed cell's workload over ``ds``, in this process, as the runner calls it:
    (workload, ctx, result); ``ctx.kids_cpu``, the CPU seconds of this process's waited-for children at each
    of the run's usage marks, and "after"."""
    from campaign import validate
    from jobs import workloads
    from jobs.cell import Cell
    from jobs.workloads import RunContext

    cell = Cell.from_composed(compose_cell(list(overrides)))
    validate.check(cell)
    ctx = RunContext(ds=ds, cell=cell, seed=0, job_dir=job_dir, run=rank_run, disk=None)
    ctx.kids_cpu = {}
    marked = ctx.mark

    def mark(name):
        ctx.kids_cpu[name] = children_cpu()
        marked(name)

    ctx.mark = mark
    w = workloads.get(cell.config.workload.kind)
    result = w.run_once(ctx)
    ctx.kids_cpu["after"] = children_cpu()
    workloads.check_result(w, result)
    return w, ctx, result


# a burst-buffer checkpoint cell small enough for a test: a narrow AlexNet's two checkpoints, the last one
# kept on the slow tier and restored from it (the slow tier's preset and root are the test's)
TINY_BURST_BUFFER = (
    "workload=checkpoint",
    "checkpoint.target=burst_buffer",
    "checkpoint.restore=true",
    "checkpoint.every=2",
    "checkpoint.max_to_keep=1",
    "workload.steps=4",
    "workload.image_side=64",
    "workload.width=0.25",
    "dataset.num_images=64",
    "batch_size=16",
    "repeats=1",
    "warmup=0",
)
