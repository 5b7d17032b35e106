"""The config schema of a campaign cell: a dataclass per group, every field with its unit and meaning;
the values live in the YAML presets under ``conf/`` (``campaign.schema.register`` stores these in Hydra's
ConfigStore, and every preset names its group's schema first in its ``defaults``, so OmegaConf type-checks
every value a user writes on the command line).

A planned cell carries its config as these dataclasses (``jobs.cell``). Every fixed choice is a ``StrEnum``:
a member is its own name as a string (``cfg.cache == "cold"``, ``str(cfg.cache) == "cold"``), so no reader
needs to tell a member from a string. A choice a module can add to (``framework.name``, ``storage.kind``) is
a string that planning checks against its registry.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, List, Optional

from omegaconf import MISSING

from jobs.errors import ConfigError


class Sealed:
    """Base of the schema's dataclasses: the instances ``jobs.cell`` builds for a planned cell are sealed,
    read-only from then on (Hydra's and OmegaConf's own use of the classes is unaffected)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get(SEALED):
            raise dataclasses.FrozenInstanceError(
                f"cannot set {name}: a planned cell's config is read-only (jobs.cell.Cell)"
            )
        object.__setattr__(self, name, value)


SEALED = "_sealed"  # the instance attribute that marks a sealed config section


@dataclass(frozen=True)
class Bounds:
    """The values a number setting may take, declared once beside its field (``bounded``) and checked at
    planning for every section of a cell (``campaign.limits.bounds``): what a type cannot say. A value out
    of them would fail late (a division by zero), run with a meaningless figure, or be silently unused."""

    low: float | None = None  # the least value allowed
    high: float | None = None  # the greatest value allowed
    above: bool = False  # low itself is refused (a size or a rate: more than 0)
    why: str = ""  # what the setting is, where its name does not say it (ends the message)

    def refusal(self, value: float) -> str | None:
        """Why ``value`` is out of bounds (the message's end, after ``key=value``), or None."""
        if self.low is not None and not (value > self.low if self.above else value >= self.low):
            if self.above:
                said = "must be positive" if self.low == 0 else f"must be more than {_number(self.low)}"
            elif self.low == 0:
                said = "must not be negative"
            else:
                said = f"must be at least {_number(self.low)}"
        elif self.high is not None and not value <= self.high:
            said = f"is more than {_number(self.high)}"
        elif isinstance(value, float) and not math.isfinite(value):
            said = "must be a finite number"
        else:
            return None
        return f"{said} ({self.why})" if self.why else said


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


BOUNDS = "bounds"  # the key of a field's Bounds in its metadata

# Bounds planning holds a cell to (campaign.limits). A map call in flight holds an open file and a decoded
# image (~0.2-0.8 MB at 224 px), so 1,024 of them stay near 1 GB, and past it no device keeps more requests
# in flight (a disk's queue is 32, an NVMe drive's 1,023 per queue): the first count that can only cost
# memory.
THREADS_MAX = 1024
TIMEOUT_MAX_MIN = 365 * 24 * 60  # platform.timeout_min, minutes: a year, beyond any partition's MaxTime


def bounded(
    default: Any, low: float | None = None, high: float | None = None, above: bool = False, why: str = ""
):
    """A schema field with ``default`` whose values planning holds to ``Bounds(low, high, above, why)``."""
    return field(default=default, metadata={BOUNDS: Bounds(low, high, above, why)})


class Pipeline(StrEnum):
    decode_resize = "decode_resize"  # read_file -> decode -> resize (Fig. 4)
    read_only = "read_only"  # read_file only (Fig. 5)


class Device(StrEnum):
    auto = "auto"  # the first GPU when TensorFlow sees one, else the CPU
    cpu = "cpu"
    gpu = "gpu"  # fail when there is no GPU


@dataclass
class WorkloadConf(Sealed):
    """Fields every workload has; a workload's own schema (in its module under jobs/workloads/)
    inherits them and adds its settings."""

    name: str = MISSING  # workload label used in records and tables
    kind: str = MISSING  # the workload module that runs in the cell (a name in jobs.workloads' registry)
    description: str = ""  # one line shown in the README and records


@dataclass
class RecordedWorkload(WorkloadConf):
    """A workload's section as a record keeps it, for a reader that does not import the workload (the
    analysis): the fields every workload has, typed, and its own settings as the record wrote them."""

    own: dict = field(default_factory=dict)  # its own settings (``image_side``, ``width``, ...), as written


@dataclass
class InputPipelineConf(WorkloadConf):
    """Fields of the workloads that read the dataset through the paper's tf.data pipeline."""

    pipeline: Pipeline = Pipeline.decode_resize  # what the mapped function does to every file
    # side of the resized square image, pixels (alexnet: also the model's input)
    image_side: int = bounded(224, 1)
    # extra latency per file read, ms: emulates a slower tier (0: none)
    read_delay_ms: float = bounded(0.0, 0)


class CacheMode(StrEnum):
    cold = "cold"  # dataset evicted from the page cache before every run (the paper's setting)
    warm = "warm"  # dataset read once just before every run, so reads hit memory


class PrefetchTo(StrEnum):
    host = "host"  # prefetched batches wait in host memory (tf.data's prefetch)
    # and are copied into the training device's memory ahead (the paper's prefetch_to_device)
    device = "device"


class DatasetSource(StrEnum):
    synthetic = "synthetic"  # JPEGs generated once from the seed into <storage.root>/iocampaign/datasets
    folder = "folder"  # dataset.path is a folder of class sub-folders holding images
    filelist = "filelist"  # dataset.path is a text file with one image path per line


class SampleKind(StrEnum):
    images = "images"  # JPEGs, which a pipeline decodes and resizes
    # raw arrays, read whole and not decoded, as DLIO generates and reads unet3d's volumes (random bytes of
    # the sample's size)
    arrays = "arrays"


class DatasetFormat(StrEnum):
    files = "files"  # one file per image, as the paper read ImageNet
    tfrecord = "tfrecord"  # TFRecord shards of dataset.shard_mb, tf.train.Example records
    hdf5 = "hdf5"  # HDF5 files of dataset.shard_mb holding the JPEG bytes and labels (h5py)
    # one NumPy .npz file per sample (np.savez: x, the sample's bytes; y, its label), as DLIO and MLPerf
    # Storage store unet3d's samples
    npz = "npz"


# global: a full permutation of the samples every pass; local: each reader shuffles within its shards
# (shard order, then a buffer); none: the stored order ("global" is a Python keyword, hence the form)
Shuffle = StrEnum("Shuffle", {"global": "global", "local": "local", "none": "none"})


@dataclass
class EmulateConf(Sealed):
    read_mb_s: float = MISSING  # read bandwidth the tier is throttled to, MB/s
    write_mb_s: float = MISSING  # write bandwidth (O_DIRECT and fsync write-back), MB/s
    # read requests per second (seek-bound devices: an HDD's ~150); null = no limit
    read_iops: Optional[int] = None
    write_iops: Optional[int] = None  # write requests per second; null = no limit
    size_gb: float = 8.0  # size of the tier's backing file (allocated), GB
    image_dir: str = "/var/tmp/iocampaign/tiers"  # where the backing files live (on the real disk)


@dataclass
class ModelConf(Sealed):
    """A device served from its physics by a FUSE layer (jobs/storage/modeled); values in the preset.
    ``device`` picks which fields apply; a field left null takes the model's default (its docstring)."""

    # what is modelled: hdd (seek curve, rotation, media rate, NCQ) | lustre (OSTs, stripes, RPCs)
    device: str = "hdd"
    # device=hdd
    capacity_gb: Optional[float] = None  # bytes the seek curve spans, GB
    rpm: Optional[float] = None  # spindle speed
    average_seek_ms: Optional[float] = None  # datasheet average read seek
    track_to_track_ms: Optional[float] = None  # datasheet single-track seek
    media_mb_s: Optional[float] = None  # sustained media transfer rate, MB/s
    command_overhead_ms: Optional[float] = None  # controller time per command
    lookahead_mb: Optional[float] = None  # what the drive reads ahead after a request
    cache_mb: Optional[float] = None  # the drive's buffer, MB
    cache_segments: Optional[int] = None  # streams the drive's buffer holds at once
    queue_depth: Optional[int] = None  # commands the drive reorders, nearest first (NCQ); 1: arrival order
    # device=lustre
    osts: Optional[int] = None  # object storage targets, each a queue with its own rate and latency
    ost_mb_s: Optional[float] = None  # one OST's streaming rate, MB/s (before rate_scale)
    ost_latency_ms: Optional[float] = None  # one OST's time to start a request that misses its cache
    stripe_count: Optional[int] = None  # OSTs a file's stripes go round (Lustre's default: 1)
    stripe_size_mib: Optional[float] = None  # bytes of a file on one OST before the next, MiB
    rpc_mib: Optional[float] = None  # the largest bulk RPC; a larger request is split
    rpc_rtt_ms: Optional[float] = None  # client-server round trip of one RPC (network and RPC handling)
    client_mb_s: Optional[float] = None  # the client node's network link, MB/s (before rate_scale)
    rate_scale: Optional[float] = None  # every rate times this (the machine carries the rates; ratios kept)
    backing_dir: str = "/var/tmp/iocampaign/tiers"  # where the tier's files live (<backing_dir>/<name>)
    # seconds the layer may leave the tool's probe (its counters, asked each second) unanswered before it
    # is ended and the run fails, naming it (jobs/storage/modeled/liveness.py); at least the probe's second
    answer_s: float = bounded(30.0, 1, 86_400, why="the layer is asked once a second; at most a day")


class ObjectReader(StrEnum):
    native = "native"  # GETs inside tf.data's parallel map (jobs.frameworks.tensorflow.object_reads)
    fuse = "fuse"  # the bucket mounted with s3fs-fuse, read as files (jobs.storage.objectstore.fuse)


@dataclass
class StorageConf(Sealed):
    name: str = MISSING  # tier key used in records, tables and figures (hdd, ssd, lustre, ...)
    label: str = MISSING  # tier label drawn in figures ("HDD", "Lustre")
    root: str = MISSING  # existing, writable directory on the tier; datasets are placed under it
    # a kind of storage (jobs/storage/backends/: block, network, memory, object): what a cold cache can mean
    # here, whether every node reaches it, whether it is read by requests to a server (object)
    kind: str = "block"
    description: str = ""  # what the tier is (device model, file system)
    ior_read_mb_s: Optional[float] = None  # the paper's Table I max read, MB/s (reference only)
    ior_write_mb_s: Optional[float] = None  # the paper's Table I max write, MB/s (reference only)
    emulate: Optional[EmulateConf] = None  # root only: build this tier as a throttled loop device at root
    # serve the tier through a FUSE layer that models a drive (root or fusermount3)
    model: Optional[ModelConf] = None
    # what the tier's device does that the paper's claims depend on (analysis/claims/mechanisms.py): a
    # claim measured on a tier without its mechanism is "not comparable", never "not reproduced"
    mechanisms: List[str] = field(default_factory=list)
    # the file systems root may be on (their type in /proc/self/mountinfo: lustre, tmpfs); empty: any, as
    # for a local disk or a tier the tool builds itself. Checked at planning (jobs/storage/fstype.py)
    fs_types: List[str] = field(default_factory=list)
    # false: measure a root on another file system anyway; recorded, kept out of the paper's verdicts
    fs_check: bool = True
    # kind=object only (docs/object-storage.md). service: the protocol the store speaks (s3, azure:
    # jobs/storage/objectstore/services/); endpoint: the URL of a user's store (credentials from the
    # service's usual environment or profile); null: the tool starts its own server, its data under root
    service: Optional[str] = None
    endpoint: Optional[str] = None
    bucket: Optional[str] = None  # the bucket the tool reads and writes in
    prefix: Optional[str] = None  # the tool writes and deletes only below this key prefix
    reader: Optional[ObjectReader] = None  # how the runs read the objects
    # the client a framework's native reader GETs with (jobs/storage/objectstore/clients/); null: the
    # framework's own (TensorFlow: boto3; PyTorch: s3torchconnector)
    client: Optional[str] = None


@dataclass
class DatasetConf(Sealed):
    name: str = MISSING  # dataset key used in records and the cache folder name
    source: DatasetSource = DatasetSource.synthetic  # where the images come from
    path: Optional[str] = None  # folder of class sub-folders, or a file list (source=folder|filelist)
    num_images: int = bounded(MISSING, 1)  # images used; a synthetic set is generated up to this count
    num_classes: int = bounded(MISSING, 1)  # classes (sub-folders) of a synthetic set
    # target median file size of a synthetic set, KB (1 KB = 1000 B)
    median_kb: float = bounded(MISSING, 0, above=True)
    # sigma of the log-normal file-size distribution of a synthetic set (sizes span median x e^(+-3 sigma))
    size_spread: float = bounded(0.5, 0, 3, why="the log-normal's sigma: 3 spans sizes 8,000-fold each way")
    # JPEG bytes per pixel of a synthetic set; sets the image dimensions (3: an RGB pixel uncompressed)
    bytes_per_pixel: float = bounded(0.6, 0, 3, above=True, why="JPEG bytes per pixel, 3 uncompressed")
    grayscale_fraction: float = bounded(0.0, 0, 1)  # share of single-channel JPEGs in a synthetic set
    # what a synthetic set's samples are: JPEG images, or arrays (raw volumes: read, never decoded)
    samples: SampleKind = SampleKind.images
    # how the images are stored; tfrecord/hdf5 are converted once and reused
    format: DatasetFormat = DatasetFormat.files
    # size of a TFRecord shard or HDF5 file, MB (format=tfrecord|hdf5; npz holds one sample a file)
    shard_mb: float = bounded(
        128.0,
        0,
        above=True,
        why="MB per TFRecord shard or HDF5 file, and per group of files for shuffle=local",
    )


class PlatformKind(StrEnum):
    local = "local"  # cells run one after another in this process
    slurm = "slurm"  # every cell is a Slurm job, submitted with submitit


class CheckpointTarget(StrEnum):
    slow = "slow"  # straight to checkpoint.slow
    fast = "fast"  # straight to checkpoint.fast
    burst_buffer = "burst_buffer"  # to checkpoint.fast, drained in the background to checkpoint.slow


# sync: save, flush, then train on; async: TensorFlow's asynchronous checkpoint, flushed in the
# background ("async" is a Python keyword, hence the functional form)
CheckpointMode = StrEnum("CheckpointMode", {"sync": "sync", "async": "async"})


class Flush(StrEnum):
    fsync = "fsync"  # fsync every checkpoint file (the write-back a blkio throttle sees)
    syncfs = "syncfs"  # syncfs(2) on the tier's file system, as the paper did


@dataclass
class CheckpointModelConf(Sealed):
    """What a model's ranks write at a checkpoint (``workload=sharded_checkpoint``; presets in
    conf/checkpoint_model/): its size, precision and optimizer state, and how it is split."""

    name: str = MISSING  # the preset's name, as in checkpoint_model=<name>
    parameters: int = bounded(0, 0)  # parameters; 0: computed from the transformer's shape below
    layers: int = bounded(0, 0)  # transformer layers
    hidden: int = bounded(0, 0)  # hidden size
    ffn_hidden: int = bounded(0, 0)  # the MLP's inner size (SwiGLU: three matrices)
    heads: int = bounded(0, 0)  # attention heads
    kv_heads: int = bounded(0, 0)  # key/value heads (grouped-query attention); 0: as many as heads
    vocab: int = bounded(0, 0)  # vocabulary (input embedding and output layer, untied unless tied_embeddings)
    tied_embeddings: bool = False
    model_bytes_per_param: int = bounded(2, 1)  # weights' bytes per parameter (bf16/fp16: 2, fp32: 4)
    # optimizer state per parameter (Adam with fp32 master weights: 12)
    optimizer_bytes_per_param: int = bounded(12, 0)
    tp: int = bounded(1, 1)  # tensor-parallel ranks
    pp: int = bounded(1, 1)  # pipeline-parallel stages
    dp: int = bounded(1, 1)  # data-parallel replicas
    # ZeRO: 0 none, 1-2 optimizer state shared out over the replicas, 3 the weights too
    zero_stage: int = bounded(0, 0, 3)
    source: str = ""  # where the shape comes from


@dataclass
class CheckpointConf(Sealed):
    every: int = bounded(20, 1)  # steps between checkpoints (paper: 20)
    target: CheckpointTarget = CheckpointTarget.slow  # where checkpoints go
    mode: CheckpointMode = CheckpointMode["sync"]  # synchronous or TensorFlow's async checkpoint
    flush: Flush = Flush.fsync  # how a checkpoint is made durable before it counts
    max_to_keep: int = bounded(5, 1)  # newest complete checkpoints kept on each tier during a run
    # keep a run's checkpoints after it (for inspection); by default they are removed once recorded
    keep: bool = False
    # after each run: its last durable checkpoint evicted, restored into a new model, verified
    restore: bool = False
    # workload=sharded_checkpoint: the model's shape (checkpoint_model=<preset>)
    model: Optional[CheckpointModelConf] = None
    # workload=sharded_checkpoint: the first k of the model's ranks write (subset mode)
    ranks_written: Optional[int] = bounded(None, 1)
    # workload=sharded_checkpoint: checkpoints each run writes, every one durable, then reads back cold
    # (MLPerf Storage: 10 and 10; DLIO's names); the reads take the last ones written
    num_checkpoints_write: int = bounded(1, 1, 1000)
    num_checkpoints_read: int = bounded(1, 1, 1000)
    fast: StorageConf = MISSING  # the fast tier (burst buffer): a storage preset, storage@checkpoint.fast=...
    slow: StorageConf = MISSING  # the slow tier: a storage preset, storage@checkpoint.slow=...


@dataclass
class PlatformConf(Sealed):
    name: str = MISSING  # platform key recorded with every cell
    kind: PlatformKind = PlatformKind.local  # where cells run
    description: str = ""  # what the platform is
    lock_dir: str = "/tmp/iocampaign-locks"  # per-device lock files that keep cells from overlapping
    nodes: int = bounded(1, 1)  # nodes of one cell (more than one: a Slurm job step across nodes)
    # processes of one cell per node, each reading its shard of the dataset (local: on this machine)
    tasks_per_node: int = bounded(1, 1)
    # longest wait for another campaign's cell on the same device, minutes
    lock_timeout_min: float = bounded(1440.0, 0, above=True)
    # before each run, wait until the machine's other processes hold less than this share of its cores
    # (0.25: a quarter; null: never wait); the wait is logged and kept in the run's record (quiet_wait_s)
    wait_quiet: Optional[float] = bounded(
        None, 0, 1, above=True, why="a share of the machine's cores, e.g. 0.25; null: never wait"
    )
    # the longest platform.wait_quiet waits before each run, seconds; then the run starts on a busy machine
    wait_quiet_max_s: float = bounded(600.0, 0)
    # a task of a multi-task run silent this long (no heartbeat) has stopped: the run fails naming it and
    # its node
    task_silence_s: float = bounded(
        60.0, 2, why="seconds without a task's heartbeat before the run fails; tasks beat every 0.5 s"
    )
    # Slurm (kind=slurm); every value below ends up in the sbatch script and is checked first
    partition: Optional[str] = None  # --partition
    account: Optional[str] = None  # --account
    needs_account: bool = False  # the site refuses jobs without --account: a campaign without one stops early
    qos: Optional[str] = None  # --qos
    constraint: Optional[str] = None  # --constraint, e.g. "k80" or "haswell&gpu"
    # --time of one cell, minutes
    timeout_min: int = bounded(
        60, 1, TIMEOUT_MAX_MIN, why="one cell's wall-clock limit in minutes; a year is beyond any partition's"
    )
    cpus_per_task: int = bounded(2, 1)  # --cpus-per-task
    # CPU cores of one node (site presets): tasks_per_node x cpus_per_task must fit
    cores_per_node: Optional[int] = bounded(None, 1)
    mem_gb: float = bounded(8.0, 0, above=True)  # --mem of one cell, GB
    # a cgroup memory limit on the cell's runs, GB: what they allocate and the page cache of what they read
    # (jobs.execution.memlimit; MLPerf Storage counts the clients' memory); null: none
    memory_limit_gb: Optional[float] = bounded(
        None,
        0.5,
        1e6,
        why="the runs' own buffers need half a gigabyte, and no machine has a petabyte",
    )
    gpus_per_node: int = bounded(0, 0)  # --gpus-per-node (0 = none asked)
    exclusive: bool = False  # --exclusive: no other job on the node while a cell measures
    setup: List[str] = field(default_factory=list)  # shell lines run before the cell (module load, venv)
    # the Python the nodes run cells with, its path on the cluster (a venv on the shared file system);
    # null: the one that submits the campaign (sys.executable on the login node)
    python: Optional[str] = None
    array_parallelism: int = bounded(1, 1)  # cells of the array running at once; >1 only on separate devices
    wait: bool = True  # wait for every cell and build the tables; false = submit and return
    after: Optional[str] = None  # a Slurm job (array) id this campaign's first array waits for (afterany)
    dry_run: bool = False  # print the cells and the sbatch script, submit nothing
    requeue_on_timeout: bool = False  # requeue a cell that hits its time limit (it restarts from scratch)
    poll_s: float = bounded(5.0, 0, above=True)  # seconds between sacct polls while waiting


@dataclass
class FrameworkConf(Sealed):
    """The framework a cell reads and trains with (``framework=<preset>``; presets in conf/framework/).
    What each can do is declared in ``jobs.frameworks``; a workload names the frameworks it runs on."""

    # a name of jobs.frameworks' registry (tensorflow, pytorch, jax): checked at planning against it
    name: str = "tensorflow"
    description: str = ""  # one line shown in --help and records


class StartMethod(StrEnum):
    fork = "fork"
    spawn = "spawn"
    forkserver = "forkserver"


@dataclass
class LoaderConf(Sealed):
    """``torch.utils.data.DataLoader``'s settings under its own names (``framework=pytorch``; the
    batch size is ``batch_size`` and the order ``shuffle``, as for TensorFlow)."""

    # worker processes, each reading and decoding whole samples; null: ``threads`` (threads=N reads with N
    # workers, as tf.data's map reads with N threads); 0: in the training process, as PyTorch's default
    num_workers: Optional[int] = None
    # batches each worker loads ahead; null: PyTorch's default (2 with workers). Left null with
    # num_workers=0, as PyTorch requires (it refuses a prefetch_factor without workers)
    prefetch_factor: Optional[int] = bounded(None, 1)
    pin_memory: bool = False  # batches copied into page-locked memory (for a GPU)
    # workers kept between the passes over the data within a run (a run's workers are always joined at
    # its end, so their reads and CPU time are counted)
    persistent_workers: bool = False
    # how workers start: fork | spawn | forkserver; null: PyTorch's default for the platform (fork on Linux)
    multiprocessing_context: Optional[StartMethod] = None


@dataclass
class InputConf(Sealed):
    # run the pipeline on a tf.data service (a dispatcher and workers started for the cell)
    service: bool = False
    # workers of the service (input.service=true): local processes, or tasks of the cell's Slurm job
    workers: int = bounded(1, 1)


@dataclass
class TraceConf(Sealed):
    # record every POSIX call of the runs on the data and checkpoint tiers (dftracer, LD_PRELOAD)
    posix: bool = False
    # which runs are traced: all (every run; rates carry the tracer's cost) | extra (one more run)
    runs: str = "all"


class ReplayMode(StrEnum):
    fast = "fast"  # each stream's calls back to back, as fast as the tier answers
    recorded = "recorded"  # each call at its recorded time since the trace's first: the think time kept


@dataclass
class ReplayConf(Sealed):
    """``workload=replay``: a user's trace (as ``python -m analysis trace`` reads it) replayed as a cell."""

    trace: Optional[str] = None  # a Darshan log with DXT, a DFTracer trace, or a traced cell's folder
    mode: ReplayMode = ReplayMode.fast
    # threads that issue the calls; null: one per process and thread of the trace. A file's calls stay on
    # one thread, in their order
    concurrency: Optional[int] = bounded(None, 1, 256)


@dataclass
class AcceleratorConf(Sealed):
    """An accelerator emulated by its step time (``workload=emulated``; presets in conf/accelerator/)."""

    name: str = MISSING  # the profile's name, as in accelerator=<name>
    model: str = MISSING  # the model it trains, e.g. ResNet-50
    device: str = MISSING  # the accelerator, e.g. NVIDIA H100
    batch_size: int = bounded(MISSING, 1)  # samples per step the step time is for
    # compute time of one step at batch_size (what the emulation sleeps)
    step_time_s: float = bounded(MISSING, 0, above=True)
    image_side: int = bounded(224, 1)  # side of the resized square sample its input pipeline delivers, pixels
    # the accelerator utilization a run must hold (MLPerf Storage: 90%)
    au_threshold: float = bounded(0.90, 0, 1, above=True)
    source: str = MISSING  # where the step time comes from (a published config, or a measurement)
    # how its workload's samples are stored, as a dataset.format (MLPerf Storage's unet3d: npz, one file a
    # sample); +experiment=mlperf reads the cell's dataset in it
    sample_format: DatasetFormat = DatasetFormat.files
    # the median size of its workload's samples, KB (1 KB = 1000 B: MLPerf Storage's record_length_bytes ÷
    # 1000), and the log-normal sigma of their sizes: the synthetic set workload=emulated reads (its default
    # dataset, conf/dataset/default_for_emulated.yaml) is generated at them; ImageNet-like unless it says
    sample_kb: float = bounded(112.0, 0, above=True)
    sample_spread: float = bounded(0.5, 0, 3, why="the log-normal's sigma: 0 gives every sample one size")
    # what its workload's samples are: images (decoded and resized) or arrays (unet3d's volumes, read whole)
    samples: SampleKind = SampleKind.images
    # the samples of a workstation's what-if run of its workload (+experiment=mlperf's dataset, unless
    # dataset.num_images or dataset=... says otherwise): a few minutes of runs on 2 cores, where the rule's
    # set (five times the clients' memory) seldom fits on the disk; the verdict names the rule's size
    what_if_samples: int = bounded(1024, 1)


@dataclass
class CampaignConf(Sealed):
    workload: WorkloadConf = MISSING
    storage: StorageConf = MISSING
    dataset: DatasetConf = MISSING
    platform: PlatformConf = MISSING
    checkpoint: CheckpointConf = MISSING  # used by workload=checkpoint
    # storage@stage=<preset>: copy the data there before the runs and read it there
    stage: Optional[StorageConf] = None
    accelerator: Optional[AcceleratorConf] = None  # accelerator=<profile>: what workload=emulated emulates
    # framework=tensorflow|pytorch: what reads (and trains); tensorflow is the paper's
    framework: FrameworkConf = field(default_factory=FrameworkConf)
    loader: LoaderConf = field(default_factory=LoaderConf)  # framework=pytorch: the DataLoader's settings
    threads: Any = 1  # num_parallel_calls of the map: a positive integer up to 1,024, or "autotune"
    batch_size: int = bounded(64, 1)  # images per batch
    prefetch: int = bounded(0, 0)  # batches prefetched after batching; 0 = no prefetch transformation
    # where prefetched batches wait: host | device (training workloads)
    prefetch_to: PrefetchTo = PrefetchTo.host
    shuffle: Shuffle = Shuffle["global"]  # sample order of every run: global | local | none
    # samples in the shuffle buffer; null = all (global) or one shard's (local)
    shuffle_buffer: Optional[int] = bounded(
        None, 1, why="or null: all images for shuffle=global, one shard's for shuffle=local"
    )
    repeats: int = bounded(5, 1)  # measured runs per cell; the analysis reports their median, min and max
    warmup: int = bounded(1, 0)  # runs before the measured ones, discarded (still recorded, flagged warmup)
    cache: CacheMode = CacheMode.cold  # page-cache state the runs start from
    drop_caches: bool = False  # also write 1 to /proc/sys/vm/drop_caches before each run (root; global)
    seed: int = bounded(0, 0)  # seeds the synthetic dataset and the shuffle of every run
    # where the input pipeline runs: here, or on a tf.data service
    input: InputConf = field(default_factory=InputConf)
    # fine-grained tracing of the runs beyond the device counters
    trace: TraceConf = field(default_factory=TraceConf)
    # workload=replay: which trace, how fast, by how many threads
    replay: ReplayConf = field(default_factory=ReplayConf)


GROUPS = {
    "accelerator": AcceleratorConf,
    "framework": FrameworkConf,
    "checkpoint_model": CheckpointModelConf,
    "workload": WorkloadConf,
    "storage": StorageConf,
    "dataset": DatasetConf,
    "platform": PlatformConf,
}


def threads_value(raw) -> int | str:
    """``threads`` as the pipeline takes it: a positive int or "autotune"."""
    if isinstance(raw, str) and raw.strip().lower() == "autotune":
        return "autotune"
    if isinstance(raw, bool):
        raise ConfigError(f"threads={raw} is not a number: give a positive integer or 'autotune'")
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"threads={raw} is not a number: give a positive integer or 'autotune'") from None
    if value < 1 or str(value) != str(raw).strip():
        raise ConfigError(f"threads={raw} must be a positive integer (num_parallel_calls) or 'autotune'")
    return value
