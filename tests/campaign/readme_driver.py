"""Runs many ``python -m campaign`` command lines in one process, as the shell would one by one (the README
test's driver: one Python start for all of them). stdin: a JSON list of argument lists; stdout: one JSON
line per command with its exit status, the tails of what it printed and how many dry runs it announced."""

import contextlib
import io
import json
import runpy
import sys

from hydra.core.global_hydra import GlobalHydra


def main() -> None:
    for argv in json.load(sys.stdin):
        GlobalHydra.instance().clear()
        out, err = io.StringIO(), io.StringIO()
        sys.argv = ["campaign", *argv]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_module("campaign", run_name="__main__", alter_sys=True)
                status = 0
            except SystemExit as e:  # python -m campaign ends with sys.exit(<status>)
                status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception as e:  # noqa: BLE001 - reported as the command's failure
                status = 99
                print(f"{type(e).__name__}: {e}", file=err)
        said = out.getvalue()
        print(
            json.dumps(
                {
                    "argv": argv,
                    "status": status,
                    "out": said[-1500:],
                    "err": err.getvalue()[-1500:],
                    "dry_runs": said.count("(nothing was run or written)")
                    + said.count("(nothing was submitted)"),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
