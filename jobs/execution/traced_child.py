"""The traced child of a cell (``trace.posix=true``): started by ``jobs.execution.traced`` with
dftracer's preload library, it runs the whole of ``jobs.runner.measure`` and writes what it measured
(or the error it met) for the parent. Apart from the parent's side so that imports run one way: the
runner starts the parent side, the child calls the runner."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from jobs.execution.traced import MEASURED, REQUEST
from jobs.observe import posix

log = logging.getLogger(__name__)


def main(job_dir: str) -> int:
    """The child: measure the cell and write the outcome for the parent."""
    from jobs import interrupts, lifeline, runner
    from jobs.cell import Cell

    lifeline.bind()
    for k in [k for k in os.environ if k == "LD_PRELOAD" or k.startswith("DFTRACER_")]:
        # loaded and read at start-up; processes this one starts (dataset generation) are not traced
        del os.environ[k]
    folder = Path(job_dir)
    request = json.loads((folder / posix.SUBDIR / REQUEST).read_text())
    fmt = logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    handlers = [logging.StreamHandler()]
    if request.get("log_file"):
        handlers.append(logging.FileHandler(request["log_file"]))
    for h in handlers:
        h.setFormatter(fmt)
    logging.basicConfig(level=logging.INFO, handlers=handlers)
    interrupts.install(repeat=False)  # the parent passes on a signal this process may have had already
    out = folder / posix.SUBDIR / MEASURED
    try:
        cell = Cell.from_data(request["config"], cell_id=request["cell_id"])  # the parent's, from its data
        runs, dataset, prov = runner.measure(cell, folder, int(request.get("first_run", 1)))
        result = {"runs": runs, "dataset": dataset, "provenance": prov}
        code = 0
    except BaseException as e:  # the parent records the failure; a signal ends the child too
        import traceback

        if isinstance(e, (KeyboardInterrupt, interrupts.Interrupted)):  # the parent prints the one line
            log.info("the traced cell was interrupted (%s); its clean-up ran", type(e).__name__)
        else:
            log.error("the traced cell failed: %s: %s", type(e).__name__, e, exc_info=True)
        result = {"error": {"type": type(e).__name__, "message": str(e), "traceback": traceback.format_exc()}}
        code = 1
    out.write_text(json.dumps(result, default=str))
    return code


if __name__ == "__main__":
    from jobs.lifeline import exit_as_python

    exit_as_python(lambda: sys.exit(main(sys.argv[1])))
