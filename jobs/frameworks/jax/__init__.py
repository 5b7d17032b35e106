"""JAX (``framework=jax``): Grain's ``DataLoader`` (JAX's data loader): ``loader.num_workers`` worker
processes (``threads`` when null), one read thread each, read and decode whole samples. Its engines: the
micro-benchmark (``grain_reading``) and the emulated accelerator (``grain_loop``)."""

from jobs.frameworks.framework import Framework

FRAMEWORK = Framework(
    "jax",
    "jax",
    "workers",
    service=False,
    posix_traceable=False,
    prefetch_to_device=False,
    prefetch=False,
    async_checkpoint=False,
    label="JAX",
    reader="Grain worker",
    reads_with="Grain, JAX's data loader (`framework=jax`: `readers` worker processes, one read thread "
    "each, `loader.num_workers` or else `threads`)",
    companions=("grain",),
    # Grain's random-access source over image files and npz files (TFRecord, ArrayRecord: not yet)
    formats=("files", "npz"),
    rank=2,
    engines={
        "microbench": "jobs.frameworks.jax.grain_reading",
        "emulated": "jobs.frameworks.jax.grain_loop",
    },
)
