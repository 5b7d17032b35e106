"""``python -m campaign +experiment=paper``: the whole study of the paper as one campaign.

The study is several grids (Table I, Figs. 4-5, 6 and 8, 7, 9-10) that a single cartesian sweep
cannot express; each runs as its own multirun into a sub-folder of one campaign folder, one after
another, and the report is built over all of them. Scales:

  full         the paper's sizes (16,384 / 9,144 images, AlexNet 224 px, 5 GB IOR file, 5 repeats)
  workstation  a 2-core machine in well under 15 minutes (1,024 images, AlexNet 128 px x 0.25)
  ci           seconds per grid, for tests (the shape of the study, not its numbers)

Tiers: ``--tiers`` (comma-separated storage presets); default emulated HDD/SSD/Optane as root,
local disk and tmpfs otherwise. ``--lustre`` names the tier of Fig. 4's Lustre bars (the grid
``fig4_lustre``); default the modelled Lustre where FUSE works and ``--tiers`` is not given, else
none. Extra Hydra overrides after the options go to every grid.

The grids live in ``conf/paper/grids.yaml`` and the scales in ``conf/paper/scale/<scale>.yaml``: read
and change them there; this module only fills the scale's values in and runs the grids.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from campaign.overrides import flag_of, value_of
from jobs.frameworks import PAPERS

CONF = Path(__file__).resolve().parent.parent / "conf" / "paper"
PAPER = "paper.txt"  # the study's scale, tiers and grids, in its campaign folder


def scales() -> list[str]:
    """The scales in conf/paper/scale/."""
    return sorted(p.stem for p in (CONF / "scale").glob("*.yaml"))


def _fill(entry: str, values: dict) -> list[str]:
    """One grid entry with the scale's values in: [] when a value is null, several for a list of overrides."""
    import re

    names = re.findall(r"\{(\w+)\}", entry)
    whole = re.fullmatch(r"\{(\w+)\}", entry)
    if whole and isinstance(values[whole[1]], list) and all("=" in str(v) for v in values[whole[1]]):
        return [str(v) for v in values[whole[1]]]
    if any(values[n] is None for n in names):
        return []
    return [
        entry.format(
            **{n: ",".join(map(str, values[n])) if isinstance(values[n], list) else values[n] for n in names}
        )
    ]


# --frameworks: the paper's (first) and those with grids of their own (conf/paper/grids_<name>.yaml)
FRAMEWORKS = (PAPERS, *sorted(p.stem.removeprefix("grids_") for p in CONF.glob("grids_*.yaml")))


def grids(
    scale: str, tiers: list[str], lustre: str | None = None, frameworks: tuple[str, ...] = (PAPERS,)
) -> list[tuple[str, list[str]]]:
    """(sub-folder, overrides) of every grid of the study, from conf/paper/grids.yaml (and
    ``grids_<framework>.yaml`` for every framework past TensorFlow) and the scale's values; a grid whose
    storage is null (``{lustre}`` without ``lustre``) is left out."""
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(OmegaConf.load(CONF / "scale" / f"{scale}.yaml"))
    values.update(
        tiers=tiers,
        middle=tiers[len(tiers) // 2],
        slow=tiers[0],
        fast=tiers[-1] if len(tiers) > 1 else "tmpfs",
        lustre=lustre,
    )
    grids = OmegaConf.to_container(OmegaConf.load(CONF / "grids.yaml"))
    for framework in frameworks[1:]:
        grids.update(OmegaConf.to_container(OmegaConf.load(CONF / f"grids_{framework}.yaml")))
    out = []
    for name, entries in grids.items():
        filled = [(str(e), _fill(str(e), values)) for e in entries]
        if not any(e.startswith("storage=") and not o for e, o in filled):
            out.append((name, [o for _, os_ in filled for o in os_]))
    return out


def _dry(overrides: list[str]) -> bool:
    return bool(flag_of(overrides, "platform.dry_run"))


def _carried_roots(name: str, grid: list[str], extra: list[str]) -> list[str]:
    """``storage.root=X`` given for the study serves one tier: where a grid puts checkpoints on that same
    tier (its slow or fast tier is the storage preset), they go under X too, unless set."""
    root = value_of(extra, "storage.root")
    storage = value_of(grid, "storage")
    if root is None or storage is None or "," in storage:
        return []
    out = []
    for tier in ("slow", "fast"):
        key = f"checkpoint.{tier}.root"
        if value_of(grid, f"storage@checkpoint.{tier}") == storage and value_of(extra, key) is None:
            out.append(f"{key}={root}")
    return out


def _check_grids(todo: list[tuple[str, list[str]]], extra: list[str], out: Path) -> bool:
    """Plan and check every cell of every grid before any runs (each grid's own dry run, in a few
    hundred ms); on the first bad one print its line, naming the grid and those that can run, and return
    False. With ``platform.dry_run=true`` the grids' plans are printed instead."""
    from campaign import subcampaign

    dry = _dry(extra)
    planned = [] if dry else ["platform.dry_run=true"]
    argvs = [["-m", *grid, *extra, f"hydra.sweep.dir={out / name}", *planned] for name, grid in todo]
    shown: list[tuple[str, str]] = []  # each grid's dry run, for the study's total
    results = subcampaign.plan_all(argvs, _preload(todo, extra))  # the server the grids then run from
    for (name, _), p in zip(todo, results):
        if dry:
            print(f"[paper] {name}:\n{p['out']}", end="", flush=True)
            shown.append((name, p["out"]))
        if p["status"] != 0:
            said = [x for x in p["err"].splitlines() if x.strip()]
            line = said[-1] if said else f"exit status {p['status']}"
            line = line.replace(" platform.dry_run=True", "")
            runnable = _only([grid for (grid, _), q in zip(todo, results) if q["status"] == 0])
            print(f"{line} (grid {name} of the paper study; no grid was run{runnable})", file=sys.stderr)
            return False
    if dry:
        from campaign.estimate import study_total

        print(study_total(shown), flush=True)
    return True


def _only(runnable: list[str]) -> str:
    """What to add to the study's command to run the grids that can run here without the one that
    cannot (a machine without fio, a tier without a root), or nothing when none can."""
    return f"; the grids that can run here: --only {','.join(runnable)}" if runnable else ""


def default_tiers() -> tuple[list[str], str]:
    """As root: the modelled HDD (FUSE; the emulated one where FUSE is missing), the emulated SSD and
    Optane; otherwise the local disk and tmpfs, with the line that says why ("" when nothing fell back)."""
    from jobs.storage import tiers
    from jobs.storage.modeled import mount

    why = tiers.available()
    if why is not None:
        return ["local", "tmpfs"], (
            f"emulated tiers cannot be built here ({why}): the study falls back to the local "
            "disk and tmpfs, and the paper's HDD, SSD, Optane and burst-buffer claims come out "
            "not measured"
        )
    return [
        "modeled_hdd" if mount.available() is None else "emulated_hdd",
        "emulated_ssd",
        "emulated_optane",
    ], ""


def study_text(scale: str, tiers, frameworks, lustre: str | None, fell_back: str, todo) -> str:
    """paper.txt: the study's settings, then each grid it runs and its overrides. ``lustre=`` only where a
    grid reads the Lustre tier (an ``--only`` study without fig4_lustre ran none)."""
    lustre = lustre if any(f"storage={lustre}" in overrides for _, overrides in todo) else None
    return (
        f"scale={scale}\ntiers={','.join(tiers)}\nframeworks={','.join(frameworks)}\n"
        + (f"lustre={lustre}\n" if lustre else "")
        + (f"fallback={fell_back}\n" if fell_back else "")
        + "".join(f"{n}: {' '.join(o)}\n" for n, o in todo)
    )


def default_lustre(tiers_given: bool) -> tuple[str | None, str]:
    """The tier of Fig. 4's Lustre bars when ``--lustre`` is not given: the modelled Lustre where FUSE
    works and the default tiers are used; with the line that says why not ("" when nothing fell back)."""
    from jobs.storage.modeled import mount

    if tiers_given:
        return None, ""
    # its mount point and backing folder are root's (/mnt/iocampaign, /var/tmp/iocampaign)
    if os.geteuid() != 0:
        return None, (
            "the modelled Lustre is mounted by root under /mnt/iocampaign: run as root for the Lustre claim; "
            "this study's Lustre claim comes out not measured"
        )
    why = mount.available()
    if why is not None:
        return None, (
            f"the modelled Lustre cannot be mounted here ({why}): the Lustre claim comes out not measured; "
            "on a cluster, a study with --tiers lustre storage.root=<a folder on it> measures the real one"
        )
    return "modeled_lustre", ""


def _known_tiers(tiers: list[str], given: str | None, option: str = "--tiers") -> bool:
    """False, after one line naming the first unknown tier, when ``option`` names one that has no preset."""
    from campaign.choices import closest

    known = sorted(p.stem for p in (CONF.parent / "storage").glob("*.yaml") if not p.stem.startswith("_"))
    bad = [t for t in tiers if t not in known]
    if bad or not tiers:
        meant = [t if t in known else closest(t, known) for t in tiers]
        guessed = f" (did you mean {option} {','.join(meant)}?)" if bad and all(meant) else ""
        print(
            f"campaign: {option} {given!r}: {'unknown tier ' + repr(bad[0]) if bad else 'no tier given'}"
            f"{guessed}; valid: {', '.join(known)}; nothing was run",
            file=sys.stderr,
        )
        return False
    return True


def _submits_and_returns(extra: list[str]) -> bool:
    """Whether the study's cells go to Slurm and its grids return at once (``platform.wait=false``, the
    Tegner preset's default): then each grid's arrays must wait for the grid before it."""
    from omegaconf import OmegaConf

    path = CONF.parent / "platform" / f"{value_of(extra, 'platform') or 'workstation'}.yaml"
    preset = OmegaConf.to_container(OmegaConf.load(path)) if path.exists() else {}
    kind = value_of(extra, "platform.kind") or preset.get("kind", "local")
    wait = flag_of(extra, "platform.wait")
    waits = bool(preset.get("wait", True)) if wait is None else wait
    return str(kind) == "slurm" and not waits


def _preload(todo: list[tuple[str, list[str]]], extra: list[str]) -> tuple[str, ...]:
    """What the study's warm server imports: what its grids' cells need (``subcampaign.preload_for``)."""
    from campaign import subcampaign

    return subcampaign.preload_for([[*grid, *extra] for _, grid in todo])


def _run_grids(todo: list[tuple[str, list[str]]], extra: list[str], out: Path, chained: bool = False) -> int:
    """Run every grid into its sub-folder of ``out``, one after another; 1 when one of them failed. A
    grid ends (cleanly) when this process dies, whatever kills it. ``chained`` (Slurm, no waiting): each
    grid's first array waits for the last array of the grid before it (``platform.after``), so no two
    grids' cells overlap on the device."""
    from campaign import subcampaign
    from campaign.slurm import submit

    status, after = 0, None
    preload = _preload(todo, extra)  # one warm server for the plans and every grid
    for name, overrides in todo:
        chain = (
            [o for o in extra if not o.startswith("platform.after=")] + [f"platform.after={after}"]
            if chained and after
            else extra
        )
        print(f"[paper] {name}: python -m campaign -m {' '.join(overrides + chain)}", flush=True)
        before = submit.last_array(out / name)
        rc = subcampaign.run([*overrides, *chain], out / name, preload)
        if rc != 0:
            print(f"[paper] {name} ended with exit status {rc}; the report says what is missing", flush=True)
            status = 1
        if chained and submit.last_array(out / name) != before:  # it submitted: the next grid waits for it
            after = submit.last_array(out / name)
    return status


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m campaign +experiment=paper", description=__doc__.split("\n")[0]
    )
    p.add_argument("--scale", choices=scales(), default="workstation", help="a file of conf/paper/scale/")
    p.add_argument(
        "--tiers",
        default=None,
        help="comma-separated storage presets (default: emulated tiers as root, else local,tmpfs)",
    )
    p.add_argument(
        "--lustre",
        default=None,
        help="the tier of Fig. 4's Lustre bars (grid fig4_lustre), or none "
        "(default: modeled_lustre where FUSE works and --tiers is not given)",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="campaign folder (default multirun/paper-<date>-<time>)"
    )
    p.add_argument(
        "--only",
        default=None,
        help="comma-separated grids to run: table1,fig4_fig5,fig4_lustre,fig6_fig8,fig7,fig9_fig10 "
        "(with --frameworks tensorflow,pytorch also fig4_fig5_pytorch,fig6_pytorch)",
    )
    p.add_argument(
        "--frameworks",
        default=PAPERS,
        help="tensorflow (the paper's) or tensorflow,pytorch: adds the PyTorch grids "
        "(conf/paper/grids_pytorch.yaml)",
    )
    p.add_argument("overrides", nargs="*", help="Hydra overrides added to every grid (e.g. platform=slurm)")
    args = p.parse_intermixed_args(argv)  # overrides may come after --out and the other options
    frameworks = _frameworks(args.frameworks)
    if frameworks is None:
        return 2
    tiers, fell_back = (args.tiers.split(","), "") if args.tiers is not None else default_tiers()
    if args.lustre is None:
        lustre, no_lustre = default_lustre(args.tiers is not None)
        fell_back = "; ".join(x for x in (fell_back, no_lustre) if x)
    else:
        lustre = None if args.lustre == "none" else args.lustre
    if not _known_tiers(tiers, args.tiers) or (
        lustre is not None and not _known_tiers([lustre], args.lustre, "--lustre")
    ):
        return 2
    out = args.out or Path("multirun") / time.strftime("paper-%Y-%m-%d-%H-%M-%S")
    todo = grids(args.scale, tiers, lustre, frameworks)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {g for g, _ in todo}
        if unknown:
            print(
                f"campaign: unknown grid(s) {', '.join(sorted(unknown))} in --only; valid: "
                f"{', '.join(g for g, _ in todo)}",
                file=sys.stderr,
            )
            return 2
        todo = [g for g in todo if g[0] in wanted]
    from analysis.outputs import write_text
    from campaign import outputs
    from jobs import interrupts

    if not _out_usable(out):
        return 2
    todo = [(name, overrides + _carried_roots(name, overrides, args.overrides)) for name, overrides in todo]
    if not _check_grids(todo, args.overrides, out):
        return 2
    if fell_back:
        print(f"[paper] {fell_back}", flush=True)
    if _dry(args.overrides):
        return 0  # every grid printed its plan; nothing was written
    out.mkdir(parents=True, exist_ok=True)
    outputs.link_latest(out)
    write_text(out / PAPER, study_text(args.scale, tiers, frameworks, lustre, fell_back, todo))
    try:
        with interrupts.surfaced():  # a library's error in place of the interrupt is the interrupt
            return _run(todo, args.overrides, out)
    except (KeyboardInterrupt, interrupts.Interrupted) as e:  # the running grid has unwound its cell
        print(
            f"campaign: interrupted by {interrupts.name_of(e)}; the study's finished cells are kept in "
            f"{out}; the same command with --out {out} resumes it (finished cells are skipped)",
            file=sys.stderr,
        )
        return 128 + interrupts.signum_of(e)


def _run(todo: list[tuple[str, list[str]]], extra: list[str], out: Path) -> int:
    """Run (or submit) every grid into ``out``, then write the report; the study's exit status."""
    chained = _submits_and_returns(extra)
    status = _run_grids(todo, extra, out, chained)
    if chained:
        print(
            "[paper] every grid was submitted to Slurm, each after the one before (platform.wait=false); "
            f"follow them with: python -m campaign.status {out}; when they have ended, the report: "
            f"python -m analysis {out}",
            flush=True,
        )
        return status
    return _report(out, status)


def _frameworks(given: str) -> tuple[str, ...] | None:
    """--frameworks as a tuple, TensorFlow first; None (and one line) when it names another or leaves
    TensorFlow out (the paper's claims are judged on its cells)."""
    names = tuple(dict.fromkeys(n.strip() for n in given.split(",") if n.strip()))
    unknown = [n for n in names if n not in FRAMEWORKS]
    if unknown or PAPERS not in names:
        print(
            f"campaign: --frameworks {given}: give tensorflow (the paper's grids) and optionally pytorch, "
            "e.g. --frameworks tensorflow,pytorch",
            file=sys.stderr,
        )
        return None
    return (PAPERS, *(n for n in names if n != PAPERS))


def _out_usable(out: Path) -> bool:
    """Whether the study may write ``out``: the user's own folder (jobs.owned), new or an earlier study's
    (its grids resume); else one line."""
    from analysis.outputs import study_folder_problem
    from campaign import outputs

    why = outputs.owned_problem(out, "--out")
    if why:
        print(f"campaign: {why}", file=sys.stderr)
        return False
    why = study_folder_problem(out, PAPER)
    if why:
        print(f"campaign: --out: {why}; choose a new folder; nothing was run", file=sys.stderr)
        return False
    return True


def _report(out: Path, status: int) -> int:
    """The study's report over every grid, its path and verdict line on the terminal."""
    from analysis.build import NothingToBuild
    from analysis.outputs import OutputExists
    from analysis.report.page import write_report
    from campaign import outputs

    try:
        report = write_report(out)
    except (NothingToBuild, OutputExists) as e:
        print(f"campaign: no report for {out}: {e}", file=sys.stderr)
        return 1
    outputs.link_latest(out)  # again: each grid pointed it at itself while it ran
    print(f"[paper] report: {report}", flush=True)
    _print_verdicts(out)
    return status


def _print_verdicts(out: Path) -> None:
    """The report's first word on the paper, on the terminal too."""
    if (out / "claims.csv").exists():
        import pandas as pd

        from analysis import standing
        from analysis.claims import verdicts

        said = verdicts.headline(pd.read_csv(out / "claims.csv")) + standing.sentence(out)
        print(f"[paper] {said}", flush=True)
