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
    # 1,024 images cold from local disk, 5 runs, 2026-11-29: 207 images/s at 1 worker against tf.data's 462
    # at 1 map thread (300 and 800 at 2); a cell of 6 runs took 12 s besides them where tf.data's took 6:
    # Grain's spawned workers start afresh each run
    decode_rate=0.45,
    run_start_s=1.0,
    engines={
        "microbench": "jobs.frameworks.jax.grain_reading",
        "emulated": "jobs.frameworks.jax.grain_loop",
    },
)
