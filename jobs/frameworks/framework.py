"""What a framework declares (``Framework``): what it can do, and its engines, the module that runs each
workload in it. Each framework's package (``jobs/frameworks/<name>/__init__.py``) declares one as its
``FRAMEWORK``; the registry (``jobs.frameworks``) finds them.

An engine is a module of the framework's package (or, for a workload outside it, the workload's own
``engine_modules``) with the functions its workload calls, the same for every framework: the
micro-benchmark's ``run(ctx, RunSettings) -> RunResult`` (``jobs.workloads.microbench.run``), the emulated
accelerator's ``run(ctx, EmulatedSettings) -> dict`` (``jobs.workloads.emulated.steps``), and so on; a test
holds that every framework's engine of a workload has its functions
(``tests/campaign/test_layout.py::test_every_engine_of_a_workload_has_the_functions_of_the_others``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Framework:
    name: str
    package: str  # the distribution whose version goes into provenance
    readers: str  # what reads in parallel: "threads" (one process) or "workers" (processes)
    service: bool  # its pipeline can run on the tf.data service (input.service=true)
    posix_traceable: bool  # trace.posix=true traces its reads (LD_PRELOAD into every reading process)
    prefetch_to_device: bool  # prefetch_to=device is its own transformation
    prefetch: bool  # prefetch=N is a transformation of its pipeline (a DataLoader's workers load ahead)
    # checkpoint.mode=async: it saves in the background (TensorFlow's CheckpointOptions)
    async_checkpoint: bool
    label: str  # its name in figures and the report
    reader: str  # one of what reads in parallel, in its own words (``unit``)
    imports_tensorflow: bool = False  # its cells run in TensorFlow: imported quietly before a cell's locks
    # its runtime leaves threads in the cell's process that a process forked from it later may not survive
    # (TensorFlow's and XLA's pools): a local campaign runs its cells after the others' (campaign.launch)
    fork_unsafe: bool = False
    companions: tuple[str, ...] = ()  # distributions only its cells use beside it (Keras with TensorFlow)
    warm: tuple[str, ...] = ()  # modules a warm server may import for its cells' processes (fork-safe)
    # the dataset.format values its readers read
    formats: tuple[str, ...] = ("files", "tfrecord", "hdf5", "npz")
    # the loader.* settings its worker processes honour beside num_workers; another one set is refused
    loader_settings: tuple[str, ...] = ()
    reads_with: str = ""  # what its cells read with, for the report (`code` in backticks)
    rank: int = 100  # where it comes in lists and error messages (the paper's, TensorFlow, first)
    # for the dry run's time (campaign.estimate), measured on 2 cores: one reader's rate decoding images
    # against one tf.data map thread's, and what starting its readers adds to each run
    decode_rate: float = 1.0
    run_start_s: float = 0.0
    # its engine module for each workload it runs (workload name -> module): the workloads it runs on
    engines: dict[str, str] = field(default_factory=dict)
    # the workloads whose engine here works on an object store as storage (storage.kind=object): reads
    # the dataset's objects, or writes and reads back its own
    reads_objects: tuple[str, ...] = ()
