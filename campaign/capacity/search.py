"""The capacity search on one tier (``python -m campaign.capacity``): measure the rates, predict the count,
then prove it with emulated cells, round by round.

Prediction (a rate model in the spirit of Plumber, Kuchnik et al., MLSys'22): one accelerator at
AU = threshold consumes ``batch × threshold ÷ step time`` images/s. The tier delivers what a cold
read-only pipeline reads from it; the client delivers its decode rate per core on as many cores as
the accelerators' map threads may use. The predicted count is the largest N both sides sustain, and
the side that stops N + 1 is the predicted limit.

On several nodes (``platform.nodes=K``) N is the count per node and every cell runs N on each of the K
nodes: the tier's rate is what readers on all K nodes read from it together, and each node decodes
on its own cores. Nodes that share one kernel (containers, or the namespaced test cluster) share its
cores too, so a node's cores are the kernel's divided among its nodes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from omegaconf import OmegaConf

from analysis.tables.capacity import tried
from campaign.overrides import value_of

MEASURE = {"repeats": "3", "warmup": "0"}  # every cell's runs unless set: three, medians, no warm-up
# an accelerator's data loader fills the next batches while it computes (unless set)
LOADER = {"prefetch": "2"}


def loader_defaults(overrides: list[str]) -> dict:
    """LOADER for tf.data; nothing for framework=pytorch, whose workers load ahead by themselves
    (loader.prefetch_factor) and which refuses tf.data's prefetch."""
    from jobs import frameworks

    chosen = value_of(overrides, "framework") or _experiment(tuple(overrides)).get("framework")
    return LOADER if frameworks.get(chosen or frameworks.PAPERS).prefetch else {}


@functools.cache
def _experiment(overrides: tuple[str, ...]) -> dict:
    """What an experiment the user chose (``+experiment=mlperf``) sets, so that its settings count as given,
    as the command line's do: {key: value} of its own top-level settings, and the framework its defaults
    choose ({} without one)."""
    name = value_of(list(overrides), "experiment")
    if name is None:
        return {}
    from campaign import choices

    path = choices.CONF_DIR / "experiment" / f"{name}.yaml"
    own = OmegaConf.to_container(OmegaConf.load(path), resolve=False) if path.is_file() else {}
    mine = [o for o in overrides if o.split("=", 1)[0].lstrip("+") not in SET_BY_SEARCH]
    settings = {str(k): v for k, v in own.items() if k not in ("defaults", "hydra")}  # type: ignore[union-attr]
    return {**settings, "framework": choices.compose(mine).framework.name}


def _given(overrides: list[str]) -> set[str]:
    """The keys the user set: on the command line, or through the experiment they chose."""
    return {o.split("=", 1)[0] for o in overrides} | set(_experiment(tuple(overrides)))


# what the search sets in every cell itself: the user's overrides of these do not go to the cells
SET_BY_SEARCH = ("storage", "accelerator", "threads", "batch_size", "platform.tasks_per_node")


@dataclass(frozen=True)
class Inputs:
    tier: str
    accelerator: str
    batch_size: int
    step_time_s: float  # the profile's, at its own batch size
    profile_batch_size: int
    au_threshold: float  # 0..1
    tier_images_per_s: float  # a cold read-only pipeline on the tier (storage side)
    tier_mb_per_s: float
    core_images_per_s: float  # the decode pipeline on one thread, warm cache (client side, per core)
    cores: int  # of one node's kernel
    threads: int  # map threads of each accelerator's pipeline
    nodes: int = 1  # nodes every cell runs on; N is per node
    kernels: int = 1  # distinct kernels among those nodes (a node's cores = cores x kernels / nodes)

    @classmethod
    def of(
        cls,
        tier: str,
        profile: dict,
        overrides: list[str],
        rates: tuple[float, float, float] = (0.0, 0.0, 0.0),
        cores: int = 1,
        kernels: int = 1,
    ) -> Inputs:
        """``tier``'s inputs for accelerator ``profile`` under ``overrides``; ``rates``: the tier's images/s
        and MB/s and one core's images/s, as measured (none in a dry run)."""
        nodes = node_count(overrides)
        return cls(
            tier,
            profile["name"],
            int(value_of(overrides, "batch_size") or profile["batch_size"]),
            float(profile["step_time_s"]),
            int(profile["batch_size"]),
            float(profile["au_threshold"]),
            *rates,
            cores,
            int(value_of(overrides, "threads") or 1),
            nodes,
            min(kernels, nodes),
        )

    def node_cores(self) -> float:
        return self.cores * min(self.kernels, self.nodes) / self.nodes


def demand(inp: Inputs) -> float:
    """Images/s one accelerator consumes when it is busy ``au_threshold`` of the time."""
    per_image_s = inp.step_time_s / inp.profile_batch_size
    return inp.au_threshold / per_image_s


def predict(inp: Inputs, most: int = 1000) -> dict:
    """The predicted capacity per node, its limit and the rates it came from (a flat dict for
    capacity.csv)."""
    need = demand(inp) * (1 - 1e-9)  # a supply equal to the demand suffices, whatever the rounding
    n_storage = math.floor(inp.tier_images_per_s / (need * inp.nodes))
    n_cpu = 0
    while (
        n_cpu < most
        and (n_cpu + 1) * need <= min(inp.node_cores(), (n_cpu + 1) * inp.threads) * inp.core_images_per_s
    ):
        n_cpu += 1
    need = demand(inp)
    n = min(n_storage, n_cpu)
    limit = "storage" if n_storage < n_cpu else "cpu" if n_cpu < n_storage else "storage and cpu"
    return {
        **asdict(inp),
        "demand_images_per_s": need,
        "predicted_storage_n": n_storage,
        "predicted_cpu_n": n_cpu,
        "predicted_n": n,
        "predicted_limit": limit,
    }


def next_counts(seen: dict[int, dict], predicted: int, most: int) -> list[int]:
    """The accelerator counts to run next: first N - 1, N and N + 1 around the prediction; then one
    more above the largest that held, or below the smallest that failed, until the largest count that
    held has a failing count above it (or ``most`` is reached). [] when the search is done."""
    if not seen:
        n = max(1, predicted)
        return [c for c in sorted({max(1, n - 1), n, n + 1}) if c <= most]
    held = [n for n, v in seen.items() if v["passed"]]
    best = max(held, default=0)
    if held:
        return [] if best >= most or best + 1 in seen else [best + 1]
    lowest = min(seen)
    return [lowest - 1] if lowest > 1 else []


def measured(seen: dict[int, dict], most: int, bound_by: str = "") -> tuple[int, str]:
    """(the largest count that held with every run passing and every smaller count tried passing too, how
    the search ended); ``bound_by``: what set ``most`` when not --most (e.g. the CPUs of the cluster's
    nodes). A count that held above one that failed is no capacity: runs that noisy (a busy machine)
    bracket nothing, and the note says so."""
    failed = sorted(n for n, v in seen.items() if not v["passed"])
    held = sorted(n for n, v in seen.items() if v["passed"])
    best = max((n for n in held if not failed or n < failed[0]), default=0)
    stray = [n for n in held if n > best]
    if stray:
        below = max(f for f in failed if f < stray[0])
        note = (
            f"{_accelerators(stray[0])} held but {_accelerators(below)} did not: runs this noisy bracket no "
            "capacity (the machine busy? see each run's others' CPU share)"
        )
        return best, note if best else f"{note}; even one accelerator fell below the threshold"
    if best >= most and best + 1 not in seen:
        return best, f"at least {best}: the search stopped at {bound_by or f'--most {most}'}"
    if best == 0:
        return 0, "even one accelerator fell below the threshold"
    return best, ""


def _accelerators(n: int) -> str:
    return f"{n} accelerator{'s' if n != 1 else ''}"


def row(pred: dict, seen: dict[int, dict], most: int, bound_by: str = "") -> dict:
    """The tier's line of capacity.csv."""
    n, note = measured(seen, most, bound_by)
    at, above = seen.get(n, {}), seen.get(n + 1, {})
    return {
        **pred,
        "measured_n": n,
        "measured_total": n * pred.get("nodes", 1),
        "error_n": n - pred["predicted_n"],
        "au_at_n": at.get("au_min"),
        "mb_per_s_at_n": at.get("mb_per_s"),
        "au_at_n_plus_1": above.get("au_min"),
        "bound_at_n_plus_1": above.get("bound", ""),
        "counts_tried": " ".join(str(c) for c in sorted(seen)),
        "note": note,
    }


def node_count(overrides: list[str]) -> int:
    """The nodes every cell runs on (platform.nodes, 1 unless set)."""
    return int(value_of(overrides, "platform.nodes") or 1)


def probes(tier: str, profile: dict, overrides: list[str]) -> list[tuple[str, list[str], str]]:
    """The two campaigns that measure the rates the prediction is made from, as (sub-folder, overrides,
    what it measures): the tier's read rate (one reader task on each node, cold) and one core's rate (one
    thread on one node, warm cache): decoding images, or reading arrays whole where the profile's samples
    are arrays (unet3d's volumes, which no cell decodes). Both read the samples the search's emulated cells
    read (``_as_the_cells_read``)."""
    from jobs.observe import usage

    common = [*common_overrides(overrides), *_as_the_cells_read(tier, profile, overrides)]
    arrays = profile.get("samples") == "arrays"
    core = (
        ["workload=readonly"]
        if arrays
        else ["workload=microbench", f"workload.image_side={profile['image_side']}"]
    )
    return [
        (
            "storage_rate",
            [
                "workload=readonly",
                f"storage={tier}",
                f"threads={2 * usage.cores()}",
                "cache=cold",
                *common,
                "platform.tasks_per_node=1",
            ],
            "the tier's read rate",
        ),
        (
            "cpu_rate",
            [
                *core,
                f"storage={tier}",
                "threads=1",
                "cache=warm",
                *common,
                "platform.nodes=1",
                "platform.tasks_per_node=1",
            ],
            "one core's read rate of its arrays" if arrays else "one core's decode rate",
        ),
    ]


def _as_the_cells_read(tier: str, profile: dict, overrides: list[str]) -> list[str]:
    """What makes a probe read the samples the search's emulated cells read: their profile (its samples'
    sizes and kind), their batch size, and, unless the user chose one, the dataset preset those cells
    compose with (the emulated workload's own, or the experiment's: ``+experiment=mlperf``'s what-if scale).
    Before, the probes read the default dataset's ImageNet-sized JPEGs, whatever the cells read."""
    cell = prove_cell(tier, profile, overrides)
    same = [f"accelerator={profile['name']}", next(o for o in cell if o.startswith("batch_size="))]
    if "dataset" not in _given(overrides):
        same.append(f"dataset={_preset_of(tuple(cell), 'dataset')}")
    return same


@functools.cache
def _preset_of(cell: tuple[str, ...], group: str) -> str:
    """The preset of config group ``group`` that a cell of ``cell``'s overrides composes with."""
    from campaign import choices

    return choices.chosen([*cell, "platform.tasks_per_node=1"], group)


def _measure(tier: str, profile: dict, overrides: list[str], out: Path) -> tuple[float, float, float, int]:
    """(tier images/s, tier MB/s, one core's images/s, kernels among the nodes), each rate the median of
    its campaign's runs; the tier's rate read by one task on each node, one core's on one node."""
    from analysis.tables.capacity import kernels, median
    from campaign import failures, subcampaign

    for name, cells, what in probes(tier, profile, overrides):
        if subcampaign.run(cells, out / name) != 0:
            raise RuntimeError(
                f"{what} could not be measured: {failures.why(cells, out / name)} (see {out / name})"
            )
    return (
        median(out / "storage_rate", "images_per_s"),
        median(out / "storage_rate", "mb_per_s"),
        median(out / "cpu_rate", "images_per_s"),
        kernels(out / "storage_rate"),
    )


def _prove(tier: str, profile: dict, pred: dict, cell: list[str], most: int, out: Path) -> dict:
    """Run emulated cells until the search is done; the verdict per count (``tried``)."""
    import pandas as pd

    from campaign import subcampaign

    seen: dict[int, dict] = {}
    counts = next_counts(seen, pred["predicted_n"], most)
    while counts:
        every = sorted({*seen, *counts})
        print(
            f"[capacity] {tier}: {', '.join(map(str, counts))} emulated accelerator(s)"
            f"{' per node' if pred['nodes'] > 1 else ''}",
            flush=True,
        )
        rc = subcampaign.run([*cell, f"platform.tasks_per_node={','.join(map(str, every))}"], out / "prove")
        results = (
            pd.read_csv(out / "prove" / "results.csv") if (out / "prove" / "results.csv").exists() else None
        )
        now = tried(results, tier, float(profile["au_threshold"])) if results is not None else {}
        missing = [c for c in counts if c not in now]
        if rc != 0 and missing:
            raise RuntimeError(f"the cells of {missing} accelerators failed (see {out / 'prove'})")
        seen = now
        counts = next_counts(seen, pred["predicted_n"], most)
    return seen


def tier_row(
    tier: str, profile: dict, overrides: list[str], most: int, out: Path, bound_by: str = ""
) -> dict:
    """Measure, predict and prove one tier; its line of capacity.csv."""
    from jobs.observe import usage

    tier_img, tier_mb, core_img, kernels = _measure(tier, profile, overrides, out / tier)
    inp = Inputs.of(tier, profile, overrides, (tier_img, tier_mb, core_img), usage.cores(), kernels)
    nodes = inp.nodes
    pred = predict(inp, most)
    where = "" if nodes == 1 else f" per node on {nodes} nodes"
    cores = usage.cores()
    shared = (
        f", {inp.node_cores():g} cores a node: {nodes} nodes share {inp.kernels} kernel(s) of {cores} cores"
        if inp.kernels < nodes
        else f", {cores} cores a node"
        if nodes > 1
        else f" ({cores} cores)"
    )
    to_all = " to all nodes" if nodes > 1 else ""
    verb = "reads its arrays at" if profile.get("samples") == "arrays" else "decodes"
    print(
        f"[capacity] {tier}: predicted {pred['predicted_n']} accelerator(s){where}, "
        f"limit {pred['predicted_limit']}: the tier reads {tier_img:.0f} images/s{to_all}, one core {verb} "
        f"{core_img:.0f} images/s{shared}, one {profile['name']} needs "
        f"{pred['demand_images_per_s']:.0f} images/s at AU {100 * inp.au_threshold:.0f}%",
        flush=True,
    )
    cell = prove_cell(tier, profile, overrides)
    return row(pred, _prove(tier, profile, pred, cell, most, out / tier), most, bound_by)


def common_overrides(overrides: list[str]) -> list[str]:
    """The user's overrides every campaign of the search gets (those of what the search sets left out),
    after MEASURE's settings the user did not give."""
    common = [o for o in overrides if o.split("=", 1)[0] not in SET_BY_SEARCH]
    given = _given(common)
    return [f"{k}={v}" for k, v in MEASURE.items() if k not in given] + common


def prove_cell(tier: str, profile: dict, overrides: list[str]) -> list[str]:
    """The overrides of the search's emulated cells on ``tier``, but for platform.tasks_per_node (the
    accelerators per node, which each round sets)."""
    common = common_overrides(overrides)
    given = _given(common)
    loader = [f"{k}={v}" for k, v in loader_defaults(overrides).items() if k not in given]
    return [
        "workload=emulated",
        f"accelerator={profile['name']}",
        f"storage={tier}",
        f"threads={int(value_of(overrides, 'threads') or 1)}",
        f"batch_size={int(value_of(overrides, 'batch_size') or profile['batch_size'])}",
        "cache=cold",
        *loader,
        *common,
    ]
