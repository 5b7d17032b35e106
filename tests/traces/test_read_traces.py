"""A user's own traces, read and profiled: PyDarshan's shipped sample logs (one without DXT, two with it),
a real DFTracer trace of a process whose calls are known (dftracer's preload library, as a user runs it),
the same trace in older DFTracer's layout, and every kind of bad trace, each refused in one line with
nothing written."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from analysis.traces import command, tables
from jobs import traces
from jobs.traces import operations
from support.commands import analysis, campaign
from support.traces import A_SIZE, B_SIZE, KIB, WRITTEN, sample
from support.users import as_user


def lines(trace: Path) -> list[str]:
    """The trace's lines (dftracer's end event can hold bytes that are not UTF-8: replaced, as the reader
    does)."""
    with gzip.open(trace, "rt", errors="replace") as f:
        return [x for x in f.read().splitlines() if x.strip()]


def io(t: traces.Trace) -> pd.DataFrame:
    ops = t.operations
    return ops[ops["operation"].isin(["read", "write"])].reset_index(drop=True)


def test_a_dftracer_trace_holds_each_call_with_its_offset_size_and_order(dft):
    t = traces.read(dft)
    assert t.source == "dftracer" and list(t.operations.columns) == list(traces.COLUMNS)
    calls = io(t)
    a = calls[calls["file"].str.endswith("a.bin")]
    expected = [(k * 64 * KIB, 64 * KIB) for k in range(16)] + [(A_SIZE, 0), (1000, 4096), (500_000, 100)]
    assert list(zip(a["offset"], a["size"])) == expected  # read's offsets followed from open, reads, lseek
    b = calls[calls["file"].str.endswith("b.bin")]
    assert list(zip(b["operation"], b["offset"], b["size"])) == [("read", 0, B_SIZE), ("read", B_SIZE, 0)]
    c = calls[calls["file"].str.endswith("c.out")]
    assert list(zip(c["operation"], c["offset"], c["size"])) == [("write", 0, WRITTEN)]
    assert t.operations["start_s"].is_monotonic_increasing and t.operations["start_s"].iloc[0] == 0
    assert set(t.operations["operation"]) >= {"open", "read", "seek", "write", "close"}
    # one process, its main thread
    assert calls["rank"].nunique() == 1 and (calls["thread"] == calls["rank"]).all()


def test_the_profile_of_a_known_program(dft):
    p = tables.profile(traces.read(dft))
    s = p.summary.iloc[0]
    assert (s["reads"], s["writes"], s["files"]) == (21, 1, 3)
    assert s["bytes_read"] == A_SIZE + 4096 + 100 + B_SIZE and s["bytes_written"] == WRITTEN
    # after each file's first read: a.bin's 18 later reads are at or past the previous one's end but for the
    # read after the seek back to 1000; b.bin's end-of-file read is
    assert s["sequential_read_share"] == pytest.approx(18 / 19)
    sizes = p.sizes.set_index(["operation", "size_class"])["requests"]
    assert sizes[("read", "0 B (end of file)")] == 2
    assert sizes[("read", "100 B–4 KiB")] == 1
    assert sizes[("read", "4–64 KiB")] == 1
    assert sizes[("read", "64 KiB–1 MiB")] == 17
    assert sizes[("write", "4–64 KiB")] == 1 and sizes.sum() == 22
    files = p.files.set_index(p.files["file"].map(lambda f: Path(f).name))
    assert files.loc["a.bin", "extent_bytes"] == A_SIZE and files.loc["c.out", "bytes_written"] == WRITTEN
    c = p.concurrency
    assert len(c) == tables.BINS and (c["calls_in_flight"] >= 0).all()
    moved = (c["read_mb_s"] * c["dt_s"]).sum() * 1e6
    # every byte read is in one bin or spread over some
    assert moved == pytest.approx(s["bytes_read"], rel=1e-6)


def test_older_dftracer_layouts_read_the_same(dft, tmp_path):
    """A plain .pfw in one JSON array with string phases ('X', 'M'), as DFTracer 1.x wrote it."""
    old = {1: "X", 4: "M", 2: "C"}
    events = [json.loads(x) for x in lines(dft)]
    for e in events:
        e["ph"] = old.get(e["ph"], e["ph"])
    plain = tmp_path / "old.pfw"
    plain.write_text("[\n" + "".join(json.dumps(e) + ",\n" for e in events) + "]\n")
    a, b = io(traces.read(dft)), io(traces.read(plain))
    pd.testing.assert_frame_equal(a, b)


def test_pydarshans_sample_logs_load_and_dxt_agrees_with_the_counters():
    """dxt.darshan: DXT's segments, file by file, sum to the POSIX counters of the same log."""
    t = traces.read(sample("dxt.darshan"))
    assert t.source == "darshan" and t.has_calls and t.run_time_s == 1469.0
    calls = io(t)
    posix = (
        t.counters[t.counters["module"] == "POSIX"]
        .groupby("file")[["bytes_read", "bytes_written", "reads", "writes"]]
        .sum()
    )
    posix = posix.loc[sorted(set(calls["file"]))]
    assert len(posix) == 169
    for op, nbytes, n in (("read", "bytes_read", "reads"), ("write", "bytes_written", "writes")):
        mine = calls[calls["operation"] == op].groupby("file")["size"]
        assert list(mine.sum().reindex(posix.index, fill_value=0).astype(int)) == list(
            posix[nbytes].astype(int)
        )
        assert list(mine.size().reindex(posix.index, fill_value=0)) == list(posix[n].astype(int))
    simple = traces.read(sample("sample-dxt-simple.darshan"))
    assert list(io(simple)["size"]) == [40, 4000]


def test_a_log_without_dxt_is_profiled_from_its_counters():
    import darshan

    t = traces.read(sample("sample.darshan"))
    assert not t.has_calls and "DXT_ENABLE_IO_TRACE=1" in t.notes[0]
    report = darshan.DarshanReport(str(sample("sample.darshan")), read_all=True)
    written = sum(
        int(report.records[m].to_df()["counters"][f"{m}_BYTES_WRITTEN"].clip(lower=0).sum())
        for m in ("POSIX", "STDIO")
    )
    s = tables.profile(t).summary.iloc[0]
    assert s["from"] == "counters" and s["bytes_written"] == written and s["processes"] == 2048
    assert tables.profile(t).concurrency.empty  # no times per call: no concurrency, and the figure says so


@pytest.mark.cells
def test_analysis_trace_writes_the_profile_and_leaves_a_users_files_alone(tmp_path):
    log = sample("dxt.darshan")
    p = analysis("trace", str(log), "--out", "prof", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "prof"
    names = {f.name for f in out.iterdir() if not f.name.startswith(".")}
    assert names == {
        *tables.Profile.tables(tables.profile(traces.read(log))),
        "trace_profile.png",
        "trace_profile.svg",
    }
    assert "6,126 reads (22.5 MB), 1,497 writes (13.0 MB) on 169 files" in p.stdout
    assert pd.read_csv(out / "trace_summary.csv")["reads"].iloc[0] == 6126
    again = analysis("trace", str(log), "--out", "prof", cwd=tmp_path)
    assert again.returncode == 0, again.stderr  # its own files, replaced
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "trace_sizes.csv").write_text("a user's\n")
    elsewhere = tmp_path / "precious.csv"
    elsewhere.write_text("keep\n")
    (mine / "trace_files.csv").symlink_to(elsewhere)
    refused = command.main([str(log), "--out", str(mine)])
    assert refused == 2
    assert sorted(f.name for f in mine.iterdir()) == ["trace_files.csv", "trace_sizes.csv"]
    assert (mine / "trace_sizes.csv").read_text() == "a user's\n" and elsewhere.read_text() == "keep\n"


def _torn_middle(dft: Path, tmp: Path) -> Path:
    text = lines(dft)
    text[5] = text[5][: len(text[5]) // 2]
    bad = tmp / "torn.pfw"
    bad.write_text("\n".join(text) + "\n")
    return bad


def _with(dft: Path, tmp: Path, name: str, edit) -> Path:
    events = [json.loads(x) for x in lines(dft)]
    bad = tmp / name
    bad.write_text("".join(json.dumps(e) + "\n" for e in edit(events)))
    return bad


def _darshan_of_version(tmp: Path) -> Path:
    data = bytearray(sample("dxt.darshan").read_bytes())
    data[:8] = b"2.06\0\0\0\0"
    bad = tmp / "old.darshan"
    bad.write_bytes(bytes(data))
    return bad


def _file(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


BAD = {
    "missing": (lambda d, t: t / "nothing.darshan", "no such file"),
    "empty": (lambda d, t: _file(t / "empty.pfw", b""), "an empty file"),
    "text": (lambda d, t: _file(t / "notes.txt", b"hello\n"), "not a trace"),
    "truncated darshan": (
        lambda d, t: _file(t / "cut.darshan", sample("dxt.darshan").read_bytes()[:5000]),
        "a truncated Darshan log",
    ),
    "darshan 2": (lambda d, t: _darshan_of_version(t), "this tool reads versions 3.x"),
    "truncated gzip": (
        lambda d, t: _file(t / "cut.pfw.gz", d.read_bytes()[:-200]),
        "a truncated gzip stream",
    ),
    "torn line": (_torn_middle, "line 6 is not a JSON event"),
    "unknown phase": (
        lambda d, t: _with(d, t, "ph.pfw", lambda ls: [{**e, "ph": "B"} for e in ls]),
        "ph='B'",
    ),
    "dftracer 3": (lambda d, t: _with(d, t, "v3.pfw", _version_3), "written by DFTracer 3.0.1"),
    "no io": (lambda d, t: _with(d, t, "meta.pfw", _no_io), "no reads or writes"),
    "fifo": (lambda d, t: _fifo(t / "pipe.pfw"), "not a regular file"),
    "folder without a trace": (lambda d, t: t, "no POSIX trace in it"),
}


def _version_3(events: list[dict]) -> list[dict]:
    return [{**e, "args": {**e["args"], "version": 30001}} if e["name"] == "start" else e for e in events]


def _no_io(events: list[dict]) -> list[dict]:
    return [e for e in events if e["name"] not in ("read", "pread64", "write")]


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_trace_gets_one_line_and_nothing_is_written(dft, tmp_path, monkeypatch, capsys, case):
    make, expected = BAD[case]
    where = tmp_path / "in"
    where.mkdir()
    bad = make(dft, where)
    monkeypatch.chdir(tmp_path)
    assert command.main([str(bad), "--out", "out"]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and expected in err[0] and err[0].startswith("analysis trace: "), err
    assert not (tmp_path / "out").exists()


def test_a_trace_past_the_limit_is_refused(dft, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(operations, "MAX_OPERATIONS", 10)
    monkeypatch.chdir(tmp_path)
    for t in (dft, sample("dxt.darshan")):
        assert command.main([str(t)]) == 2
        err = capsys.readouterr().err.strip()
        assert "calls or more; this tool reads traces of up to 10 calls" in err and "\n" not in err
    assert not list(tmp_path.iterdir())


def test_a_darshan_logs_calls_written_as_a_dftracer_trace_read_back_the_same(tmp_path, capsys):
    """--dftracer: DXT's segments as DFTracer events, which this reader (and python -m analysis.perfetto)
    reads back: the same files, ranks, operations, offsets and sizes, in the same order."""
    log = sample("dxt.darshan")
    out = tmp_path / "dxt.pfw.gz"
    assert command.main([str(log), "--out", str(tmp_path / "p"), "--no-figures", "--dftracer", str(out)]) == 0
    a, b = traces.read(log), traces.read(out)
    assert b.source == "dftracer"
    columns = ["file", "rank", "operation", "offset", "size"]
    pd.testing.assert_frame_equal(a.operations[columns], b.operations[columns])
    assert (a.operations["start_s"] - b.operations["start_s"]).abs().max() < 1e-6  # µs, as DFTracer keeps
    from analysis import perfetto

    assert perfetto.main([str(out), str(tmp_path / "dxt.json.gz")]) == 0
    capsys.readouterr()
    assert command.main([str(log), "--out", str(tmp_path / "q"), "--dftracer", str(out)]) == 2
    assert "exists; name a new file" in capsys.readouterr().err and not (tmp_path / "q").exists()
    assert (
        command.main([str(sample("sample.darshan")), "--out", str(tmp_path / "r"), "--dftracer", "x.pfw"])
        == 2
    )
    assert "counters only" in capsys.readouterr().err and not (tmp_path / "r").exists()


@pytest.mark.cells
def test_a_link_another_user_planted_at_a_trace_is_never_followed(dft, other_user, shared, tmp_path, cwd):
    """A second user's folder holds ``job.pfw.gz``, their link to a trace in root's private folder: root's
    ``analysis trace`` and ``workload=replay`` refuse it in one line naming the link and its maker, and
    neither reads the trace behind it (its atime is kept) nor writes anything."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    secret = private / "root-only.pfw.gz"
    secret.write_bytes(dft.read_bytes())
    os.utime(secret, (1_000_000_000, 1_000_000_000))  # a read would move the atime (relatime: it is older)
    theirs = shared / "theirs"  # a folder of theirs: not sticky, so the kernel's protected_symlinks allows it
    theirs.mkdir()
    os.chown(theirs, other_user[1], other_user[2])
    planted = theirs / "job.pfw.gz"
    made = as_user(other_user, "ln", "-s", str(secret), str(planted))
    assert made.returncode == 0, made.stderr
    said = f"{planted}: {planted} is a link made by {other_user[0]}: the tool never follows another user's "
    p = analysis("trace", str(planted), "--out", "prof", cwd=cwd)
    assert p.returncode == 2 and p.stderr.strip().endswith(" (copy the trace to a folder of yours)")
    assert said in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    root = tmp_path / "root"
    root.mkdir()
    p = campaign(
        "workload=replay", f"replay.trace={planted}", f"storage.root={root}", "repeats=1", "warmup=0", cwd=cwd
    )
    assert p.returncode == 2 and said in p.stderr, p.stdout[-2000:] + p.stderr[-2000:]
    assert len([x for x in p.stderr.splitlines() if x.strip()]) == 1, p.stderr
    assert os.stat(secret).st_atime == 1_000_000_000
    assert list(cwd.iterdir()) == [] and not (root / "iocampaign").exists()


def test_a_cells_profile_is_named_with_its_campaign_so_two_campaigns_cell_0_do_not_share_one(tmp_path):
    from analysis.traces.command import default_name

    for sweep in ("16-25-00", "17-02-11"):
        (tmp_path / sweep / "0").mkdir(parents=True)
    assert default_name(tmp_path / "16-25-00" / "0") == "16-25-00-0_io"
    assert default_name(tmp_path / "17-02-11" / "0") == "17-02-11-0_io"
    assert default_name(tmp_path / "dxt.darshan") == "dxt_io"  # a trace file: its own name
    (tmp_path / "mytrace").mkdir()
    assert default_name(tmp_path / "mytrace") == "mytrace_io"
