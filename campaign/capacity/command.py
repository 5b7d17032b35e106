"""``python -m campaign.capacity accelerator=<profile> [storage=a,b] [overrides]``: how many accelerators
can each storage tier feed at AU >= the profile's threshold? Predict it, then prove it.

Per tier, into ``<out>/<tier>/``, as ordinary campaigns (locally, or as Slurm jobs with platform=slurm):
  storage_rate  a cold read-only pipeline on the tier, 2 map threads per core, one reader on each of the
                cell's nodes: what the tier delivers to them all;
  cpu_rate      the decode pipeline on one map thread with a warm cache, on one node: what one client
                core delivers;
  prove         workload=emulated cells of N accelerators per node (platform.tasks_per_node=N, on every
                node of platform.nodes), every run cold:
                first N - 1, N and N + 1 around the prediction, then one more up or down until the
                largest N whose every run held the threshold has a failing N + 1 above it.
Then ``capacity.csv`` (predicted against measured, the limit, the MB/s at capacity, the bound at N + 1),
the capacity figure and the report, over every cell. Overrides go to every campaign (e.g.
dataset.num_images=1024, threads=2, repeats=3).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

from campaign.capacity.search import LOADER, MEASURE, loader_defaults, node_count, tier_row  # noqa: F401
from campaign.errors import ConfigError
from campaign.overrides import value_of

CONF = Path(__file__).resolve().parent.parent.parent / "conf"
MARK = "capacity.txt"  # the search's settings in its folder, from before its first cell (a rerun resumes)


# the settings that choose the cells' dataset and its size (+experiment=mlperf's is the profile's what-if
# scale, conf/dataset/default_for_mlperf.yaml)
_SETS_THE_DATASET = ("experiment", "workload", "dataset", "accelerator", "hydra.searchpath")  # and their keys


def _images(overrides: list[str]) -> int:
    """Images in the dataset the cells read (dataset.num_images, else what the dataset preset, the
    experiment or the accelerator profile makes it)."""
    given = value_of(overrides, "dataset.num_images")
    if given is not None:
        return int(given)
    return _composed_images(tuple(o for o in overrides if _key(o).startswith(_SETS_THE_DATASET)))


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


@functools.cache
def _composed_images(overrides: tuple[str, ...]) -> int:
    from campaign import choices

    chosen = [] if any(_key(o) == "workload" for o in overrides) else ["workload=emulated"]  # the search's
    return int(choices.compose([*chosen, *overrides]).dataset.num_images)


def _fit_nodes(overrides: list[str], most: int, bound_by: str = "") -> tuple[int, str]:
    """(``most``, lowered to the accelerators a node of the Slurm partition can hold at
    platform.cpus_per_task CPUs each; what lowered it: that, or ``bound_by`` where it did not): a count
    above it would stay pending for ever."""
    from omegaconf import OmegaConf

    name = value_of(overrides, "platform") or "workstation"
    preset = CONF / "platform" / f"{name}.yaml"
    conf = OmegaConf.load(preset) if preset.exists() else OmegaConf.create({})
    if str(conf.get("kind", "")) != "slurm":
        return most, bound_by
    from campaign.slurm.submit import partition_nodes

    partition = value_of(overrides, "platform.partition") or conf.get("partition")
    per_task = int(value_of(overrides, "platform.cpus_per_task") or conf.get("cpus_per_task") or 2)
    cpus = partition_nodes(partition)
    if not cpus or max(cpus) // per_task >= most:
        return most, bound_by
    fit = max(1, max(cpus) // per_task)
    nodes = f"partition {partition}" if partition else "the default partition"
    why = (
        f"{fit} a node: the nodes of {nodes} have {max(cpus)} CPUs and each accelerator's task takes "
        f"platform.cpus_per_task={per_task}"
    )
    print(f"[capacity] at most {why}", flush=True)
    return fit, why


def _profile(name: str | None, overrides: list[str]) -> dict:
    """The profile conf/accelerator/<name>.yaml (or in hydra.searchpath), once every override's key is
    known."""
    from omegaconf import OmegaConf

    from campaign import choices, keys

    why = keys.unknown_key(overrides)  # first: a typo in accelerator= would read as no profile
    if why:
        raise ValueError(why)
    folders = [CONF, *choices.searchpath(overrides)]
    known = {p.stem: p for d in folders for p in (d / "accelerator").glob("*.yaml")}
    if name is None:
        raise ValueError(
            f"accelerator is not set: choose the profile to emulate with accelerator=<name>; valid: "
            f"{', '.join(sorted(known))}"
        )
    if name not in known:
        raise ValueError(f"accelerator={name}: unknown profile; valid: {', '.join(sorted(known))}")
    return OmegaConf.to_container(OmegaConf.load(known[name]))  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    """The whole command; returns the exit status. Ctrl-C or SIGTERM ends it in one line (``jobs.interrupts``:
    its rounds, each a campaign of their own, pass the same signal on and unwind their cells)."""
    from jobs import interrupts

    interrupts.install()
    try:
        with interrupts.surfaced():  # a library's error in place of the interrupt is the interrupt
            return _main(argv)
    except (KeyboardInterrupt, interrupts.Interrupted) as e:
        print(
            f"campaign.capacity: interrupted by {interrupts.name_of(e)} before its search began; nothing ran",
            file=sys.stderr,
        )
        return 128 + interrupts.signum_of(e)


def _main(argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(prog="python -m campaign.capacity", description=__doc__.split("\n")[0])
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="campaign folder, or hydra.sweep.dir=<folder> (default multirun/capacity-<date>-<time>)",
    )
    p.add_argument("--most", type=int, default=8, help="the most accelerators a cell emulates (default 8)")
    p.add_argument(
        "overrides",
        nargs="*",
        help="accelerator=<profile>, storage=<tiers>, and Hydra overrides for every cell",
    )
    args = p.parse_intermixed_args(argv)  # overrides may come after --out and the other options
    try:
        profile = _profile(value_of(args.overrides, "accelerator"), args.overrides)
    except (ValueError, ConfigError) as e:  # ConfigError: an override Hydra cannot parse
        print(f"campaign.capacity: {e}; nothing was run", file=sys.stderr)
        return 2
    why = _arguments_problem(args)
    if why:
        print(f"campaign.capacity: {why}; nothing was run", file=sys.stderr)
        return 2
    nodes = node_count(args.overrides)
    batch = int(value_of(args.overrides, "batch_size") or profile["batch_size"])
    # every accelerator gets two batches a run, and the set is shared among every node's accelerators
    most = min(args.most, _images(args.overrides) // (2 * batch * nodes))
    if most < 1:
        of = f" of {nodes} nodes" if nodes > 1 else ""
        print(
            f"campaign.capacity: {_images(args.overrides)} images give no accelerator{of} "
            f"two batches of {batch}: use more images (dataset.num_images) or a smaller batch_size; "
            "nothing was run",
            file=sys.stderr,
        )
        return 2
    from campaign.capacity import checks

    # as each tier's campaigns will
    why = checks.cells(args.overrides, profile)
    if why:
        print(f"campaign.capacity: {why}; nothing was run", file=sys.stderr)
        return 2
    most, bound_by = checks.most_tasks(args.overrides, profile, most)
    if bound_by:
        print(f"[capacity] at most {bound_by}", flush=True)
    most, bound_by = _fit_nodes(args.overrides, most, bound_by)
    from analysis import outputs
    from analysis.tables.capacity import CAPACITY
    from campaign import outputs as campaign_outputs

    out = args.out or Path("multirun") / time.strftime("capacity-%Y-%m-%d-%H-%M-%S")
    why = campaign_outputs.owned_problem(out, "--out")
    # a search's folder again: fine
    if why is None and (taken := outputs.study_folder_problem(out, MARK, CAPACITY)):
        why = f"--out: {taken}; choose a new folder"
    if why:
        print(f"campaign.capacity: {why}; nothing was run", file=sys.stderr)
        return 2
    tiers = (value_of(args.overrides, "storage") or "local").split(",")
    from campaign.capacity import preview

    if preview.is_dry_run(args.overrides, profile):
        return preview.plan(out, profile, tiers, most, _most_why(args, most, batch, bound_by), args.overrides)
    import pandas as pd

    from jobs import interrupts

    _mark(out, profile, tiers, most, args.overrides)
    try:
        with interrupts.surfaced():
            rows = []
            for tier in tiers:
                try:
                    rows.append(tier_row(tier, profile, args.overrides, most, out, bound_by))
                except RuntimeError as e:
                    interrupts.surface(e)  # a signal's, not the tier's: the search ends
                    print(f"[capacity] {tier}: {e}", file=sys.stderr, flush=True)
            if not rows:
                return 1
            return _report(out, pd.DataFrame(rows), len(rows) < len(tiers))
    except (KeyboardInterrupt, interrupts.Interrupted) as e:  # the rounds' campaigns have unwound
        print(
            f"campaign.capacity: interrupted by {interrupts.name_of(e)}; the rounds it finished are kept in "
            f"{out}; the same command with --out {out} resumes the search there (finished cells are skipped)",
            file=sys.stderr,
        )
        return 128 + interrupts.signum_of(e)


def _most_why(args, most: int, batch: int, bound_by: str) -> str:
    """What set the most accelerators the search tries, in words."""
    if bound_by:
        return bound_by
    if most < args.most:
        return f"{_images(args.overrides):,} images give at most {most} accelerators two batches of {batch}"
    return f"--most {most}"


def _arguments_problem(args) -> str | None:
    """Why the search's own arguments cannot run (one line), or None."""
    from campaign.capacity import checks

    why = checks.sweep_dir(args)
    if why:
        return why
    try:
        if node_count(args.overrides) < 1:
            raise ValueError
    except ValueError:
        return f"platform.nodes={value_of(args.overrides, 'platform.nodes')}: must be a whole number >= 1"
    if value_of(args.overrides, "platform.tasks_per_node") is not None:
        return (
            "platform.tasks_per_node is what the search sets (accelerators per node): leave it out and bound "
            "the search with --most"
        )
    return checks.arguments(args.most, args.overrides)


def _mark(out: Path, profile: dict, tiers: list[str], most: int, overrides: list[str]) -> None:
    """The search's marker, written before its first cell so that a killed search's folder is known
    again as one and its rerun resumes (each round's campaign resumes its own cells)."""
    from analysis import outputs

    out.mkdir(parents=True, exist_ok=True)
    outputs.write_text(
        out / MARK,
        f"accelerator={profile['name']}\ntiers={','.join(tiers)}\nmost={most}\n"
        f"overrides={' '.join(overrides)}\n",
    )


def _report(out: Path, table, some_failed: bool) -> int:
    from analysis import standing
    from analysis.build import build
    from analysis.outputs import create
    from analysis.report.capacity import answer_line
    from analysis.report.page import write_report
    from analysis.tables.capacity import CAPACITY
    from campaign import outputs

    with create(out / CAPACITY) as f:
        table.to_csv(f, index=False)
    built = build(out)
    report = write_report(out, built=built)
    outputs.link_latest(out)  # each round pointed it at itself while it ran
    for r in table.to_dict("records"):  # each answer says what its tier's runs stood on, where it mattered
        print(answer_line(r) + standing.suffix(out / r["tier"]), flush=True)
    print(f"[capacity] table: {out / 'capacity.csv'}; report: {report}", flush=True)
    return 1 if some_failed or built.failed else 0
