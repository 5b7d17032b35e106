"""Benchmark: checkpoint stalls through a burst buffer against writing straight to each tier.

    python -m benchmarks.checkpoint_stall [--fast emulated_optane] [--slow emulated_hdd] [--repeats 3]
                                          [--image-side 128] [--width 0.25] [--steps 40] [--every 10]

Runs one campaign (``python -m campaign -m workload=checkpoint ...``) with the targets slow, fast
and burst_buffer, each synchronous and with TensorFlow's asynchronous checkpoint, on two tiers of
different speed (the emulated tiers need root; any two storage presets with roots work), and prints
from its results.csv:
  stall(burst buffer) / stall(direct to fast)   the paper saw "little difference": aim <= 1.1
  stall(direct to slow) / stall(burst buffer)   the paper's 2.6x (HDD against Optane as burst buffer)
with the native async checkpoint beside them. Stalls are medians over the runs of each cell of the
median stall per checkpoint. Beside them, what they stand on: the machine's 1-min load average before
and after, the share of the CPU other processes took during each cell's runs and the runs' CPU per
training step. (The cells run in the campaign's order, not alternating: ``--repeats`` runs of each.)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _share(others, cell) -> str:
    """The others' median CPU share of ``cell``'s runs, as a percentage ('-': not recorded)."""
    if others is None or cell not in others or others[cell] != others[cell]:  # NaN: not measured
        return "-"
    return f"{others[cell]:.0%}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.checkpoint_stall", description=__doc__.split("\n")[0]
    )
    p.add_argument("--fast", default="emulated_optane", help="storage preset of the fast tier")
    p.add_argument("--slow", default="emulated_hdd", help="storage preset of the slow tier")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--image-side", type=int, default=128)
    p.add_argument("--width", type=float, default=0.25)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--num-images", type=int, default=2600)
    p.add_argument("--out", type=Path, default=None, help="campaign folder (default: a new temporary one)")
    p.add_argument("extra", nargs="*", help="more overrides, e.g. checkpoint.fast.root=/mnt/nvme")
    args = p.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="checkpoint-stall-"))
    cmd = [
        sys.executable,
        "-m",
        "campaign",
        "-m",
        "workload=checkpoint",
        f"workload.image_side={args.image_side}",
        f"workload.width={args.width}",
        f"workload.steps={args.steps}",
        f"checkpoint.every={args.every}",
        "checkpoint.target=slow,fast,burst_buffer",
        "checkpoint.mode=sync,async",
        f"storage@checkpoint.fast={args.fast}",
        f"storage@checkpoint.slow={args.slow}",
        "prefetch=1",
        f"dataset.num_images={args.num_images}",
        f"repeats={args.repeats}",
        f"hydra.sweep.dir={out}",
        *args.extra,
    ]
    print("running:", " ".join(cmd[1:]), flush=True)
    load0 = os.getloadavg()[0]
    rc = subprocess.run(
        cmd, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, stdout=subprocess.DEVNULL
    ).returncode
    if rc != 0:
        print(f"benchmark: the campaign failed (exit {rc}); see {out}", file=sys.stderr)
        return rc
    import pandas as pd

    from analysis.tables import tidy as tables

    df = pd.read_csv(out / "results.csv")
    fell_back = tables.text(df["checkpoint_fallback"]) != ""
    if fell_back.any():
        print(
            f"{int(fell_back.sum())} runs fell back to the slow tier and are left out: "
            f"{df.loc[fell_back, 'checkpoint_fallback'].iloc[0]}"
        )
    df = df[~fell_back]
    g = df.groupby(["checkpoint_mode", "checkpoint_target"])
    stall = g["median_stall_s"].median()
    # runtimes with the first step (graph tracing) left out, where every run has them
    steady = "steady_runtime_s" in df and df["steady_runtime_s"].notna().all()
    runtime = g["steady_runtime_s" if steady else "runtime_s"].median()
    base = g["baseline_steady_runtime_s" if steady else "baseline_runtime_s"].median()
    ckpt_mb = pd.read_csv(out / "checkpoints.csv")["bytes"].median() / 1e6
    # what the stalls stood on: the CPU other processes took during each cell's runs, and the runs' own CPU
    others = g["other_cpu_share"].median() if "other_cpu_share" in df else None
    cpu = g["cpu_s"].median() / args.steps if "cpu_s" in df else None  # a run's CPU per training step
    print(
        f"campaign {out}: {args.repeats} runs per cell, checkpoints of {ckpt_mb:.0f} MB, "
        f"fast={args.fast}, slow={args.slow}; runtimes {'without' if steady else 'with'} the first step; "
        f"1-min load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    print(
        f"{'mode':<6} {'target':<13} {'median stall s':>14} {'runtime s':>10} {'no-ckpt s':>10} "
        f"{'ckpt share':>10} {'others':>6} {'CPU s/step':>10}"
    )
    for cell, v in stall.items():
        mode, target = cell
        share = (runtime[cell] - base[cell]) / runtime[cell]
        print(
            f"{mode:<6} {target:<13} {v:>14.3f} {runtime[cell]:>10.2f} {base[cell]:>10.2f} {share:>10.1%} "
            f"{_share(others, cell):>6} {'-' if cpu is None else f'{cpu[cell]:.2f}':>10}"
        )
    for mode in ("sync", "async"):
        s = stall.xs(mode)
        print(
            f"{mode}: stall(burst buffer) / stall(fast) = {s['burst_buffer'] / s['fast']:.2f}   "
            f"stall(slow) / stall(burst buffer) = {s['slow'] / s['burst_buffer']:.2f}   (others took "
            f"{', '.join(f'{_share(others, (mode, t))} ({t})' for t in ('burst_buffer', 'fast', 'slow'))} "
            "of the CPU)"
        )
    print(
        f"async vs sync, burst buffer: stall {stall[('async', 'burst_buffer')]:.3f} s vs "
        f"{stall[('sync', 'burst_buffer')]:.3f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
