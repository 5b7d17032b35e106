"""Where the checkout's parts are."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout
CONF = ROOT / "conf"  # the Hydra config tree
TOY = ROOT / "tests" / "toy"  # a workload from outside the package: its module and its preset
TOY_CONF = TOY / "conf"  # the toy's config folder, which also holds the tests' small presets
SLURM_SCRIPTS = ROOT / "tests" / "slurm"  # up.sh and down.sh of the test cluster
