"""The frameworks a cell can read and train with (``framework=<name>``, conf/framework/): each one a package
of its own, ``jobs/frameworks/<name>/``, that declares what the framework can do (its ``FRAMEWORK``, a
``jobs.frameworks.framework.Framework``) and holds its engines, the modules that run a workload in it.
Validation, the runner and the analysis ask a framework what it can do, and a workload calls the engine
its cell's framework gives it (``Workload.engine``); none compares a framework's name. A framework is added
as a package with its preset: nothing else names it. One outside the tool is a package of the namespace
package ``iocampaign_frameworks`` on ``PYTHONPATH`` (docs/extending.md: Adding a framework).

- ``tensorflow``: tf.data, the paper's pipeline: ``threads`` map threads read and decode in one process.
- ``pytorch``: ``torch.utils.data.DataLoader``: ``loader.num_workers`` worker processes (``threads`` when
  null) each read and decode whole samples, ``loader.prefetch_factor`` batches ahead each.
- ``jax``: Grain's ``DataLoader`` (JAX's data loader): ``loader.num_workers`` worker processes (``threads``
  when null), one read thread each, read and decode whole samples.
"""

from __future__ import annotations

import functools

from jobs.errors import ConfigError
from jobs.frameworks.framework import Framework

EXTERNAL = "iocampaign_frameworks"  # the namespace package of frameworks outside the tool, on sys.path


@functools.cache
def declared() -> dict[str, Framework]:
    """Every framework package's declaration, the tool's and those of the ``iocampaign_frameworks``
    namespace package (a folder of that name, without ``__init__.py``, on ``PYTHONPATH``), in their
    ``rank`` (the paper's first): importing a package imports no framework, only what it declares. Found
    on first use (``FRAMEWORKS``), with the ``sys.path`` of the process that uses them, not at import (a
    warm server's children each find their own)."""
    from jobs import owned

    found = owned.declarations(__name__, __path__, EXTERNAL, "FRAMEWORK", Framework, packages=True)
    named: dict[str, Framework] = {}
    for fw in sorted(found, key=lambda fw: fw.rank):
        if fw.name in named:
            raise ConfigError(f"framework={fw.name} is declared twice (a package of {EXTERNAL} names it too)")
        named[fw.name] = fw
    return named


def __getattr__(name: str):
    if name == "FRAMEWORKS":  # {name: its Framework}, found on first use (``declared``)
        return declared()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# the paper's framework: its grids' and claims', and that of a config or record written before the axis
PAPERS = "tensorflow"


def get(name: str) -> Framework:
    try:
        return declared()[str(name)]
    except KeyError:
        raise ConfigError(
            f"framework={name} is not a framework; choose one of {', '.join(declared())}"
        ) from None


def running(workload: str) -> tuple[str, ...]:
    """The frameworks whose package has an engine for ``workload`` (a workload's name)."""
    return tuple(n for n, fw in declared().items() if workload in fw.engines)


def reading_objects(workload: str) -> tuple[str, ...]:
    """The frameworks whose engine of ``workload`` works on an object store."""
    return tuple(n for n, fw in declared().items() if workload in fw.reads_objects)


def of(cfg) -> Framework:
    """The framework of a cell's typed config (TensorFlow for a config written before the axis)."""
    section = getattr(cfg, "framework", None)
    return get(section.name if section is not None else PAPERS)


def own_packages(fw: Framework, packages: tuple[str, ...]) -> tuple[str, ...]:
    """Of a workload's ``packages`` (``Workload.packages``: those of every framework it runs on), the ones
    a cell of ``fw`` uses: another framework's are left out of its provenance, where TensorFlow's would
    have TensorFlow imported to describe the accelerator (and its start-up lines printed) in a PyTorch
    campaign."""
    others = {p for f in declared().values() if f is not fw for p in (f.package, *f.companions)}
    return tuple(p for p in packages if p not in others)


def workers(cfg) -> int:
    """DataLoader worker processes of a ``framework=pytorch`` cell: ``loader.num_workers``, else ``threads``
    (an integer there; ``autotune`` has no meaning for a DataLoader)."""
    from jobs.schema import threads_value

    if cfg.loader.num_workers is not None:
        return int(cfg.loader.num_workers)
    threads = threads_value(cfg.threads)
    if not isinstance(threads, int):
        raise ConfigError(
            f"threads={cfg.threads} has no meaning for PyTorch's DataLoader: give threads=<N> (N workers) "
            "or loader.num_workers=<N>"
        )
    return threads


def described(cfg) -> str:
    """What a cell's line in a dry run says of its framework: nothing for TensorFlow (the paper's), else
    `` framework=<name> workers=<N>``."""
    fw = of(cfg)
    if fw.name == PAPERS:
        return ""
    return (
        f" framework={fw.name} workers={workers(cfg)}" if fw.readers == "workers" else f" framework={fw.name}"
    )


@functools.cache
def _has(package: str) -> bool:
    """Whether this Python can import ``package`` (looked up once per process: planning asks per cell)."""
    import importlib.util

    return importlib.util.find_spec(package) is not None


def _installed(fw: Framework) -> None:
    for package in (fw.package, *fw.companions):
        if not _has(package):
            raise ConfigError(
                f"framework={fw.name} needs the {package} package, which this Python does not have: "
                + (
                    f"pip install '.[{fw.name}]' (make install does it; README: Install)"
                    if fw.engines and all(m.startswith(__name__) for m in fw.engines.values())
                    else f"install it where the framework's package {fw.name} says"
                )
            )


def check(cfg, engines, gpu: bool = True) -> None:
    """Raise ConfigError (one line naming the setting) for a framework or loader setting that cannot run:
    ``engines``, the frameworks the cell's workload runs on; ``gpu``, whether the machine the cell runs on
    may have a GPU (false: this one, without a GPU driver)."""
    fw = of(cfg)
    _installed(fw)
    if fw.name not in engines:
        raise ConfigError(
            f"framework={fw.name}: workload={cfg.workload.name} runs on {', '.join(engines)} only"
        )
    _reads(cfg, fw)
    for asked, able, what in (
        (cfg.input.service, fw.service, "input.service=true"),
        (cfg.trace.posix, fw.posix_traceable, "trace.posix=true"),
        (cfg.prefetch_to == "device", fw.prefetch_to_device, "prefetch_to=device"),
    ):
        if asked and not able:
            raise ConfigError(f"{what}: framework={fw.name} cannot do it yet (framework=tensorflow can)")
    if cfg.prefetch and not fw.prefetch:
        raise ConfigError(
            f"prefetch={cfg.prefetch} is tf.data's transformation: framework={fw.name}'s workers load "
            "loader.prefetch_factor batches ahead each; leave prefetch=0"
        )
    loader = cfg.loader
    if loader.num_workers == 0 and loader.prefetch_factor is not None:  # whatever the framework: never used
        raise ConfigError(
            f"loader.prefetch_factor={loader.prefetch_factor} with loader.num_workers=0: no worker loads "
            "ahead, and PyTorch refuses a prefetch_factor without workers; leave loader.prefetch_factor null"
        )
    if fw.readers != "workers":
        _no_loader(cfg, fw)
        return
    _loader_settings(cfg, fw)
    n = workers(cfg)
    if n < 0:
        raise ConfigError(f"loader.num_workers={n} must be 0 (load in the training process) or more")
    if n > 256:
        raise ConfigError(
            f"loader.num_workers={n}: each worker is a process holding a copy of the dataset's index; "
            "at most 256"
        )
    if loader.pin_memory and not gpu:
        raise ConfigError(
            "loader.pin_memory=true: this machine has no GPU for page-locked batches to go to (PyTorch would "
            "ignore it and the record would say otherwise); leave loader.pin_memory=false"
        )
    if n == 0 and loader.persistent_workers:
        raise ConfigError(
            "loader.persistent_workers=true needs loader.num_workers of 1 or more (workers to keep)"
        )
    if cfg.trace.posix and n > 0 and str(loader.multiprocessing_context or "fork") != "fork":
        raise ConfigError(
            f"trace.posix=true with loader.multiprocessing_context={loader.multiprocessing_context}: a "
            "started worker is a new program the tracer is not loaded into; trace workers that fork "
            "(loader.multiprocessing_context=fork, or null on Linux)"
        )
    if n == 0 and loader.multiprocessing_context is not None:
        raise ConfigError(
            f"loader.multiprocessing_context={loader.multiprocessing_context} needs loader.num_workers of 1 "
            "or more (it is how workers start)"
        )


def _reads(cfg, fw: Framework) -> None:
    """The dataset's format: one the framework's readers can read (a workload without a dataset: any)."""
    if cfg.dataset is not None and str(cfg.dataset.format) not in fw.formats:
        raise ConfigError(
            f"dataset.format={cfg.dataset.format}: framework={fw.name} reads {', '.join(fw.formats)} only"
        )


# the loader.* settings of PyTorch's DataLoader beside num_workers (their defaults: jobs.schema.LoaderConf)
_LOADER_SETTINGS = ("prefetch_factor", "pin_memory", "persistent_workers", "multiprocessing_context")


def _no_loader(cfg, fw: Framework) -> None:
    """A framework that reads with threads in one process has no loader: a ``loader.*`` setting would be
    recorded and never used."""
    from jobs.schema import LoaderConf

    defaults = LoaderConf()
    for name in ("num_workers", *_LOADER_SETTINGS):
        value, default = getattr(cfg.loader, name), getattr(defaults, name)
        if value != default:
            shown, left = (_written(v) for v in (value, default))
            raise ConfigError(
                f"loader.{name}={shown}: framework={fw.name} reads with {fw.reader}s (threads=N), not a "
                f"loader's workers; leave loader.{name} {left}"
            )


def _written(value) -> str:
    """A setting's value as the command line writes it (true, null)."""
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _loader_settings(cfg, fw: Framework) -> None:
    """A ``loader.*`` setting of PyTorch's DataLoader that this framework's loader does not have."""
    from jobs.schema import LoaderConf

    defaults = LoaderConf()
    for name in _LOADER_SETTINGS:
        value, default = getattr(cfg.loader, name), getattr(defaults, name)
        if name not in fw.loader_settings and value != default:
            raise ConfigError(
                f"loader.{name}={value}: framework={fw.name}'s loader has no such setting "
                f"(framework=pytorch's DataLoader has); leave it {'null' if default is None else default}"
            )


def unit(name: str, n=None) -> str:
    """What reads in parallel in framework ``name`` (a record's), short: ``thread``, ``worker``; with ``n``,
    counted (``2 threads``, ``1 worker``). A name this version does not know reads with threads."""
    fw = declared().get(name)
    word = fw.reader.split()[-1] if fw is not None else "thread"
    return word if n is None else f"{n} {word}{'' if str(n) == '1' else 's'}"


def reader_words(names) -> tuple[str, tuple[str, str]]:
    """What reads in parallel in the frameworks ``names`` (records'), for a figure: the legend's title ("map
    threads / DataLoader workers / Grain workers") and a bar's word, singular and plural ("thread / worker",
    "threads / workers"); a name this version does not know reads with map threads."""
    known = declared()
    kinds = list(dict.fromkeys(known[n].reader if n in known else "map thread" for n in names))
    units = list(dict.fromkeys(unit(n) for n in names))
    return " / ".join(f"{k}s" for k in kinds), (" / ".join(units), " / ".join(f"{u}s" for u in units))


def reads_with(name: str) -> str:
    """What framework ``name``'s (a record's) cells read with, for the report; a name this version does not
    know as it is."""
    fw = declared().get(name)
    return fw.reads_with if fw is not None else f"`framework={name}`"


def with_workers(name: str) -> bool:
    """Whether framework ``name`` (a record's) reads with worker processes (a DataLoader's)."""
    fw = declared().get(name)
    return fw is not None and fw.readers == "workers"


def label(name: str) -> str:
    """Framework ``name``'s (a record's) name in figures and the report; a name this version does not know
    as it is."""
    fw = declared().get(name)
    return fw.label if fw is not None else name
