"""The TF-versus-fio benchmark runs end to end on real files (fio from Debian; .ci/run installs it)."""

import os

import pytest

from benchmarks import readonly_vs_fio, rounds
from jobs.storage import iotools
from support.commands import campaign
from support.skips import needs_fio


def _stands_on(cols: list[str], rounds_run: int) -> None:
    """The columns every ratio is printed with (benchmarks.rounds.HEADER): its interval, the interval's
    cover, the rounds, the 1-min load average, the others' CPU share and each side's CPU per item."""
    interval, cover, n, load, others, cpu_a, cpu_b = cols
    lo, hi = map(float, interval.strip("()").split("-"))
    assert lo <= hi and cover.endswith("%") and int(n) == rounds_run and float(load) >= 0
    assert others == "-" or 0 <= int(others.rstrip("%")) <= 100
    assert float(cpu_a) > 0 and float(cpu_b) > 0  # each side spent CPU on its items


def _order(log, key: str) -> list[tuple[int, str]]:
    """(round, side) of row ``key``'s passes in a benchmark's --log, in the order they ran."""
    from benchmarks import rounds

    return [(int(x["round"]), x["side"]) for x in rounds.read_log(log) if x["key"] == key]


@pytest.mark.cells
@needs_fio
def test_benchmark_prints_each_framework_as_a_fraction_of_fio(disk_root, tmp_path, capsys):
    rc = readonly_vs_fio.main(
        [
            "--log",
            str(tmp_path / "passes.csv"),
            "--storage-root",
            str(disk_root),
            "--dataset",
            "caltech101",
            "--num-images",
            "128",
            "--threads",
            "1,2",
            "--repeats",
            "1",
            "--formats",
            "files,tfrecord",
            "--shard-mb",
            "1",
            "--frameworks",
            "tensorflow,pytorch",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    assert "128 files" in lines[0] and "cold cache" in lines[0]
    assert lines[1].split()[:5] == ["format", "readers", "framework", "MB/s", "fio"]
    assert lines[1].split()[-8:] == [*rounds.HEADER.split(), "device/consumed"]
    assert lines[-1].startswith("interval: of the median")  # the legend of the shared columns
    rows = [line.split() for line in lines[2:-1]]
    assert [tuple(r[:3]) for r in rows] == [
        (fmt, n, fw) for fmt in ("files", "tfrecord") for n in ("1", "2") for fw in ("tensorflow", "pytorch")
    ]
    for r in rows:
        mb, fio, ratio, cold = float(r[3]), float(r[4]), float(r[5]), float(r[13])
        assert mb > 0 and fio > 0 and ratio == pytest.approx(mb / fio, rel=0.05, abs=0.006)  # 2 places
        _stands_on(r[6:13], 1)
        assert cold >= 0.9  # the framework read the files from the device, not from memory
    # one round: each reader once, the frameworks then fio, per format and reader count
    for key in ("files/1", "files/2", "tfrecord/1", "tfrecord/2"):
        assert _order(tmp_path / "passes.csv", key) == [(0, "tensorflow"), (0, "pytorch"), (0, "fio")]
    # both frameworks of a row are measured against the same fio runs
    assert rows[0][4] == rows[1][4] and rows[-2][4] == rows[-1][4]
    assert not any(p.name.startswith("bench-") for p in (disk_root / "iocampaign").iterdir())


@pytest.mark.cells
def test_pytorch_benchmark_prints_the_campaigns_rate_against_a_bare_dataloader(disk_root, tmp_path, capsys):
    """Beside each ratio: its interval, the load and each side's CPU per image; the sides alternate."""
    from benchmarks import pytorch_vs_dataloader

    log = tmp_path / "passes.csv"
    args = [
        "--storage-root",
        str(disk_root),
        "--dataset",
        "caltech101",
        "--num-images",
        "64",
        "--log",
        str(log),
    ]
    assert pytorch_vs_dataloader.main([*args, "--workers", "0,2", "--rounds", "2", "--batch-size", "16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "64 files" in lines[0] and "cold cache" in lines[0] and "alternating" in lines[0]
    assert lines[1].split() == [
        "workers",
        "campaign",
        "img/s",
        "bare",
        "img/s",
        "campaign/bare",
        *rounds.HEADER.split(),
        "device/consumed",
    ]
    assert "CPU ms per image of campaign and of bare" in lines[-1]
    rows = [line.split() for line in lines[2:-1]]
    assert [r[0] for r in rows] == ["0", "2"]
    for r in rows:
        mine, bare, ratio, cold = float(r[1]), float(r[2]), float(r[3]), float(r[11])
        lo, hi = map(float, r[4].strip("()").split("-"))
        assert mine > 0 and bare > 0 and lo <= ratio <= hi
        _stands_on(r[4:11], 2)
        assert cold >= 0.9  # the campaign's runs read the evicted files from the device
    for n in (0, 2):  # A B, then B A: neither side always runs first
        assert _order(log, f"workers={n}") == [(0, "campaign"), (0, "bare"), (1, "bare"), (1, "campaign")]


@needs_fio
def test_fio_reads_every_byte_of_the_files(tmp_path):
    d = tmp_path / "job0"
    d.mkdir()
    for i in range(4):
        (d / f"{i}.jpg").write_bytes(os.urandom(64 * 1024))
    m = iotools.small_files([d])
    assert m.bytes == 4 * 64 * 1024 and m.mb_per_s > 0
    for i in range(4):
        (d / f"{i}.jpg").write_bytes(os.urandom(1 << 20))
    m = iotools.small_files([d], "256k")  # the shards' call size reads every byte of files of whole blocks
    assert m.bytes == 4 << 20


def test_fio_json_parsing_with_notes_before_it():
    text = (
        "fio: opendir added 4 files\n"
        '{"jobs": [{"job_runtime": 13, "read": {"io_bytes": 4000000, "runtime": 8}}]}'
    )
    # the group's runtime, not the summed job time
    assert iotools.parse_fio(text, "read") == (500.0, 4_000_000)
    assert iotools.parse_fio(text, "read", with_flush=True)[0] == pytest.approx(4e6 / 0.013 / 1e6)


def test_ior_json_summary_parsing():
    summary = {
        "summary": [{"operation": "write", "bwMaxMIB": 100.0}, {"operation": "read", "bwMaxMIB": 200.0}]
    }
    assert iotools.parse_ior(summary, "read") == pytest.approx(200 * 1.048576)
    with pytest.raises(RuntimeError, match="no write"):
        iotools.parse_ior({"summary": []}, "write")


@pytest.mark.cells
@needs_fio
def test_baseline_campaign_writes_table_one(tmp_path, disk_root):
    import pandas as pd

    out = tmp_path / "sweep"
    p = campaign(
        "-m",
        "workload=baseline",
        "storage=local,tmpfs",
        f"storage.root={disk_root}",
        "storage.fs_check=false",
        "workload.file_gb=0.05",
        "workload.small_file_threads=[1,2]",
        "dataset.num_images=64",
        "batch_size=8",
        "repeats=1",
        "dataset.format=files,tfrecord",
        "dataset.shard_mb=0.25",
        f"hydra.sweep.dir={out}",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    t = pd.read_csv(out / "table_i.csv")
    assert (
        list(t["storage"]) == ["local", "tmpfs"]
        and (t["read_mb_s"] > 0).all()
        and (t["write_mb_s"] > 0).all()
    )
    assert (t["runs"] == 2).all() and set(t["tool"]) == {"fio"}  # both formats' cells measure the tier
    for name in ("table_i.md", "table_i.png", "baselines.csv"):
        assert (out / name).stat().st_size > 0
    b = pd.read_csv(out / "baselines.csv")
    assert sorted(b["measure"].unique()) == ["seq_read", "seq_write", "small_read"]
    assert sorted(b.loc[b["measure"] == "small_read", "readers"].unique()) == [1, 2]
    assert sorted(b["format"].unique()) == ["files", "tfrecord"]  # fio read the image files, then the shards
    # fio runs inside the tool's own folder, so the command names it first and fio sees plain names only
    assert b["command"].str.match(r"^cd \S+ && fio ").all()
    # fio does the I/O: TensorFlow is not imported for a baseline cell, so no accelerator is described
    from jobs import records

    for path in out.glob("*/record.json"):
        assert "accelerator" not in records.read(path).provenance, path
    # efficiency of a micro-benchmark campaign against this baseline: each format against fio over its own
    # files
    mb = tmp_path / "mb"
    p = campaign(
        "-m",
        "workload=readonly",
        "threads=2",
        "dataset.format=files,tfrecord",
        "shuffle=global,local",
        f"storage.root={disk_root}",
        "dataset.num_images=64",
        "dataset.shard_mb=0.25",
        "batch_size=8",
        "repeats=1",
        f"hydra.sweep.dir={mb}",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    from analysis.__main__ import main

    assert main([str(mb), "--baseline", str(out)]) == 0
    s = pd.read_csv(mb / "summary.csv")
    assert (s["efficiency"] > 0).all()
    assert s["efficiency"].tolist() == pytest.approx((s["mb_per_s_median"] / s["small_file_mb_s"]).tolist())
    fio = b[(b["measure"] == "small_read") & (b["readers"] == 2) & (b["storage"] == "local")]
    for fmt, rate in fio.groupby("format")["mb_per_s"].median().items():
        got = s.loc[s["format"] == fmt, "small_file_mb_s"].tolist()
        assert len(got) == 2 and got == pytest.approx([rate, rate]), fmt
    # the layout figure and the report's table; Fig. 5 keeps to the paper's layout
    assert (mb / "layouts.png").stat().st_size > 0 and (mb / "fig5.png").exists()
    r = pd.read_csv(mb / "results.csv")
    assert sorted(set(zip(r["format"], r["shuffle"]))) == [
        ("files", "global"),
        ("files", "local"),
        ("tfrecord", "global"),
        ("tfrecord", "local"),
    ]
    from analysis.figures.declared import rows_of
    from jobs import workloads

    fig5 = next(f for _, f in workloads.figures() if f.key == "fig5")
    assert set(zip(*(rows_of(r, "microbench", fig5)[c] for c in ("format", "shuffle")))) == {
        ("files", "global")
    }
    page = (mb / "report.html").read_text()
    assert "Data layout and shuffling" in page and 'alt="layouts"' in page


def test_fewer_shards_than_fio_readers_read_with_one_reader_per_shard(tmp_path):
    """fio refused a reader without a file ("j1: you need to specify size="): a set of fewer TFRecord
    shards than readers crashed the baseline and the benchmark."""
    from jobs.storage import iotools

    files = []
    for k in range(2):
        f = tmp_path / f"part-{k}.tfrecord"
        f.write_bytes(os.urandom(1 << 20))
        files.append(str(f))
    dirs = iotools.link_farm(files, tmp_path / "farm", 4)
    assert len(dirs) == 2
    m = iotools.small_files(dirs, "256k")
    assert m.bytes == 2 << 20 and m.mb_per_s > 0


@pytest.mark.cells
def test_startup_benchmark_prints_the_cells_time_against_the_measured_time(capsys):
    from benchmarks import startup

    assert startup.main(["--repeats", "2", "--num-images", "128", "--cells", "2"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert len(rows) == 1 and rows[0][0] == "2"
    measured, cell, process, cell_ratio, process_ratio = map(float, rows[0][1:])
    assert 0 < measured < cell < process  # the runs are inside their cells, the cells inside the command
    assert cell_ratio == pytest.approx(cell / measured, rel=0.02) and process_ratio > cell_ratio


@pytest.mark.cells
def test_posix_overhead_benchmark_compares_both_trace_modes_with_untraced_runs(disk_root, capsys):
    """Each mode's row: the measured runs' rate against untraced runs of the same round, what the whole
    measurement took against the untraced one's, and the traced runs' coverage (every run is whole)."""
    from benchmarks import posix_overhead

    assert (
        posix_overhead.main(
            [
                "--storage-root",
                str(disk_root),
                "--num-images",
                "64",
                "--workloads",
                "readonly",
                "--threads",
                "1",
                "--rounds",
                "1",
                "--repeats",
                "1",
                "--cache",
                "warm",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert "64 files" in lines[0] and "warm-cache measured runs" in lines[0]
    assert lines[1].split()[:6] == [
        "workload",
        "threads",
        "trace.runs",
        "untraced",
        "measured",
        "measured/untraced",
    ]
    assert lines[1].split()[6:13] == rounds.HEADER.split()
    rows = {r[2]: r for r in (line.split() for line in lines[2:-1])}
    assert set(rows) == {"all", "extra"}
    for r in rows.values():
        untraced, measured, ratio = float(r[3]), float(r[4]), float(r[5])
        assert untraced > 0 and measured > 0 and ratio > 0
        _stands_on(r[6:13], 1)
        # calls/s, coverage, whole
        assert float(r[14]) > 0 and float(r[16]) >= 0.98 and r[17:] == ["0", "of", "1"], r
    # what the extra run and its traced child cost ("cell time", a ratio of wall times) is the benchmark's
    # figure to print, not a test's to bound: the suite's other work moves it either way
    assert all(r[13].endswith("x") and float(r[13].rstrip("x")) > 0 for r in rows.values())


def test_s3_reader_benchmark_reads_the_same_images_cold_as_files_and_by_both_object_clients(
    disk_root, capsys
):
    """Files, boto3 and s3dlio over the same images, each cold: every client's GETs counted, and s3dlio ÷
    boto3 printed beside each client ÷ files."""
    import re

    from benchmarks import s3_reader

    rc = s3_reader.main(
        ["--storage-root", str(disk_root), "--num-images", "64", "--threads", "2", "--rounds", "1"]
    )
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0 and lines[0].startswith("64 images, ") and "cold every round" in lines[0]
    boto3, files, s3dlio, header, *rows, legend = lines[1:]
    assert header.split() == ["threads", "ratio", *rounds.HEADER.split()]
    assert "of the ratio's first side and of its second" in legend
    assert [r.split()[:2] for r in rows] == [
        ["2", "boto3/files"],
        ["2", "s3dlio/files"],
        ["2", "s3dlio/boto3"],
    ]
    for r in rows:
        assert float(r.split()[2]) > 0
        _stands_on(r.split()[3:], 1)
    assert re.match(r"files +threads=2: +[\d.]+ images/s, device/consumed [\d.]+$", files)
    for line, name in ((boto3, "boto3"), (s3dlio, "s3dlio")):
        m = re.match(
            rf"{name} +threads=2: +[\d.]+ images/s, device/consumed ([\d.]+), GET p50 [\d.]+ ms", line
        )
        assert m and float(m.group(1)) >= 0.9, line  # the volumes' bytes came from the device: cold
    assert not (disk_root / "iocampaign" / "bench-s3").exists()  # everything it made is gone


def test_s3_relay_benchmark_prints_both_servers_gets_and_the_relays_share(disk_root, tmp_path, capsys):
    import re

    from benchmarks import s3_relay

    log = tmp_path / "passes.csv"
    args = ["--num-objects", "16", "--size-kb", "4", "--threads", "2", "--passes", "2", "--log", str(log)]
    rc = s3_relay.main(["--storage-root", str(disk_root), *args])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0 and lines[0].startswith("16 GETs of 4 KB a pass, 2 passes a server"), lines
    number = r"[\d.]+"
    for line, name in zip(lines[1:3], ("direct", "relayed"), strict=True):
        assert re.fullmatch(
            rf"{name} +threads=2: +{number} GETs/s, GET p50 {number} ms, p99 {number} ms, "
            rf"server CPU {number} ms/GET \(the relay's {number}\)",
            line,
        ), line
    assert lines[1].endswith("(the relay's 0.000)")  # the direct server has no relay
    assert lines[3].split() == ["threads", "relayed/direct", *rounds.HEADER.split()]
    row = lines[4].split()
    assert row[0] == "2" and float(row[1]) > 0
    _stands_on(row[2:], 2)
    assert _order(log, "threads=2") == [(0, "direct"), (0, "relayed"), (1, "relayed"), (1, "direct")]
    assert not (disk_root / "iocampaign" / "bench-s3-relay").exists()  # everything it made is gone


def test_readme_times_runs_every_readme_command_that_runs_here_and_says_why_it_leaves_one_out(capsys):
    """``python -m benchmarks.readme_times --list``: each command of README.md's sh blocks, run here as
    written or left out with its reason (the suite, a placeholder, another machine's paths); a command
    whose comment gives no time is one to measure (what it prints when it runs one)."""
    from benchmarks import readme_times

    cmds = readme_times.commands(readme_times.README.read_text())
    by_line = {c.line: c for c in cmds}
    quick = "python -m campaign -m threads=1,2,4,8 storage=local dataset.num_images=1024"
    assert by_line[quick].runs_here is None and by_line[quick].timed
    assert by_line["make test"].runs_here == "the suite: .ci/run times it"
    assert all(c.runs_here for c in cmds if "<date>" in c.line or "/data/" in c.line or "$USER" in c.line)
    assert not readme_times.Command("python -m campaign threads=2", "what it does").timed
    assert readme_times.Command("python -m campaign threads=2", "about 1 min (63 s)").timed
    assert readme_times.main(["--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 + len(cmds) and all(line.strip().startswith("-") for line in out[1:])
    assert sum("[would run]" in line for line in out) == sum(c.runs_here is None for c in cmds) >= 8


def test_forked_commands_prints_the_cpu_of_each_command_forked_as_the_suite_runs_it(tmp_path):
    """``python -m benchmarks.forked_commands``: how fast the machine is, then each command's CPU-s per
    fork; nothing left in the temporary folder it used; a bad ``--repeats`` is one line and exit 2."""
    import re
    import subprocess
    import sys

    from support.commands import python_env

    def forked_commands(repeats: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "benchmarks.forked_commands", "--repeats", repeats],
            env=python_env(TMPDIR=str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=600,
        )

    p = forked_commands("1")
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    assert lines[0].startswith("this machine: a fresh Python imports TensorFlow in "), p.stdout
    rows = [re.fullmatch(r"(.+?) +(\d+\.\d{3}) CPU-s each \(1 forks\)", line) for line in lines[1:]]
    assert all(rows) and [r[1] for r in rows] == [
        "refused (threads=0)",
        "dry run, 4 cells",
        "a warm child, from a copy of its parent",
        "a warm child, from a fresh server",
    ], p.stdout
    assert all(float(r[2]) > 0 for r in rows), p.stdout
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())
    bad = forked_commands("0")
    assert bad.returncode == 2 and bad.stderr.strip().endswith("--repeats must be at least 1"), bad.stderr
