"""``python -m campaign +experiment=paper``: the whole study of the paper as one campaign.

The study is several grids (Table I, Figs. 4-5, 6 and 8, 7, 9-10) that a single cartesian sweep
cannot express; each runs as its own multirun into a sub-folder of one campaign folder, one after
another, and the report is built over all of them. Scales:

  full         the paper's sizes (16,384 / 9,144 images, AlexNet 224 px, 5 GB IOR file, 5 repeats)
  workstation  a 2-core machine in well under 15 minutes (1,024 images, AlexNet 128 px x 0.25)
  ci           seconds per grid, for tests (the shape of the study, not its numbers)

Tiers: ``--tiers`` (comma-separated storage presets); default emulated HDD/SSD/Optane as root,
local disk and tmpfs otherwise. Extra Hydra overrides after the options go to every grid.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

SCALES = {
    # checkpoint steps stay within one epoch of the set at batch 64 (1,024 images: 16 steps)
    "full": dict(images=None, caltech=None, alexnet="workload=alexnet", ckpt_scale=[], file_gb=5.0, repeats=5,
                 threads="1,2,4,8", alexnet_threads="1,2,4,8", batches="16,32,64,128", steps=100),
    "workstation": dict(images=1024, caltech=1024, alexnet="workload=alexnet_small",
                        ckpt_scale=["workload.image_side=128", "workload.width=0.25"], file_gb=0.25, repeats=3,
                        threads="1,2,4,8", alexnet_threads="1,8", batches="16,32,64,128", steps=15),
    "ci": dict(images=128, caltech=256, alexnet="workload=alexnet_small",
               ckpt_scale=["workload.image_side=64", "workload.width=0.25"], file_gb=0.02, repeats=2,
               threads="1,2", alexnet_threads="1,2", batches="16,32", steps=4),
}


def default_tiers() -> list[str]:
    from jobs import tiers

    return ["emulated_hdd", "emulated_ssd", "emulated_optane"] if tiers.available() is None else ["local", "tmpfs"]


def grids(scale: str, tiers: list[str]) -> list[tuple[str, list[str]]]:
    """(sub-folder, overrides) of every grid of the study."""
    s = SCALES[scale]
    ts = ",".join(tiers)
    imgs = [f"dataset.num_images={s['images']}"] if s["images"] else []
    cal = [f"dataset.num_images={s['caltech']}"] if s["caltech"] else []
    rep = [f"repeats={s['repeats']}"]
    fast, slow = (tiers[-1], tiers[0]) if len(tiers) > 1 else ("tmpfs", tiers[0])
    small_threads = "[" + s["threads"] + "]"
    return [
        ("table1", ["workload=baseline", f"storage={ts}", f"workload.file_gb={s['file_gb']}",
                    f"workload.small_file_threads={small_threads}", *imgs, *rep]),
        ("fig4_fig5", ["workload=microbench,readonly", f"threads={s['threads']}", f"storage={ts}", *imgs, *rep]),
        ("fig6_fig8", [s["alexnet"], f"threads={s['alexnet_threads']}", "prefetch=0,1", f"storage={ts}", *cal, *rep]),
        ("fig7", [s["alexnet"], f"threads={s['alexnet_threads'].split(',')[-1]}", f"batch_size={s['batches']}", "prefetch=0,1",
                  f"storage={tiers[len(tiers) // 2]}", *cal, *rep]),
        ("fig9_fig10", ["workload=checkpoint", *s["ckpt_scale"], f"workload.steps={s['steps']}",
                        f"checkpoint.every={max(1, s['steps'] // 5)}", "checkpoint.target=slow,fast,burst_buffer",
                        f"storage@checkpoint.fast={fast}", f"storage@checkpoint.slow={slow}",
                        f"storage={tiers[len(tiers) // 2]}", "prefetch=1", *cal, *rep]),
    ]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m campaign +experiment=paper", description=__doc__.split("\n")[0])
    p.add_argument("--scale", choices=sorted(SCALES), default="workstation")
    p.add_argument("--tiers", default=None, help="comma-separated storage presets (default: emulated tiers as root, "
                                                 "else local,tmpfs)")
    p.add_argument("--out", type=Path, default=None, help="campaign folder (default multirun/paper-<date>-<time>)")
    p.add_argument("--only", default=None, help="comma-separated grids to run: table1,fig4_fig5,fig6_fig8,fig7,fig9_fig10")
    p.add_argument("overrides", nargs="*", help="Hydra overrides added to every grid (e.g. platform=slurm)")
    args = p.parse_args(argv)
    tiers = args.tiers.split(",") if args.tiers else default_tiers()
    out = args.out or Path("multirun") / time.strftime("paper-%Y-%m-%d-%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    todo = grids(args.scale, tiers)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {g for g, _ in todo}
        if unknown:
            print(f"campaign: unknown grid(s) {', '.join(sorted(unknown))} in --only; valid: "
                  f"{', '.join(g for g, _ in todo)}", file=sys.stderr)
            return 2
        todo = [g for g in todo if g[0] in wanted]
    (out / "paper.txt").write_text(f"scale={args.scale}\ntiers={','.join(tiers)}\n"
                                   + "".join(f"{n}: {' '.join(o)}\n" for n, o in todo))
    status = 0
    for name, overrides in todo:
        cmd = [sys.executable, "-m", "campaign", "-m", *overrides, *args.overrides, f"hydra.sweep.dir={out / name}"]
        print(f"[paper] {name}: python -m campaign -m {' '.join(overrides + args.overrides)}", flush=True)
        child = subprocess.Popen(cmd, env={**os.environ})
        try:
            rc = child.wait()
        except BaseException:  # SIGTERM or Ctrl-C: let the grid unwind (tiers, locks) before leaving
            child.terminate()
            child.wait(120)
            raise
        if rc != 0:
            print(f"[paper] {name} ended with exit status {rc}; the report says what is missing", flush=True)
            status = 1
    from analysis.report import write_report

    report = write_report(out)
    print(f"[paper] report: {report}", flush=True)
    return status
