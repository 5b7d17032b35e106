"""PyTorch (``framework=pytorch``): ``torch.utils.data.DataLoader``: ``loader.num_workers`` worker processes
(``threads`` when null) each read and decode whole samples, ``loader.prefetch_factor`` batches ahead each.
Its engines, each a module here: the micro-benchmark (``torch_reading``), the emulated accelerator
(``torch_loop``), AlexNet (``torch_training``), its checkpoints (``torch_saving``) and a sharded checkpoint's
ranks through torch.distributed.checkpoint (``dcp``)."""

from jobs.frameworks.framework import Framework

FRAMEWORK = Framework(
    "pytorch",
    "torch",
    "workers",
    service=False,
    posix_traceable=True,
    prefetch_to_device=False,
    prefetch=False,
    async_checkpoint=False,
    label="PyTorch",
    reader="DataLoader worker",
    reads_with="PyTorch's DataLoader (`framework=pytorch`: `readers` worker processes, "
    "`loader.num_workers` or else `threads`)",
    loader_settings=("prefetch_factor", "pin_memory", "persistent_workers", "multiprocessing_context"),
    warm=("torch",),  # CUDA is set up on first use, in the child
    rank=1,
    # 1,024 images cold from local disk, 5 runs, 2026-11-29: 240 images/s at 1 worker against tf.data's
    # 462 at 1 map thread (450 and 800 at 2); its forked workers start in 0.02 s
    decode_rate=0.51,
    engines={
        "microbench": "jobs.frameworks.pytorch.torch_reading",
        "emulated": "jobs.frameworks.pytorch.torch_loop",
        "alexnet": "jobs.frameworks.pytorch.torch_training",
        "checkpoint": "jobs.frameworks.pytorch.torch_saving",
        "sharded_checkpoint": "jobs.frameworks.pytorch.dcp",
    },
    # S3MapDataset over the CRT client (loader.s3map), its GETs counted; DCP's S3 writer and reader
    reads_objects=("microbench", "emulated", "sharded_checkpoint"),
)
