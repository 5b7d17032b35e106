"""``python -m analysis profile <campaign> --name <name> --out <folder>``: an accelerator profile for
``workload=emulated`` and ``python -m campaign.capacity`` from the compute this campaign's training runs
measured (AlexNet's compute-only steps: one batch held in the training device's memory, no input pipeline).

The profile's step time is the median over the campaign's runs of ``compute_only_s ÷ (steps - 1)`` (the
first step, which builds the graph, is not among the steady steps it was scaled to). Every run must share
what the step time depends on (batch size, image side, model width, training device); the profile is
written as ``<folder>/accelerator/<name>.yaml``, used with ``hydra.searchpath=[file://<folder>]``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobs import records

# what a step's compute depends on: a profile is one value of each
SHAPE = ("workload", "batch_size", "image_side", "width", "device")


class ProfileError(ValueError):
    """The campaign holds no run a profile can come from, or runs of several shapes; the message says
    which."""


def main(argv: list[str]) -> int:
    """``python -m analysis profile <campaign> --name N --out F``; the exit status."""
    p = argparse.ArgumentParser(
        prog="python -m analysis profile",
        description="an accelerator profile (accelerator=<name>) from a training campaign's "
        "compute-only step time",
    )
    p.add_argument("campaign", type=Path, help="a campaign of a training workload (e.g. workload=alexnet)")
    p.add_argument("--name", required=True, help="the profile's name, as in accelerator=<name>")
    p.add_argument(
        "--out", type=Path, required=True, help="a config folder: the profile goes to <out>/accelerator/"
    )
    args = p.parse_args(argv)
    if not args.campaign.is_dir():
        print(f"analysis: {args.campaign} is not a folder", file=sys.stderr)
        return 2
    try:
        target = write(args.campaign, args.name, args.out)
    except ProfileError as e:
        print(f"analysis: {e}", file=sys.stderr)
        return 2
    print(f"analysis: profile {args.name}: {target}")
    searchpath = f"hydra.searchpath=[file://{args.out.resolve()}]"
    print(f"  use it: python -m campaign.capacity accelerator={args.name} {searchpath}")
    return 0


def _gpu_name(record: Path, device: str) -> str:
    """The accelerator that ran ``device``, named from the run's record (``device_name``)."""
    from jobs import records

    try:
        prov = records.provenance_of(records.read(record))
    except records.RecordError as e:
        raise ProfileError(f"the run's record cannot be read: {e}") from e
    return device_name(prov, device)


ACCELERATORS = ("/GPU", "GPU:", "CUDA")  # TensorFlow's /device:GPU:k and /GPU:k, PyTorch's cuda:k


def device_name(prov: records.Provenance, device: str) -> str:
    """The accelerator that ran ``device`` (TensorFlow's /GPU:k or PyTorch's cuda:k: its name as NVML or
    the framework gives it; anything else: the CPU, with its model and usable cores)."""
    name = device.upper().removeprefix("/DEVICE:")
    if name.startswith(ACCELERATORS):
        acc = prov.accelerator or {}
        used = acc.get("used_index")
        gpus = acc.get("gpus") or acc.get("framework_gpus") or []
        if gpus:
            g = gpus[used if isinstance(used, int) and used < len(gpus) else 0]
            return str(g.get("name") or g) if isinstance(g, dict) else str(g)
        return device
    return f"CPU ({prov.cpu_model or 'unknown model'}, {prov.cpus_usable or '?'} cores)"


def measure(folder: Path) -> dict:
    """The profile's fields from ``folder``'s results.csv (built by the campaign or
    ``python -m analysis``)."""
    import pandas as pd

    table = folder / "results.csv"
    if not table.exists():
        raise ProfileError(f"{folder} has no results.csv: build it first (python -m analysis {folder})")
    df = pd.read_csv(table)
    if "compute_only_s" not in df:
        raise ProfileError(
            f"{folder}: no run measured its compute alone (compute_only_s): run a training workload "
            "such as workload=alexnet with workload.compute_only_steps > 0"
        )
    runs = df[df["compute_only_s"].notna() & (df["steps"].fillna(0) > 1)]
    if runs.empty:
        raise ProfileError(
            f"{folder}: no run measured its compute alone (compute_only_s) over more than one step: "
            "run a training workload such as workload=alexnet with workload.compute_only_steps > 0"
        )
    for key in SHAPE:
        values = sorted(str(v) for v in runs[key].unique())
        if len(values) > 1:
            raise ProfileError(
                f"{folder}: its runs differ in {key} ({', '.join(values)}): a profile is one shape; "
                "build it from a campaign of one, e.g. python -m campaign -m workload=alexnet "
                "threads=1,2,4,8 (other settings fixed)"
            )
    partial = runs[runs["images"].astype(int) % runs["batch_size"].astype(int) != 0]
    if not partial.empty:
        r = partial.iloc[0]
        raise ProfileError(
            f"{folder}: a run of {int(r['images'])} images ends on a partial batch of "
            f"{int(r['images']) % int(r['batch_size'])} (batch_size={int(r['batch_size'])}), and its "
            "compute-only steps were timed on that last batch: use dataset.num_images a multiple of "
            "batch_size"
        )
    per_step = sorted(float(c) / (int(s) - 1) for c, s in zip(runs["compute_only_s"], runs["steps"]))
    first = runs.iloc[0]
    device = str(first["device"])
    return {
        "workload": str(first["workload"]),
        "batch_size": int(first["batch_size"]),
        "image_side": int(first["image_side"]),
        "width": float(first["width"]),
        "device": device,
        "device_name": _gpu_name(folder / str(first["record"]), device),
        "step_time_s": statistics.median(per_step),
        "step_time_min_s": per_step[0],
        "step_time_max_s": per_step[-1],
        "runs": len(per_step),
        "records": [str(r) for r in runs["record"]],
    }


def write(folder: Path, name: str, out: Path) -> Path:
    """Measure ``folder`` and write ``out/accelerator/<name>.yaml`` (a new file; nothing is written over)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ProfileError(
            f"--name {name!r}: a profile's name is letters, digits, '_', '.' and '-' (it is the "
            "value of accelerator=<name>)"
        )
    target = out / "accelerator" / f"{name}.yaml"
    for p in (out, target.parent):
        if (p.exists() or p.is_symlink()) and not p.is_dir():
            raise ProfileError(
                f"--out {out}: {p} exists and is not a folder: give a config folder (the profile goes "
                f"to <out>/accelerator/{name}.yaml); nothing was written"
            )
    if target.exists() or target.is_symlink():
        raise ProfileError(f"{target} exists; give another --name or --out (nothing is written over a file)")
    m = measure(folder)
    source = (
        f"measured by this project: compute-only step time of {m['workload']} (median of {m['runs']} runs, "
        f"{1000 * m['step_time_min_s']:.2f}-{1000 * m['step_time_max_s']:.2f} ms), batch {m['batch_size']}, "
        f"{m['image_side']} px, width {m['width']:g}, on {m['device_name']}; campaign {folder.resolve()}"
    )
    text = "\n".join(
        [
            f"# Written by python -m analysis profile from {folder.resolve()}",
            f"# (records: {', '.join(m['records'][:3])}{' ...' if len(m['records']) > 3 else ''}).",
            "defaults:",
            "  - accelerator_schema",
            "  - _self_",
            f"name: {name}",
            f"model: {_quote(m['workload'] + ' (width ' + format(m['width'], 'g') + ')')}",
            f"device: {_quote(m['device_name'])}",
            f"batch_size: {m['batch_size']}",
            f"step_time_s: {m['step_time_s']:.6g}",
            f"image_side: {m['image_side']}",
            "au_threshold: 0.90",
            f"source: {_quote(source)}",
            "",
        ]
    )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "x") as f:  # never over a file (nor through a link) that appeared meanwhile
            f.write(text)
    except OSError as e:
        raise ProfileError(f"--out {out}: {target} cannot be written ({e.strerror or e})") from None
    return target


def _quote(s: str) -> str:
    import json

    return json.dumps(s)  # a JSON string is a YAML string
