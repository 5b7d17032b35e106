"""``workload=replay``: a user's trace replayed as a cell on a real disk, traced again by dftracer and
compared with the original call by call; PyDarshan's DXT samples replayed; what cannot be replayed refused
in one line. The trace's own paths are never opened: a file the traced job wrote stays as it was."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.traces import tables
from jobs import records, traces
from support.commands import campaign
from support.files import on_disk
from support.traces import A_SIZE, B_SIZE, GAP_S, WRITTEN, sample


@pytest.fixture(scope="module")
def replayed(dft, tmp_path_factory):
    """One campaign: the program's trace replayed fast and at its recorded times, by its one thread and by
    two, traced again (trace.posix=true), one measured run each."""
    base = on_disk(tmp_path_factory, "replay")
    written = dft.parent.parent / "data" / "c.out"
    before = (written.read_bytes(), written.stat().st_mtime_ns)
    out = base / "c"
    p = campaign(
        "-m",
        "workload=replay",
        f"replay.trace={dft}",
        "replay.mode=fast,recorded",
        "replay.concurrency=null,2",
        "trace.posix=true",
        "repeats=1",
        "warmup=0",
        f"storage.root={base}",
        f"hydra.sweep.dir={out}",
        cwd=base,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    cells = {}
    for rec_path in out.glob("*/record.json"):
        rec = records.read(rec_path)
        cells[(rec.config["replay"]["mode"], rec.config["replay"]["concurrency"])] = (rec_path.parent, rec)
    assert len(cells) == 4
    return cells, written, before, base


def _calls(t: traces.Trace) -> pd.DataFrame:
    ops = t.operations
    io = ops[ops["operation"].isin(["read", "write"])].copy()
    io["name"] = io["file"].map(lambda f: f.rsplit("/", 1)[-1].split("-", 1)[-1])  # 000001-a.bin -> a.bin
    return io


@pytest.mark.cells
def test_each_run_issues_the_traces_calls_cold(replayed):
    cells, *_ = replayed
    for (_, concurrency), (_, rec) in cells.items():
        (run,) = rec.runs
        assert rec.status == "completed" and run["cache_state"] == "cold"
        assert run["replay_reads"] == 21 and run["replay_writes"] == 1
        assert run["replay_bytes_read"] == A_SIZE + 4096 + 100 + B_SIZE
        assert run["bytes_consumed"] == A_SIZE + B_SIZE  # each byte once: a.bin's later reads are re-reads
        assert run["replay_bytes_written"] == WRITTEN
        assert run["replay_threads"] == (concurrency or 1)  # the trace's one thread, or the files dealt to 2


@pytest.mark.cells
def test_the_replay_traced_again_matches_the_original_call_by_call(dft, replayed):
    """Bytes, calls, the request-size histogram and each file's order of (offset, size): all the same."""
    cells, *_ = replayed
    folder, _ = cells[("fast", None)]
    original, again = traces.read(dft), traces.read(folder)
    a, b = _calls(original), _calls(again)
    for name in ("a.bin", "b.bin", "c.out"):
        mine = [
            tuple(x) for x in a[a["name"] == name][["operation", "offset", "size"]].itertuples(index=False)
        ]
        theirs = [
            tuple(x) for x in b[b["name"] == name][["operation", "offset", "size"]].itertuples(index=False)
        ]
        assert mine == theirs, name
    pa, pb = tables.profile(original), tables.profile(again)
    pd.testing.assert_frame_equal(pa.sizes, pb.sizes)
    for k in ("reads", "writes", "bytes_read", "bytes_written", "files"):
        assert pa.summary[k].iloc[0] == pb.summary[k].iloc[0], k


@pytest.mark.cells
def test_recorded_mode_keeps_the_think_time(replayed):
    cells, *_ = replayed
    (recorded,) = cells[("recorded", None)][1].runs
    assert recorded["replay_recorded_s"] >= GAP_S
    assert recorded["seconds"] >= GAP_S  # it waited for b.bin's read as the program did


@pytest.mark.cells
def test_the_traced_jobs_own_files_are_never_opened(replayed):
    """The program wrote c.out in its data folder: the replays wrote their c.out in the tool's folder on the
    tier, and removed it after each run."""
    cells, written, before, base = replayed
    assert (written.read_bytes(), written.stat().st_mtime_ns) == before
    assert not any((base / "iocampaign" / "replay-written").iterdir())


@pytest.mark.cells
def test_pydarshans_dxt_samples_replay(tmp_path_factory):
    base = on_disk(tmp_path_factory, "dxt")
    out = base / "c"
    logs = ",".join(str(sample(n)) for n in ("dxt.darshan", "sample-dxt-simple.darshan"))
    p = campaign(
        "-m",
        "workload=replay",
        f"replay.trace={logs}",
        "repeats=1",
        "warmup=0",
        f"storage.root={base}",
        f"hydra.sweep.dir={out}",
        cwd=base,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    runs = {
        rec.config["replay"]["trace"].rsplit("/", 1)[-1]: rec.runs[0]
        for rec in map(records.read, out.glob("*/record.json"))
    }
    dxt, simple = runs["dxt.darshan"], runs["sample-dxt-simple.darshan"]
    assert (dxt["replay_reads"], dxt["replay_bytes_read"]) == (6126, 22_517_726)
    assert (dxt["replay_writes"], dxt["replay_bytes_written"]) == (1497, 13_021_781)
    assert dxt["cache_state"] == "cold"
    assert (simple["replay_writes"], simple["replay_bytes_written"], simple["replay_reads"]) == (2, 4040, 0)


@pytest.mark.parametrize(
    "args, expected",
    [
        ((), "workload=replay needs a trace: replay.trace="),
        ((f"replay.trace={sample('sample.darshan')}",), "the trace holds counters only, no calls to replay"),
        (("replay.trace=nothing.pfw",), "nothing.pfw: no such file"),
        (("replay.concurrency=0", f"replay.trace={sample('dxt.darshan')}"), "replay.concurrency=0"),
        (
            ("storage=s3", "storage.reader=fuse", f"replay.trace={sample('dxt.darshan')}"),
            "storage.reader=fuse is for the runs that read one (leave storage.reader=native)",
        ),
    ],
)
def test_what_cannot_be_replayed_is_refused_in_one_line(cwd, args, expected):
    p = campaign("workload=replay", *args, cwd=cwd)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2 and len(lines) == 1 and expected in lines[0], p.stderr
    assert not [f for f in cwd.rglob("*") if f.is_file()]


@pytest.mark.cells
def test_results_csv_tells_the_replays_apart(replayed, dft):
    *_, base = replayed
    results = pd.read_csv(base / "c" / "results.csv", dtype={"replay_concurrency": str})
    assert set(zip(results["replay_mode"], results["replay_concurrency"])) == {
        ("fast", "as traced"),
        ("fast", "2"),
        ("recorded", "as traced"),
        ("recorded", "2"),
    }
    assert set(results["replay_trace"]) == {str(dft)} and (results["cache_state"] == "cold").all()


def _replayed_on_a_store(preset: str, logs: list, base) -> None:
    """Each read a ranged GET of its file's object, each write a PUT, through the store's service; the reads
    that found a file's end, opens and closes counted as skipped; cold, proven by the server's reads."""
    out = base / "c"
    p = campaign(
        "-m",
        "workload=replay",
        f"replay.trace={','.join(map(str, logs))}",
        preset,
        "replay.concurrency=8",
        "repeats=1",
        "warmup=0",
        f"storage.root={base}",
        f"hydra.sweep.dir={out}",
        cwd=base,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    done = list(map(records.read, out.glob("*/record.json")))
    assert len(done) == len(logs)
    for rec in done:
        (run,) = rec.runs
        t = traces.read(rec.config["replay"]["trace"])
        ops = t.operations
        reads = ops[(ops["operation"] == "read") & (ops["size"] > 0)]
        writes = ops[ops["operation"] == "write"]
        assert (run["replay_reads"], run["replay_bytes_read"]) == (len(reads), reads["size"].sum())
        assert (run["replay_writes"], run["replay_bytes_written"]) == (len(writes), writes["size"].sum())
        assert run["requests"] == run["replay_calls"] == len(reads) + len(writes)
        assert run["replay_calls_skipped"] == len(ops) - len(reads) - len(writes)
        assert run["request_bytes"] == run["replay_bytes_read"]
        assert run["cache_state"] == ("cold" if len(reads) else "unknown"), rec.config["replay"]["trace"]
    assert list((base / "iocampaign" / "s3servers").iterdir()) == []


@pytest.mark.cells
def test_the_traces_replay_on_an_object_store_as_ranged_gets_and_puts(dft, tmp_path_factory):
    """storage=s3 (the embedded server). (PyDarshan's dxt.darshan, 7,623 calls, is replayed on a disk in the
    test above: as 7,623 requests it took 50-90 s of a busy suite for the same counts.)"""
    logs = [dft, sample("sample-dxt-simple.darshan")]
    _replayed_on_a_store("storage=s3", logs, on_disk(tmp_path_factory, "s3"))


def _moved(dft, folder, offset: int):
    """The program's trace with its one pread at ``offset`` (a plain .pfw)."""
    import gzip
    import json

    with gzip.open(dft, "rt", errors="replace") as f:
        events = [json.loads(x) for x in f.read().splitlines() if x.strip()]
    for e in events:
        if e.get("name") == "pread64":
            e["args"]["offset"] = offset
    out = folder / f"moved-{offset}.pfw"
    out.write_text("".join(json.dumps(e) + "\n" for e in events))
    return out


def test_a_trace_that_reads_past_any_file_the_tier_can_hold_is_refused(dft, cwd):
    trace = _moved(dft, cwd.parent, 10**18)
    p = campaign("workload=replay", f"replay.trace={trace}", cwd=cwd)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert (
        "past the size of storage=local's whole file system" in lines[0] and "a.bin ends at byte" in lines[0]
    )
    assert not [f for f in cwd.rglob("*") if f.is_file()]


@pytest.mark.cells
def test_a_read_far_into_a_file_makes_a_sparse_file_not_a_full_one(dft, tmp_path_factory):
    """The pread moved to 20 GB: a.bin is made 20 GB long, but only the bytes the reads touch are written
    (about 1 MiB), and the replay reads them cold."""
    base = on_disk(tmp_path_factory, "sparse")
    trace = _moved(dft, base, 20 * 10**9)
    p = campaign(
        "workload=replay",
        f"replay.trace={trace}",
        "repeats=1",
        "warmup=0",
        f"storage.root={base}",
        f"hydra.run.dir={base / 'c'}",
        cwd=base,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    (made,) = (base / "iocampaign" / "datasets").glob("replay-*/*-a.bin")
    st = made.stat()
    assert st.st_size == 20 * 10**9 + 100 and st.st_blocks * 512 < 4 * 2**20
    rec = records.read(base / "c" / "record.json")
    (run,) = rec.runs
    assert run["cache_state"] == "cold" and run["replay_reads"] == 21
    # the record's stored bytes are what the files take on the tier, holes left out (before: 20 GB)
    made_bytes = sum(f.stat().st_blocks * 512 for f in made.parent.glob("*-*"))
    assert rec.dataset["stored_bytes"] == made_bytes < 4 * 2**20
    # the run's line counts the calls, and no images (before: "0 images (0 dropped)")
    said = (base / "c" / "__main__.log").read_text()
    assert "run 1/1: 28 calls by 1 thread(s)" in said and " images (" not in said, said
