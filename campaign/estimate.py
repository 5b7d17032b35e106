"""What a campaign will cost before it runs: the synthetic images each cell needs (how many, how many bytes,
how many already generated on its root) and an estimated time per cell and in all. Nothing is measured:
sizes come from the generator's closed-form size model (``limits.synthetic_bytes``), times from the rates
below, measured once on the project's 2-core machine (docs/campaigns.md, "What a campaign costs"). Every
figure is printed with "≈"; a workload whose runs are not modelled here gets no time, and says so. The
work is done once per distinct dataset, so a grid of 10^4 cells costs a few arithmetic steps per cell."""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass

from jobs import frameworks
from jobs.observe import accelerator
from jobs.storage import backends

# synthetic JPEGs written per second, MB/s, 2 cores (generator 2: imagenet_subset's 16,384 images, 2.08 GB,
# in 61 s; 2,048 in 9.1 s: 28.5 MB/s)
GENERATE_MB_S = 30.0
# synthetic arrays (dataset.samples=arrays: random bytes, nothing encoded), MB/s: 1.2 GB in 2.1 s on 2 cores
# (582 MB/s, into the page cache); halved for a set larger than memory, which waits for the disk
ARRAYS_MB_S = 300.0
# arrays read whole and never decoded (unet3d's npz samples), MB/s: the device's rate, not the cores' (runs of
# 28 samples, 4.64 GB, cold from local disk through 8 DataLoader workers: 4.9-5.9 s, median 5.2 s, 2026-11-28)
ARRAYS_READ_MB_S = 850.0
# a set converted into containers (dataset.format=tfrecord|hdf5|npz), MB/s: read and written once per set
# (the same 4.64 GB of arrays into 28 npz files: 10.2 s, 455 MB/s)
CONVERT_MB_S = 450.0
# workload=microbench, 1 map thread, 2 cores, local disk: 16,384 images in ~35 s per run
DECODE_IMAGES_S = 470.0
READ_ONLY_IMAGES_S = 1900.0  # workload=readonly, 1 thread, local disk, cold (docs/scaling.md)
# a cell's own work besides its runs: start, cache eviction, record (4 cells of the Quick start: 44 s,
# runs 35 s)
CELL_S = 2.5
# each map thread up to the cores adds this much of one thread's rate (2 cores: 1.8x at 2 threads)
CORE_GAIN = 0.8
# the modelled tiers' micro-benchmark, cold, 1,024 images, images/s at 1, 2, 4 and 8 threads (docs/storage.md)
MODELLED = {"hdd": {1: 121, 2: 152, 4: 217, 8: 255}, "lustre": {1: 59, 2: 117, 4: 231, 8: 374}}
# storage=s3 (the embedded server, the native reader), microbench, cold, 128 KB images, images/s at 1, 2
# and 4 threads: boto3's CPU per GET and the server share the 2 cores (docs/object-storage.md)
OBJECT_STORE = {1: 140, 2: 210, 4: 190}
OBJECT_CELL_S = 9.0  # the embedded server's start and its first PUT, which grows its volumes (once)
UPLOAD_MB_S = 25.0  # the dataset put into the embedded server, 8 connections (once per campaign)
# the input pipeline's image rate per run model a workload declares (``Workload.estimate_model``)
IMAGE_RATES = {"decode": DECODE_IMAGES_S, "read": READ_ONLY_IMAGES_S}
# AlexNet training on the CPU, measured per framework (workload=alexnet, tmpfs, 2026-11-27, quiet, 2 cores):
# a run is TRAIN_FIXED_S (the model built, its step traced, its compute-only steps) plus its images, each
# taking the model's step at TRAIN_IMAGES_S and the input pipeline's decode (DECODE_IMAGES_S, grown with
# the threads, held to the tier's rate): one after the other without prefetch, overlapped with it. Per
# preset's (image_side, width): alexnet_small's runs of 256 and 768 images at 2 threads took 3.6 and 5.2 s
# (batch 16 instead of 64: 3% less), alexnet's of 192 images 27 s; other shapes follow the power law
# through the two, in pixels x width. Checked: alexnet_small, 768 images, 1 thread, 5.2 s a run without
# prefetch (model: 5.9 s) and 4.7 s with (4.4 s). A machine's cores scale the model's rate.
TRAIN_IMAGES_S = {"tensorflow": {(128, 0.25): 540.0, (224, 1.0): 15.3}}
TRAIN_FIXED_S = {(128, 0.25): 2.8, (224, 1.0): 14.0}
TRAIN_CORES = 2
TRAIN_CELL_S = 4.0  # a training cell's own work besides its runs: Keras's import, the input-only pass
# a checkpoint as the mini-app writes it: AlexNet's fp32 weights and Adam's two moments per parameter
CHECKPOINT_BYTES_PER_PARAM = 12
# checkpoints written, fsync'ed, to a tier whose preset records no write rate (local disk, tmpfs), MB/s:
# alexnet_small's 24 MB written and fsync'ed on /var/tmp took 373-959 MB/s here beside the suite (2026-11-28)
CHECKPOINT_WRITE_MB_S = 300.0
# a checkpoint run's own work besides its steps and writes (the model built, its step traced): the paper's
# fig9_fig10 grid at workstation scale, quiet, 2026-11-28: runs of 4.0-5.4 s, 3.0-3.7 s of steps and stalls
CHECKPOINT_RUN_S = 1.0


@dataclass
class Data:
    """A synthetic set as the campaign needs it on one root."""

    name: str
    root: str
    images: int  # the most images any cell asks of it
    mean_bytes: float  # per image: its JPEG's mean size in the generator's size model
    have: int | None  # images already generated there; None: not known on this machine
    test_file_bytes: float = 0.0  # workload=baseline's sequential test file beside the set (Table I's IOR)
    samples: str = "images"  # what the set holds: images (JPEGs, encoded) or arrays (random bytes)

    @property
    def generated_mb_s(self) -> float:
        """How fast the generator writes the set, MB/s."""
        return ARRAYS_MB_S if self.samples == "arrays" else GENERATE_MB_S

    def line(self) -> str:
        need = self.images * self.mean_bytes
        if self.have is None:
            there = "generated by the first cell that needs them, where they are missing (not checked here)"
        elif self.have >= self.images:
            there = "already generated there: nothing to generate"
        else:
            todo = self.images - self.have
            todo_bytes = todo * self.mean_bytes
            made = f"{self.have:,} already generated there" if self.have else "none generated there yet"
            there = (
                f"{made}, {todo:,} to generate "
                f"(≈{_size(todo_bytes)}, ≈{duration(todo_bytes / (self.generated_mb_s * 1e6))})"
            )
        test = ""
        if self.test_file_bytes:  # written, read and removed by each baseline run: it needs the room
            test = (
                f" (with workload=baseline's {_size(self.test_file_bytes)} sequential test file, "
                f"≈{_size(need + self.test_file_bytes)} in all)"
            )
        count = f"{self.images:,} synthetic {self.samples}"
        return f"dataset {self.name} on {self.root}: {count}, ≈{_size(need)}{test}; {there}"


def _size(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.5 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def seconds_of(text: str) -> float:
    """What ``duration`` wrote, in seconds again (to its rounding)."""
    number, unit = text.split()
    return float(number) * {"s": 1, "min": 60, "h": 3600}[unit]


def _data_key(cell) -> tuple | None:
    """What names a cell's synthetic set on its root (None for a set that is not generated)."""
    ds = cell.config.dataset
    if ds is None or ds.source != "synthetic":
        return None
    skip = ("num_images", "path", "format", "shard_mb")
    spec = tuple((k, str(v)) for k, v in sorted(cell.data["dataset"].items()) if k not in skip)
    return (cell.config.storage.root, spec, cell.config.seed)


def _have(cfg) -> int | None:
    """Images of the cell's synthetic set already on its tier, read from the set's own metadata."""
    from campaign.limits import _generated

    folder, _ = backends.of(cfg.storage).space(cfg.storage)
    if not folder:
        return None
    return _generated(cfg, folder) if os.path.isdir(folder) else 0


def _images_per_run(cfg) -> int | None:
    n = cfg.dataset.num_images if cfg.dataset is not None else None
    if not isinstance(n, int):
        return None
    batches = getattr(cfg.workload, "batches", None)
    return min(n, batches * cfg.batch_size) if isinstance(batches, int) else n


def _rate(cfg, cores: int, mean_bytes: float | None, base=None, threads=None) -> float | None:
    """Images per second of one run: the workload's measured rate (or ``base``), grown with the threads
    (``cfg.threads`` or ``threads``) up to the cores, and held to the tier's own read rate where its preset
    records one (emulated throttle, Table I)."""
    base = base or _image_rate(cfg)
    threads = threads or cfg.threads
    if base is None or not isinstance(threads, int):
        return None
    rate = base * (1 + CORE_GAIN * (min(threads, cores) - 1))
    if _arrays(cfg) and mean_bytes:  # read whole, nothing decoded: as fast as the device gives the bytes
        rate = ARRAYS_READ_MB_S * 1e6 / mean_bytes
    st = cfg.storage
    emulate = st.emulate
    rates = (emulate.read_mb_s if emulate else None, st.ior_read_mb_s)
    caps = [
        emulate.read_iops if emulate else None,
        *(m * 1e6 / mean_bytes for m in rates if m and mean_bytes),
    ]
    measured = MODELLED.get(st.model.device) if st.model is not None else None
    measured = OBJECT_STORE if backends.of(st).requests else measured
    if measured:  # a modelled tier: its measured rate at the most threads measured up to the cell's
        caps.append(measured[max([k for k in measured if k <= threads] or [min(measured)])])
    return min([rate, *(c for c in caps if c)])


def _image_rate(cfg) -> float | None:
    """One reader's image rate of the cell's run model (``IMAGE_RATES``): tf.data's, scaled by the
    framework's own decoding rate (``Framework.decode_rate``)."""
    model = _model(cfg)
    return _decode_rate(cfg) if model == "decode" else IMAGE_RATES.get(model)


def _decode_rate(cfg) -> float:
    """One reader's decoding rate in the cell's framework, images/s."""
    return DECODE_IMAGES_S * frameworks.of(cfg).decode_rate


def _arrays(cfg) -> bool:
    return cfg.dataset is not None and str(cfg.dataset.samples) == "arrays"


def _converted(cfg) -> bool:
    """Whether the cell's set is already converted into its containers on its tier: a conversion of a set of
    its name, format and size found in the tool's folder (by its folder's name; its shards' size and its
    files' dates, which its name hashes, are not checked: an estimate). Nothing is made or opened."""
    from jobs import owned
    from jobs.data import datasets, formats

    folder, _ = backends.of(cfg.storage).space(cfg.storage)
    if not folder:
        return False
    below = owned.tool_folder(folder) / datasets.SUBDIR / formats.CONVERTED
    name = f"{cfg.dataset.name}-{cfg.dataset.format}-{cfg.dataset.num_images}-"
    try:
        return any(e.name.startswith(name) and e.is_dir(follow_symlinks=False) for e in os.scandir(below))
    except OSError:
        return False


def _tier_mb_s(st) -> tuple[float | None, float | None]:
    """(read, write) MB/s a tier's preset records: Table I's IOR figures, else its emulated throttle."""
    em = st.emulate
    return (
        st.ior_read_mb_s or (em.read_mb_s if em else None),
        st.ior_write_mb_s or (em.write_mb_s if em else None),
    )


def _baseline_s(cfg, cores: int, images: int | None, mean_bytes: float | None) -> float | None:
    """One baseline run: its sequential test file written and read at the tier's recorded rates, then the
    dataset's small files read once per ``workload.small_file_threads`` entry (as a read-only pass); None
    where the tier records no rate (local disk, tmpfs) or is an object store."""
    read, write = _tier_mb_s(cfg.storage)
    if not (read and write) or backends.of(cfg.storage).requests:
        return None
    test_bytes = cfg.workload.file_gb * 1e9
    seconds = test_bytes / (write * 1e6) + test_bytes / (read * 1e6)
    for t in cfg.workload.small_file_threads or []:
        rate = _rate(cfg, cores, mean_bytes, READ_ONLY_IMAGES_S, int(t))
        seconds += (images or 0) / rate if rate else 0.0
    return seconds


def _emulated_s(cfg, cores: int, images: int | None, mean_bytes: float | None) -> float | None:
    """One run of emulated accelerators: each task's shard in batches, each batch at least the accelerator's
    step time (``jobs.workloads.emulated.step_time``) and at most as fast as the task's share of the cores
    decodes (a run that falls short of its AU takes longer)."""
    from jobs.workloads.emulated import step_time

    threads = cfg.threads
    if not images or not isinstance(threads, int):
        return None
    tasks = cfg.platform.nodes * cfg.platform.tasks_per_node
    shard = math.ceil(images / tasks)
    decode = _rate(cfg, max(1, cores // tasks), mean_bytes, _decode_rate(cfg), threads)
    if decode and _arrays(cfg):  # the device's rate, shared by the tasks
        decode /= tasks
    return max(math.ceil(shard / cfg.batch_size) * step_time(cfg), shard / decode if decode else 0.0)


def _shape_cost(side: float, width: float) -> float:
    """A model's compute per image against alexnet_small's: its pixels times its width."""
    return (side / 128) ** 2 * (width / 0.25)


def _between(table: dict, cost: float) -> float:
    """``table``'s figure at ``cost``: the power law through its two measured presets."""
    (small, a), (large, b) = sorted((_shape_cost(*k), v) for k, v in table.items())
    return a * (b / a) ** (math.log(cost / small) / math.log(large / small))


def _training_s(cfg, cores: int, images: int | None, mean_bytes: float | None, gpu) -> float | None:
    """One run of AlexNet training on this machine's CPU (``TRAIN_IMAGES_S``); None for a framework not
    measured, on a GPU (this machine's, with ``workload.device=auto`` or ``gpu``), or on a cluster's nodes,
    whose devices are not known here (``gpu``: whether this machine has one, asked once; None: the cell
    runs elsewhere)."""
    per_image = _per_trained_image_s(cfg, cores, mean_bytes, gpu)
    if not images or per_image is None:
        return None
    return (
        _between(TRAIN_FIXED_S, _shape_cost(cfg.workload.image_side, cfg.workload.width)) + images * per_image
    )


def _per_trained_image_s(cfg, cores: int, mean_bytes: float | None, gpu) -> float | None:
    """Seconds per image of AlexNet's training steps on this machine's CPU, its input read and decoded
    beside them (with prefetch) or between them; None where ``_training_s`` has no time."""
    measured = TRAIN_IMAGES_S.get(frameworks.of(cfg).name)
    device = cfg.workload.device
    if gpu is None or measured is None or device == "gpu" or (device == "auto" and gpu()):
        return None
    cost = _shape_cost(cfg.workload.image_side, cfg.workload.width)
    step = TRAIN_CORES / (_between(measured, cost) * cores)  # seconds of the model's compute per image
    read = 1 / (_rate(cfg, cores, mean_bytes, _decode_rate(cfg)) or _decode_rate(cfg))
    return max(step, read) if cfg.prefetch else step + read


def _workload(cfg):
    from jobs import workloads

    return workloads.get(cfg.workload.kind)


def _model(cfg) -> str | None:
    """How a run of the cell is timed: what its workload declares (``Workload.estimate_model``)."""
    return _workload(cfg).estimate_model(cfg)


def _run_s(cfg, cores: int, images: int | None, mean_bytes: float | None, gpu) -> float | None:
    """One run of the cell, by its workload's run model; None where it has none, or lacks a figure."""
    model = _model(cfg)
    if model in IMAGE_RATES:
        rate = _rate(cfg, cores, mean_bytes)
        return images / rate if rate is not None and images is not None else None
    if model == "baseline":
        return _baseline_s(cfg, cores, images, mean_bytes)
    if model == "emulated":
        return _emulated_s(cfg, cores, images, mean_bytes)
    if model == "training":
        return _training_s(cfg, cores, images, mean_bytes, gpu)
    if model == "checkpoint":
        return _checkpoint_s(cfg, cores, images, mean_bytes, gpu)
    return None


def _checkpoint_s(cfg, cores: int, images: int | None, mean_bytes: float | None, gpu) -> float | None:
    """One run of the checkpointing mini-app: its training steps twice (the run's baseline without
    checkpoints, then with them) at the AlexNet model's measured rate, its own work (``CHECKPOINT_RUN_S``),
    each checkpoint written durable at its tier's write rate (the fast tier's with a burst buffer, whose
    drain overlaps the training), and one read back when ``checkpoint.restore``; None where the training
    has no time."""
    from jobs.workloads.alexnet.settings import parameters

    classes = getattr(cfg.dataset, "num_classes", None)
    if not images or not isinstance(classes, int):
        return None
    steps = images // cfg.batch_size
    steps = min(steps, cfg.workload.steps) if cfg.workload.steps else steps
    per_image = _per_trained_image_s(cfg, cores, mean_bytes, gpu)
    if per_image is None:
        return None
    ck = cfg.checkpoint
    read_mb_s, write_mb_s = _tier_mb_s(ck.slow if ck.target == "slow" else ck.fast)
    size = parameters(classes, cfg.workload.image_side, cfg.workload.width) * CHECKPOINT_BYTES_PER_PARAM
    writes = steps // ck.every * size / ((write_mb_s or CHECKPOINT_WRITE_MB_S) * 1e6)
    restore = size / ((read_mb_s or CHECKPOINT_WRITE_MB_S) * 1e6) if ck.restore else 0.0
    return 2 * steps * cfg.batch_size * per_image + CHECKPOINT_RUN_S + writes + restore


def _why_not(cfg) -> tuple[str, str]:
    """Why a cell gets no time: a sentence with ``{}`` where the cells' values go, alike cells' joined by
    commas, and this cell's value; in words without parentheses (``study_total`` reads them back)."""
    model = _model(cfg)
    if model == "baseline":
        return (
            f"workload={cfg.workload.name} on storage={{}}, whose presets record no IOR read and write rate",
            cfg.storage.name,
        )
    if model in IMAGE_RATES:
        return f"workload={cfg.workload.name} with threads={{}}, not a number of threads", str(cfg.threads)
    if model in ("training", "checkpoint") and frameworks.of(cfg).name not in TRAIN_IMAGES_S:
        return (
            f"workload={cfg.workload.name} with framework={{}}, whose training rate is not measured here",
            frameworks.of(cfg).name,
        )
    return "workload={}: " + _workload(cfg).not_modelled, cfg.workload.name


def _conversion_s(cfg, key, mean: float | None, gen: float, converted: set, local: bool) -> float:
    """Seconds the cell spends converting its synthetic set into containers (``dataset.format`` other than
    files), once per set, format and size: where the campaign generates the set, or the conversion is not
    found on this machine's tier, or the tier is a cluster's (not looked at)."""
    ds = cfg.dataset
    if key is None or mean is None or str(ds.format) == "files":
        return 0.0
    done = (key, str(ds.format), ds.num_images, float(ds.shard_mb))
    if done in converted:
        return 0.0
    converted.add(done)
    if local and not gen and _converted(cfg):
        return 0.0
    return ds.num_images * mean / (CONVERT_MB_S * 1e6)


def _store_s(cfg, images: int | None, mean_bytes: float | None, done: set) -> float:
    """A cell's time to start the embedded S3 server and put its dataset there (0: not an object store),
    each once per campaign: ``done`` holds the servers and uploads earlier cells paid for."""
    if not backends.of(cfg.storage).requests:
        return 0.0
    st = cfg.storage
    server, upload = (st.root, st.bucket), (st.endpoint, st.root, st.bucket, images, mean_bytes)
    out = 0.0
    if not st.endpoint and server not in done:
        out += OBJECT_CELL_S
    if upload not in done:
        out += (images or 0) * (mean_bytes or 0) / (UPLOAD_MB_S * 1e6)
    done.update((server, upload))
    return out


class Estimate:
    """The datasets and times of a list of planned cells (``jobs.cell.Cell``). ``local``: the cells run on
    this machine (their roots are looked at, with its cores); otherwise on a cluster's nodes (nothing looked
    at, ``platform.cpus_per_task`` cores each)."""

    def __init__(self, cells: list, local: bool):
        from campaign.limits import mean_image_bytes

        self.data: dict[tuple, Data] = {}
        self.cells: list[float | None] = []
        self.generating: list[float] = []  # seconds of each cell spent generating its set's missing images
        self.converting: list[float] = []  # seconds of each cell spent converting its set into containers
        # whether the cell's set is already on its root is not known here (a cluster's root, a tier built
        # when its cell starts)
        self.unsure: list[bool] = []
        self.why: list[tuple[str, str] | None] = []  # why a cell has no time (``_why_not``; None: it has one)
        made: dict[tuple, int] = {}
        sizes: dict[tuple, float] = {}
        stored: set = set()  # the embedded servers started and datasets uploaded by earlier cells
        converted: set = set()  # the sets earlier cells convert (set, format, samples)
        gpu = functools.cache(accelerator.gpu_driver)  # this machine's GPU, looked for once, if a cell asks
        for cell in cells:
            cfg = cell.config
            key, gen = _data_key(cell), 0.0
            n = _images_per_run(cfg)
            mean = None
            if key is not None:
                ds = cfg.dataset
                if key not in self.data:
                    sizes[key] = mean_image_bytes(ds.median_kb, ds.size_spread)
                    have = _have(cfg) if local else None
                    self.data[key] = Data(ds.name, key[0], 0, sizes[key], have, samples=str(ds.samples))
                    made[key] = have or 0
                d, mean = self.data[key], sizes[key]
                d.images = max(d.images, ds.num_images)
                if _model(cfg) == "baseline":
                    d.test_file_bytes = max(d.test_file_bytes, cfg.workload.file_gb * 1e9)
                if d.images > made[key]:
                    gen = (d.images - made[key]) * mean / (d.generated_mb_s * 1e6)
                    made[key] = d.images
            conv = _conversion_s(cfg, key, mean, gen, converted, local)
            cores = (os.cpu_count() or 1) if local else cfg.platform.cpus_per_task
            run = _run_s(cfg, cores, n, mean, gpu if local else None)
            if run is not None:  # the readers' start, which a run's own time leaves out
                run += frameworks.of(cfg).run_start_s
            runs = cfg.repeats + cfg.warmup
            own = CELL_S + gen + conv + _store_s(cfg, n, mean, stored)
            if _model(cfg) in ("training", "checkpoint"):
                own += TRAIN_CELL_S
            self.cells.append(None if run is None else own + runs * run)
            self.why.append(None if run is not None else _why_not(cfg))
            self.generating.append(gen)
            self.converting.append(conv)
            self.unsure.append(key is not None and self.data[key].have is None)

    def cell(self, k: int) -> str:
        """`` ≈ 42 s`` for cell ``k``, or what it lacks."""
        s, gen, conv = self.cells[k], self.generating[k], self.converting[k]
        where = " where missing" if self.unsure[k] else ""
        making = ", ".join(
            [f"generating ≈ {duration(gen)}{where}"] * bool(gen)
            + [f"converting ≈ {duration(conv)}{where}"] * bool(conv)
        )
        if s is None:
            return f" (time not estimated{', ' + making if making else ''})"
        return f" ≈ {duration(s)}{' (' + making + ')' if making else ''}"

    def total(self) -> str:
        """One line: the whole campaign's estimate and what it is made of, and which cells have no time
        and why (``study_total`` reads it back for a paper study's grids)."""
        known = [s for s in self.cells if s is not None]
        unknown = len(self.cells) - len(known)
        alike: dict[str, dict[str, None]] = {}
        for w in filter(None, self.why):
            alike.setdefault(w[0], {})[w[1]] = None
        why = "; ".join(sentence.format(", ".join(values)) for sentence, values in alike.items())
        cells = f"{unknown} cell{'s' if unknown != 1 else ''} not estimated: {why}"
        if not known:
            return f"estimated time: none ({cells}; docs/campaigns.md)"
        rest = f", plus {cells}" if unknown else ""
        return (
            f"estimated time ≈ {duration(math.fsum(known))} in all{rest} "
            "(from the size model and the rates measured "
            f"on a 2-core machine: docs/campaigns.md)"
        )

    def lines(self) -> list[str]:
        """The datasets' lines, then the total."""
        return [*(d.line() for d in self.data.values()), self.total()]


_TOTAL = re.compile(r"^estimated time(?: ≈ (?P<time>[\d.]+ (?:s|min|h)) in all|: none)")
_UNKNOWN = re.compile(
    r"(?P<cells>\d+) cells? not estimated: (?P<why>[^()]*?)(?:; docs/campaigns\.md)?(?: \(|\)|$)"
)
_CELLS = re.compile(r"^dry run: (?P<cells>\d+) cells? would")


def study_total(grids: list[tuple[str, str]]) -> str:
    """One line for a paper study's dry run: its cells and estimated time over every grid (``grids``: each
    grid's name and the dry run it printed), and the grids that have cells without a time, with why."""
    cells, seconds, estimated, missing = 0, 0.0, [], {}
    for name, text in grids:
        for line in text.splitlines():
            if m := _CELLS.match(line):
                cells += int(m["cells"])
            elif m := _TOTAL.match(line):
                if m["time"]:
                    seconds += seconds_of(m["time"])
                    estimated.append(name)
                if u := _UNKNOWN.search(line):  # grids alike for the same reason, named together
                    n = int(u["cells"])
                    missing.setdefault(u["why"], []).append(f"{name} ({n} cell{'s' if n != 1 else ''})")
    grids_n = f"{len(grids)} grid{'s' if len(grids) != 1 else ''}"
    out = f"paper study: {cells:,} cells in {grids_n}; estimated time ≈ {duration(seconds)}"
    out += f" for the cells of {', '.join(estimated)}" if estimated else ""
    if missing:
        out += "; not estimated: " + "; ".join(f"{', '.join(g)} for {why}" for why, g in missing.items())
    return out + " (docs/campaigns.md)"
