"""The schemas every workload's own config schema builds on (``campaign.schema`` re-exports them for
workloads written against it); the values live in the YAML presets under ``conf/workload/``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from omegaconf import MISSING


class Pipeline(Enum):
    decode_resize = "decode_resize"  # read_file -> decode -> resize (Fig. 4)
    read_only = "read_only"  # read_file only (Fig. 5)


class Device(Enum):
    auto = "auto"  # the first GPU when TensorFlow sees one, else the CPU
    cpu = "cpu"
    gpu = "gpu"  # fail when there is no GPU


@dataclass
class WorkloadConf:
    """Fields every workload has; a workload's own schema (in its module under jobs/workloads/)
    inherits them and adds its settings."""

    name: str = MISSING  # workload label used in records and tables
    kind: str = MISSING  # the workload module that runs in the cell (a name in jobs.workloads' registry)
    description: str = ""  # one line shown in the README and records


@dataclass
class InputPipelineConf(WorkloadConf):
    """Fields of the workloads that read the dataset through the paper's tf.data pipeline."""

    pipeline: Pipeline = Pipeline.decode_resize  # what the mapped function does to every file
    image_side: int = 224  # side of the resized square image, pixels (alexnet: also the model's input)
    read_delay_ms: float = 0.0  # extra latency per file read, ms: emulates a slower tier (0 = none)
