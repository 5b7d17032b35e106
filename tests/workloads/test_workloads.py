"""The workload registry: a workload is one module plus one preset."""

import os
import sys

import pandas as pd
import pytest

from jobs import records, workloads
from jobs.metrics import METRICS
from support.commands import python_env, run_module
from support.configs import TOY_SEARCHPATH
from support.docs import code_blocks
from support.paths import ROOT, TOY


def _campaign(*args, cwd):
    """``python -m campaign`` with the toy workload (a module outside the package, never on pytest's path)
    importable and its preset on Hydra's search path."""
    env = python_env(PYTHONPATH=f"{ROOT}{os.pathsep}{TOY}")
    return run_module("campaign", *args, TOY_SEARCHPATH, cwd=cwd, env=env, timeout=300)


@pytest.mark.cells
def test_a_toy_workload_is_its_module_and_its_preset(tmp_path):
    out = tmp_path / "sweep"
    p = _campaign(
        "-m",
        "workload=toy_sleep",
        "workload.sleep_s=0.05,0.2",
        f"storage.root={tmp_path}",
        "repeats=2",
        "warmup=0",
        f"hydra.sweep.dir={out}",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 4 and set(df["workload"]) == {"toy_sleep"}
    slept = df.groupby("cell_dir")["slept_s"].median().sort_index()
    assert 0.05 <= slept.iloc[0] < 0.2 <= slept.iloc[1]
    rec = records.read(out / "0" / "record.json")
    assert rec.config["workload"]["kind"] == "toy_sleep" and rec.config["workload"]["sleep_s"] == 0.05
    assert (out / "toy_slept.png").stat().st_size > 1000  # the figure it declares, drawn from its rows
    assert not list(out.glob("fig*.png"))  # and no other workload's
    # the analysis again where the toy's code is not on the path: its metric is a column still (its records
    # declare it), its figure is left out with one line; with the toy on the path, drawn again
    (out / "toy_slept.png").unlink()
    alone = run_module("analysis", str(out), cwd=tmp_path, env=python_env(PYTHONPATH=str(ROOT)))
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert pd.read_csv(out / "results.csv")["slept_s"].notna().all()
    assert "toy_slept ('toy_sleep') is not drawn: iocampaign_workloads.toy_sleep:draw_slept" in alone.stderr
    assert not (out / "toy_slept.png").exists()
    toy = python_env(PYTHONPATH=f"{ROOT}{os.pathsep}{TOY}")
    assert run_module("analysis", str(out), cwd=tmp_path, env=toy).returncode == 0
    assert (out / "toy_slept.png").stat().st_size > 1000


@pytest.mark.cells
def test_the_sleeper_of_docs_extending_runs_as_written(tmp_path):
    """docs/extending.md's workload, copied as a user copies it: its module and preset into
    ~/my_workloads, and its command run as written (HOME is the test's folder); its runs, metric and
    figure come out."""
    import subprocess

    (code,), (preset,) = (
        code_blocks("extending.md", "Adding a workload", "python"),
        code_blocks("extending.md", "Adding a workload", "yaml"),
    )
    home = tmp_path / "home"
    module = home / "my_workloads" / "iocampaign_workloads" / "sleeper.py"
    module.parent.mkdir(parents=True)
    module.write_text(code)
    (home / "my_workloads" / "conf" / "workload").mkdir(parents=True)
    (home / "my_workloads" / "conf" / "workload" / "sleeper.yaml").write_text(preset)
    command = next(
        line
        for line in code_blocks("extending.md", "Adding a workload", "sh")[0].splitlines()
        if line.startswith("PYTHONPATH=~")
    )
    env = {
        **python_env(HOME=str(home)),
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("PYTHONPATH")  # the user's: the checkout is installed in the venv (make install)
    line = f"{command} storage.root={tmp_path} hydra.sweep.dir={tmp_path / 'sweep'}"
    p = subprocess.run(
        ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    df = pd.read_csv(tmp_path / "sweep" / "results.csv")
    assert set(df["workload"]) == {"sleeper"} and (df["slept_s"] >= 0.01).all()
    assert (tmp_path / "sweep" / "sleeper.png").stat().st_size > 1000
    rec = records.read(tmp_path / "sweep" / "0" / "record.json")
    assert rec.config["workload"]["kind"] == "sleeper" and all(r["slept_s"] > 0 for r in rec.runs)


@pytest.mark.cells
def test_the_framework_of_docs_extending_runs_as_written(tmp_path):
    """docs/extending.md's framework, copied as a user copies it: its declaration, its engine and its preset
    into ~/my_frameworks, its command run as written but on 64 images (HOME is the test's folder). It reads
    the same stored bytes as TensorFlow in both micro-benchmarks, its records carry Pillow's version, and a
    workload or format it cannot do is refused at planning in one line."""
    import subprocess

    declaration, engine = code_blocks("extending.md", "Adding a framework", "python")
    (preset,), (commands,) = (
        code_blocks("extending.md", "Adding a framework", "yaml"),
        code_blocks("extending.md", "Adding a framework", "sh"),
    )
    home = tmp_path / "home"
    package = home / "my_frameworks" / "iocampaign_frameworks" / "pool"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(declaration)
    (package / "reading.py").write_text(engine)
    (home / "my_frameworks" / "conf" / "framework").mkdir(parents=True)
    (home / "my_frameworks" / "conf" / "framework" / "pool.yaml").write_text(preset)
    command = next(line for line in commands.splitlines() if line.startswith("PYTHONPATH=~"))
    assert "dataset.num_images=256" in command
    command = command.replace("dataset.num_images=256", "dataset.num_images=64 repeats=1")
    env = {
        **python_env(HOME=str(home)),
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("PYTHONPATH")  # the user's: the checkout is installed in the venv (make install)

    def run(line: str):
        return subprocess.run(
            ["bash", "-c", f"{line} storage.root={tmp_path}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    p = run(f"{command} hydra.sweep.dir={tmp_path / 'sweep'}")
    assert p.returncode == 0, p.stderr[-3000:]
    df = pd.read_csv(tmp_path / "sweep" / "results.csv")
    assert set(df["framework"]) == {"tensorflow", "pool"}
    pool = df[df["framework"] == "pool"]
    assert len(pool) == 4 and (pool["images"] == 64).all() and (pool["images_dropped"] == 0).all()
    # both frameworks read every file whole, in both micro-benchmarks: the same bytes
    consumed = df.groupby(["workload", "framework"])["bytes_consumed"].agg(set)
    for workload in ("microbench", "readonly"):
        assert (
            consumed[workload, "pool"] == consumed[workload, "tensorflow"]
            and len(consumed[workload, "pool"]) == 1
        )
    assert (tmp_path / "sweep" / "fig4.png").stat().st_size > 1000
    cell = next(d for d in (tmp_path / "sweep").iterdir() if d.is_dir() and d.name.isdigit() and _pool(d))
    assert records.read(cell / "record.json").provenance["versions"]["PIL"]  # Pillow's version, not null
    start = command.split(" -m campaign ", 1)[0] + " -m campaign "
    searchpath = command.split(" ")[-1]
    for args, said in (
        (
            "framework=pool workload=alexnet",
            "framework=pool: workload=alexnet runs on tensorflow, pytorch only",
        ),
        (
            "framework=pool dataset.format=tfrecord",
            "dataset.format=tfrecord: framework=pool reads files only",
        ),
    ):
        p = run(f"{start}{args} {searchpath} hydra.run.dir={tmp_path / 'refused'}")
        assert p.returncode == 2 and said in p.stderr.strip().splitlines()[-1], p.stderr[-2000:]
    assert not (tmp_path / "refused").exists()


def _pool(cell) -> bool:
    return records.read(cell / "record.json").config["framework"]["name"] == "pool"


def test_a_toy_workload_keeps_its_checks_and_types(tmp_path):
    p = _campaign("workload=toy_sleep", "workload.sleep_s=-1", f"storage.root={tmp_path}", cwd=tmp_path)
    assert p.returncode == 2 and "workload.sleep_s=-1.0 must not be negative" in p.stderr
    p = _campaign("workload=toy_sleep", "workload.sleep_s=long", f"storage.root={tmp_path}", cwd=tmp_path)
    assert p.returncode == 2 and "sleep_s" in p.stderr
    p = _campaign("workload=toy_slep", f"storage.root={tmp_path}", cwd=tmp_path)
    assert p.returncode == 2 and "unknown workload 'toy_slep'" in p.stderr and "toy_sleep" in p.stderr


@pytest.mark.cells
def test_a_signal_that_surfaces_as_another_error_ends_the_campaign_as_the_interrupt(tmp_path):
    # TensorFlow's bindings turn a KeyboardInterrupt raised inside them into a RuntimeError (1 of 16 CI
    # runs): the cell must not be recorded as failed, the campaign must end as interrupted
    out = tmp_path / "sweep"
    p = _campaign(
        "-m",
        "workload=toy_sleep",
        "workload.signal_as_error=true",
        f"storage.root={tmp_path}",
        f"hydra.sweep.dir={out}",
        cwd=tmp_path,
    )
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 130, p.stderr[-2000:]
    assert lines[-1].startswith("campaign: interrupted by SIGINT") and "Traceback" not in p.stderr
    assert not list(out.glob("*/record.json")) and not (out / "results.csv").exists()


def test_a_result_key_that_was_not_declared_fails_the_run():
    class Loose(workloads.Workload):
        name = "loose"
        metrics = ()

    with pytest.raises(workloads.WorkloadError, match=r"undeclared keys \['speed'\]"):
        workloads.check_result(
            Loose(),
            {"speed": 1, "images": 0, "images_dropped": 0, "bytes_consumed": 0, "bytes_read_device": None},
        )
    with pytest.raises(workloads.WorkloadError, match="did not return"):
        workloads.check_result(Loose(), {})


def test_built_in_workloads_are_registered_and_their_metrics_declared():
    assert workloads.names()[:5] == ["alexnet", "baseline", "checkpoint", "emulated", "microbench"]
    for name in ("alexnet", "baseline", "checkpoint", "emulated", "microbench"):
        for m in workloads.get(name).metrics:
            assert METRICS[m.name] is m and m.unit
    with pytest.raises(KeyError, match="registered: alexnet"):
        workloads.get("nope")
