"""The workload registry: a workload is one module (a ``Workload`` subclass, registered here) plus
one preset (``conf/workload/<name>.yaml``).

A workload declares its name, its config schema (a dataclass inheriting ``WorkloadConf``; stored in
Hydra's ConfigStore as ``workload/<name>_schema`` for its preset to name), the metrics its runs
report (with units, ``jobs.metrics``; the runner rejects a result key that was not declared), its
checks, the storage tiers it touches, how one run executes, its log line, the figures it contributes
to the analysis (``Figure``: drawn from the rows of its kind) and the packages that go into provenance.
The generic loop around it (eviction, locks, warm-ups, repeats, cache
classification, records) is ``jobs.runner``.

Built-in workloads live in this package. More are found in modules of the namespace package
``iocampaign_workloads`` anywhere on ``sys.path``, as Hydra finds plugins under ``hydra_plugins``:
adding one takes ``iocampaign_workloads/<name>.py`` and a preset in a config folder named with
``hydra.searchpath``.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from jobs import records
from jobs.metrics import Metric, declare

EXTERNAL = "iocampaign_workloads"


class WorkloadError(RuntimeError):
    """A workload broke its declaration (an undeclared result key, a missing required one)."""


@dataclass(frozen=True)
class Figure:
    """A figure a workload contributes: drawn by the analysis from the results rows of the workload's
    kind (and ``where``), into ``<campaign>/<key>.png`` and ``.svg``."""

    key: str  # file stem and the report's anchor: fig4 (a plain file name: jobs.records.FIGURE_KEY)
    # "module:function" that draws it: function(rows, folder, figure) -> list of files written; a module of
    # analysis.figures or of iocampaign_workloads (jobs.records.DRAWERS), the analysis importing no other
    draw: str
    title: str = ""  # its title and the report's caption
    # (column, value) pairs that select its rows beyond the kind: (("pipeline", "read_only"),)
    where: tuple = ()
    order: float = 100.0  # its place in the report (the paper's numbering)


# The paper's data layout (one JPEG per file, read in a full shuffle, where it lies, by one process): the rows
# its figures draw.
PAPER_LAYOUT = (
    ("format", "files"),
    ("shuffle", "global"),
    ("stage", ""),
    ("tasks_per_cell", 1),
    ("service", 0),
)


@dataclass
class RunContext:
    """What one run of a cell gets from the runner."""

    ds: Any  # jobs.data.datasets.Dataset
    cell: Any  # the cell (jobs.cell.Cell): its typed config, the same as plain data, its id
    seed: int  # this run's seed
    job_dir: Path  # the cell's folder: per-run files go here
    run: int  # 1..repeats for measured runs, <= 0 for warm-ups
    disk: str | None  # the block device holding the data, for device-level traces
    marks: dict = field(default_factory=dict)  # usage snapshots a workload takes with mark()
    service: str | None = None  # input.service=true: the tf.data service's dispatcher (grpc://host:port)
    rank: int = 0  # this task's rank in a multi-task run (0 for a run of one process)
    ranks: int = 1  # tasks of the run
    run_id: str = ""  # a token every task of the run shares ("" for a run of one process)

    @property
    def cfg(self) -> Any:
        """The cell's config, typed (``jobs.schema.CampaignConf``)."""
        return self.cell.config

    def barrier(self, name: str) -> None:
        """Wait until every task of the run has reached the barrier ``name`` (no wait for one process)."""

    def mark(self, name: str) -> None:
        """Snapshot the usage counters (``jobs.observe.usage``) now: a workload calls ``mark("start")`` and
        ``mark("end")`` around its timed interval, so CPU and device use are judged over that interval
        rather than over the whole run (pipeline construction, model building)."""
        from jobs.observe import usage

        self.marks[name] = usage.snapshot(self.disk)

    @property
    def tag(self) -> str:
        """``run3`` or ``warmup1``: names this run's files."""
        return f"run{self.run}" if self.run > 0 else f"warmup{1 - self.run}"


class Workload:
    """Base of every workload; subclasses set the class attributes and override what they need."""

    name: ClassVar[str]  # the registry key: the preset's ``kind``
    schema: ClassVar[type]  # its config dataclass (inherits jobs.schema.WorkloadConf)
    metrics: ClassVar[tuple[Metric, ...]] = ()  # per-run scalars it reports, beyond the common ones
    record_keys: ClassVar[tuple[str, ...]] = ()  # other per-run keys it records (lists, file names, facts)
    packages: ClassVar[tuple[str, ...]] = ()  # distributions whose versions go into provenance
    needs_dataset: ClassVar[bool] = True
    posix_traceable: ClassVar[bool] = True  # trace.posix=true can trace its runs (TensorFlow's own I/O)
    in_tensorflow: ClassVar[bool] = True  # its runs call TensorFlow: signals wait for its interrupts.check()
    # it builds Keras models (False: TensorFlow is imported without Keras's code)
    uses_keras: ClassVar[bool] = True
    # its runs read or train with the cell's framework (False: another program does the I/O, and the
    # framework is neither imported nor put into provenance)
    uses_framework: ClassVar[bool] = True
    # a run can be N tasks each reading its shard (platform.tasks_per_node > 1)
    shardable: ClassVar[bool] = False
    service_ready: ClassVar[bool] = False  # its pipeline can run on the tf.data service (input.service=true)
    prefetches_to_device: ClassVar[bool] = False  # it trains on a device prefetch_to=device can fill
    min_batches: ClassVar[int] = 1  # full batches a run (each task of it) must get
    reads_images: ClassVar[bool] = True  # its runs read the dataset's images (the run's line counts them)
    figures: ClassVar[tuple[Figure, ...]] = ()  # what the analysis draws from its rows
    # the frameworks it runs on are those whose package gives an engine for it (``Framework.engines``); a
    # workload outside the tool may bring its own engine module per framework instead (framework name ->
    # module; ``engine(cfg)`` imports the cell's)
    engine_modules: ClassVar[dict[str, str]] = {}
    any_framework: ClassVar[bool] = False  # its runs use no framework, so any framework=<name> is accepted
    # its runs work on an object store as storage (storage.kind=object), read its dataset or write and read
    # back their own objects: with the frameworks whose engine says so (``Framework.reads_objects``), or,
    # where its runs use no framework, with any it runs on
    objects: ClassVar[bool] = False
    # its tasks (platform.tasks_per_node > 1) each reach the object store with a client of their own
    object_tasks: ClassVar[bool] = False
    # its burst buffer drains checkpoints to a bucket (storage@checkpoint.slow=s3)
    bucket_checkpoints: ClassVar[bool] = False
    # how ``campaign.estimate`` times one of its runs before it runs (``estimate_model``): "decode" or
    # "read" (the input pipeline's measured image rate), "baseline" (its tier's recorded IOR rates),
    # "emulated" (the accelerators' step time), "training" (a model's measured step on the CPU),
    # "checkpoint" (that training twice and its checkpoints' writes); None: not timed, for the reason
    # ``not_modelled`` gives
    run_model: ClassVar[str | None] = None
    # what a node must have for its cells beyond the project's packages (a cluster's dry run lists it)
    node_needs: ClassVar[tuple[str, ...]] = ()
    not_modelled: ClassVar[str] = "its runs are not modelled"

    @property
    def engines(self) -> tuple[str, ...]:
        """The frameworks it runs on: its own engines', else those whose package has an engine for it, else
        any (``any_framework``) or the paper's (a workload of the tool's that runs in no engine)."""
        from jobs import frameworks

        if self.engine_modules:
            return tuple(self.engine_modules)
        if self.any_framework:
            return tuple(frameworks.FRAMEWORKS)
        return frameworks.running(self.name) or (frameworks.PAPERS,)

    @property
    def object_readers(self) -> tuple[str, ...]:
        """The frameworks with which its runs work on an object store (``objects``)."""
        from jobs import frameworks

        if not self.objects:
            return ()
        if not self.uses_framework or self.engine_modules:
            return self.engines
        return frameworks.reading_objects(self.name)

    @classmethod
    def declared(cls) -> dict:
        """Its figures and metrics as data, for its cells' records (``CellRecord.declared``): the analysis
        reads them there, without importing the workload."""
        from dataclasses import asdict

        return {
            "figures": [{**asdict(f), "where": [list(w) for w in f.where]} for f in cls.figures],
            "metrics": [asdict(m) for m in cls.metrics],
        }

    def check(self, cfg) -> None:
        """Raise campaign.errors.ConfigError (one line naming the setting) for what cannot run."""

    def decodes(self, cfg) -> bool:
        """Whether its runs decode the dataset's samples as images (a set of arrays cannot feed them)."""
        return False

    def estimate_model(self, cfg) -> str | None:
        """How ``campaign.estimate`` times a run of this cell (``run_model``)."""
        return self.run_model

    def tiers(self, cfg) -> list:
        """Every storage tier the cell touches (the data's first)."""
        return [cfg.storage]

    def dataset(self, cfg) -> Any:
        """A workload that reads no dataset (``needs_dataset=False``) but files of its own: those files as
        a ``jobs.data.datasets.Dataset``, made under the cell's device lock, which the runner evicts before
        each cold run and proves cold as a dataset's. None: it reads no files of its own."""
        return None

    def store_figures(self, cfg) -> bool:
        """Whether its runs' requests to the cell's object store, and the server's reads meanwhile, are the
        run's figures (its device bytes among them): those of a workload that reads the dataset with the
        cell's framework, by default. A workload that counts its own requests (the baseline) says no."""
        return self.uses_framework

    def parallelism(self, cfg, result: dict | None = None) -> int | None:
        """Threads a run can keep busy at most (the CPU share of a run is judged against
        ``min(cores, this)``), given the run's ``result``; None: as many as there are cores."""
        return None

    def probe(self, ctx: RunContext) -> dict:
        """Measurements taken once per cell after its measured runs (cache as the runs had it), outside
        their timed and counted intervals; added to every measured run. {}: none."""
        return {}

    def run_once(self, ctx: RunContext) -> dict:
        """One run; returns its metrics (and declared record keys)."""
        raise NotImplementedError

    def engine(self, cfg):
        """The module of this workload's engine for the cell's framework: its own (``engine_modules``), else
        the one the framework's package gives (``Framework.engines``)."""
        from jobs import frameworks

        fw = frameworks.of(cfg)
        return importlib.import_module(self.engine_modules.get(fw.name) or fw.engines[self.name])

    def describe(self, result: dict) -> str:
        """What one run measured, for the log line."""
        return ", ".join(
            f"{m.name} {result[m.name]:.3g} {m.unit}" for m in self.metrics if result.get(m.name) is not None
        )


# Every run reports these (the runner fills in the cache evidence).
COMMON_KEYS = ("images", "images_dropped", "bytes_consumed", "bytes_read_device")

_REGISTRY: dict[str, Workload] = {}


def register(cls: type[Workload]) -> type[Workload]:
    """Class decorator: add a workload, declare its metrics and store its schema in Hydra's ConfigStore."""
    from hydra.core.config_store import ConfigStore

    if cls.name in _REGISTRY and type(_REGISTRY[cls.name]) is not cls:
        raise WorkloadError(
            f"two workloads are named {cls.name!r}: "
            f"{type(_REGISTRY[cls.name]).__module__} and {cls.__module__}"
        )
    for f in cls.figures:
        why = records.figure_problem(f.key, f.draw)
        if why is not None:
            raise WorkloadError(f"workload {cls.name}: figure {f.key!r}: {why}")
    for m in cls.metrics:
        declare(m)
    ConfigStore.instance().store(
        group="workload", name=f"{cls.name}_schema", node=cls.schema, provider="iocampaign"
    )
    _REGISTRY[cls.name] = cls()
    return cls


_discovered = [False]


def discover() -> None:
    """Import the built-in workloads and every module of the ``iocampaign_workloads`` namespace package."""
    _discovered[0] = True
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    from jobs import owned

    for info in pkgutil.iter_modules(owned.trusted_portions(EXTERNAL)):  # never another user's code
        importlib.import_module(f"{EXTERNAL}.{info.name}")


def get(kind: str) -> Workload:
    """The registered workload ``kind``; raises KeyError naming the registered ones."""
    if not _discovered[0]:  # importing one workload's engine registers that one only
        discover()
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise KeyError(
            f"workload.kind={kind} is not a registered workload; registered: {', '.join(sorted(_REGISTRY))}"
        ) from None


def names() -> list[str]:
    if not _discovered[0]:  # importing one workload's engine registers that one only
        discover()
    return sorted(_REGISTRY)


def figures() -> list[tuple[str, Figure]]:
    """(kind, figure) of every registered workload's figures, in the report's order."""
    if not _discovered[0]:  # importing one workload's engine registers that one only
        discover()
    return sorted(
        ((k, f) for k, w in _REGISTRY.items() for f in w.figures), key=lambda kf: (kf[1].order, kf[1].key)
    )


def builtin_declarations() -> dict:
    """kind -> what each of the tool's own workloads declares for the analysis (``Workload.declared``): the
    analysis keeps it as data (``analysis/workloads.json``) for records written before they kept it."""
    if not _discovered[0]:
        discover()
    return {k: w.declared() for k, w in sorted(_REGISTRY.items()) if w.__module__.startswith(f"{__name__}.")}


def check_result(w: Workload, result: dict) -> None:
    """Raise WorkloadError when a run returned a key its workload did not declare, or lacks a common one."""
    declared = set(COMMON_KEYS) | {m.name for m in w.metrics} | set(w.record_keys)
    extra = sorted(set(result) - declared)
    if extra:
        raise WorkloadError(
            f"workload {w.name} returned undeclared keys {extra}: declare them in its metrics "
            "(with a unit) or record_keys"
        )
    missing = [k for k in COMMON_KEYS if k not in result]
    if missing:
        raise WorkloadError(f"workload {w.name} did not return {missing}")
