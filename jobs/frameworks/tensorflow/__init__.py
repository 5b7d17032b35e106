"""TensorFlow (``framework=tensorflow``): tf.data, the paper's pipeline: ``threads`` map threads read and
decode in one process. Its engines, each a module here: the micro-benchmark (``reading``), the emulated
accelerator (``loop``), AlexNet (``training``, with its Adam and its input-only and compute-only passes:
``adam``, ``overlap``), its checkpoints (``checkpoints``) and a sharded checkpoint's ranks (``plain``)."""

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
    fork_unsafe=True,
    companions=("keras",),
    rank=0,
    engines={
        "microbench": "jobs.frameworks.tensorflow.reading",
        "emulated": "jobs.frameworks.tensorflow.loop",
        "alexnet": "jobs.frameworks.tensorflow.training",
        "checkpoint": "jobs.frameworks.tensorflow.checkpoints",
        "sharded_checkpoint": "jobs.frameworks.tensorflow.plain",
    },
    # native readers: object_reads (boto3) and the object clients; a shard's files as objects (objectio)
    reads_objects=("microbench", "sharded_checkpoint"),
)
