"""What C++ code writes on descriptor 2 during a cell's runs goes to its native.log; Python's lines, the one
line a failed run ends with among them, still reach the terminal (jobs/execution/nativelog.py)."""

import subprocess
import sys

from support.paths import ROOT

CODE = r"""
import logging, os, subprocess, sys
from pathlib import Path
from jobs.execution import nativelog

logging.getLogger("cell").addHandler(logging.StreamHandler())  # made before the block: on descriptor 2
folder = Path(sys.argv[1])
try:
    with nativelog.into(folder / "native.log"):
        os.write(2, b"W0000 00:00:1.0 1 op_kernel.cc:1858] OP_REQUIRES failed at whole_file_read_ops\n")
        child = "import os; os.write(2, b'E0000 00:00:1.0 2 cuda_platform.cc:52] failed call to cuInit\\n')"
        subprocess.run([sys.executable, "-c", child], check=True)  # a process the run starts
        print("[dataset] python's own line", file=sys.stderr)
        logging.getLogger("cell").warning("a handler's line")
        with nativelog.into(folder / "inner.log"):  # a run inside a benchmark's block: the outer file
            os.write(2, b"I0000 00:00:1.0 1 tf_record_dataset_op.cc:390] TFRecordDataset\n")
        raise KeyError("the run failed")
except KeyError as e:
    print(f"campaign: {e.args[0]}", file=sys.stderr)  # the one line, after the block
with nativelog.into(folder / "quiet.log"):
    pass
os.write(2, b"descriptor 2 is the terminal again\n")
"""


def test_c_lines_go_to_the_file_and_pythons_to_the_terminal(tmp_path):
    p = subprocess.run(
        [sys.executable, "-c", CODE, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [
        "[dataset] python's own line",
        "a handler's line",
        "campaign: the run failed",
        "descriptor 2 is the terminal again",
    ]
    lines = (tmp_path / "native.log").read_text().splitlines()
    assert [x.split()[3] for x in lines] == [
        "op_kernel.cc:1858]",
        "cuda_platform.cc:52]",
        "tf_record_dataset_op.cc:390]",
    ]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["native.log"]  # none inner, none empty
