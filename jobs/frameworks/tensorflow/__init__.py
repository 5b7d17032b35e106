"""TensorFlow (``framework=tensorflow``): tf.data, the paper's pipeline: ``threads`` map threads read and
decode in one process. Its engines: the micro-benchmark (``reading``), the emulated accelerator (``loop``)
and a sharded checkpoint's ranks (``plain``) here; AlexNet and its checkpoints in their workloads' folders
(``jobs.workloads.alexnet.training``, ``jobs.workloads.checkpoint.saving``), whose restore and recovery use
them too."""

from jobs.frameworks.framework import Framework

FRAMEWORK = Framework(
    "tensorflow",
    "tensorflow",
    "threads",
    service=True,
    posix_traceable=True,
    prefetch_to_device=True,
    prefetch=True,
    async_checkpoint=True,
    label="TensorFlow",
    reader="map thread",
    reads_with="tf.data (`framework=tensorflow`: `threads` map threads in one process)",
    imports_tensorflow=True,
    companions=("keras",),
    rank=0,
    engines={
        "microbench": "jobs.frameworks.tensorflow.reading",
        "emulated": "jobs.frameworks.tensorflow.loop",
        "alexnet": "jobs.workloads.alexnet.training",
        "checkpoint": "jobs.workloads.checkpoint.saving",
        "sharded_checkpoint": "jobs.frameworks.tensorflow.plain",
    },
    # native readers: jobs.data.s3 (boto3) and the object clients; a shard's files as objects (objectio)
    reads_objects=("microbench", "sharded_checkpoint"),
)
