"""MLPerf Storage's training rules (``+experiment=mlperf``, ``python -m analysis mlperf``): a real run of
emulated B200s through PyTorch's DataLoader, judged rule by rule, and each rule failing where its figure
passes the limit (the module's one real record, copied with that one figure changed)."""

import copy
import dataclasses
import os
import shutil
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from analysis.mlperf import command, rules
from jobs import records
from support.commands import analysis, campaign
from support.files import on_disk

RETINANET_SAMPLE = 322_957  # bytes: MLPerf Storage's retinanet record length
pytestmark = pytest.mark.cells  # every test reads the module's one real campaign (``finished``)
RULES = (
    "workload and accelerator",
    "data loader",
    "sample format",
    "sample size",
    "runs",
    "seed",
    "gap between runs",
    "replication",
    "accelerator utilization",
    "first step",
    "dataset size",
    "read from storage",
    "data and results",
    "object client",
)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """(folder, stdout) of ``+experiment=mlperf`` on emulated B200s: one warm-up and five runs, cold."""
    base = tmp_path_factory.mktemp("mlperf")
    root = on_disk(tmp_path_factory, "mlperf-data")
    folder = base / "run"
    p = campaign(
        "+experiment=mlperf",
        "storage=local",
        f"storage.root={root}",
        "dataset.num_images=96",
        "loader.num_workers=2",
        f"hydra.run.dir={folder}",
        cwd=base,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return folder, p.stdout


def _record(finished) -> records.CellRecord:
    return records.read(finished[0] / records.FILENAME)


def _judged(rec: records.CellRecord, where: Path) -> rules.Verdict:
    """The verdict of ``rec`` written as a record in the folder ``where``."""
    where.mkdir(parents=True, exist_ok=True)
    path = records.write(rec, where)
    return rules.check(".", rec, path)


def _state(verdict: rules.Verdict, rule: str) -> rules.Check:
    return next(c for c in verdict.checks if c.rule == rule)


def _passing(rec: records.CellRecord) -> records.CellRecord:
    """The real record with the figures a busy 2-core workstation cannot reach set where the rules want
    them, so that one change shows alone: a dataset of 200 GiB (in retinanet's samples of 322,957 B) against
    16 GiB of memory, an AU of 95% and a 1% spread in every run, each run starting 0.1 s after the one before
    it ended."""
    out = copy.deepcopy(rec)
    _sized(out, 200 * 2**30)
    out.provenance["mem_total_bytes"] = 16 * 2**30
    start = datetime.fromisoformat(out.runs[0]["started_at"])
    for k, run in enumerate(out.runs):
        run["train_au_percentage"] = 95.0
        run["images_per_s"] = 1000.0 + k * 2
        run["started_at"] = start.isoformat()
        start += timedelta(seconds=run["run_wall_s"] + 0.1)
    return out


def _sized(rec: records.CellRecord, total: int, sample: int = RETINANET_SAMPLE) -> None:
    """``rec``'s dataset made ``total`` bytes of samples of ``sample`` bytes."""
    rec.dataset["total_bytes"] = total
    rec.dataset["files"] = round(total / sample)


def test_the_study_runs_five_seeded_runs_and_ends_with_the_verdict(finished):
    folder, out = finished
    rec = _record(finished)
    assert [r["warmup"] for r in rec.runs] == [True, False, False, False, False, False]
    assert len({r["shuffle_seed"] for r in rec.runs if not r["warmup"]}) == 5
    assert rec.config["framework"]["name"] == "pytorch" and rec.config["batch_size"] == 24
    assert all(r["cache_state"] == "cold" for r in rec.runs)
    tail = [line for line in out.splitlines() if line.startswith("[mlperf] ")]
    assert tail[0].startswith("[mlperf] retinanet on B200: 1 accelerator at AU "), tail
    # 96 images against five times this machine's memory: a workstation's what-if, said with its figure
    assert "CLOSED-eligible: no, because" in tail[0] and "the dataset is 0.0" in tail[0], tail[0]
    # the set was generated at retinanet's sample size (accelerator.sample_kb), as MLPerf Storage's is
    size = _state(_judged(rec, folder.parent / "again"), "sample size")
    assert size.state == rules.CLOSED and "323.0 KB" in size.limit, size
    assert abs(rec.dataset["total_bytes"] / rec.dataset["files"] - RETINANET_SAMPLE) < 0.05 * RETINANET_SAMPLE
    assert tail[-1] == f"[mlperf] every rule beside its figure: python -m analysis mlperf {folder}"
    # the report opens with the same question: the verdict, then every rule's row with its state
    page = (folder / "report.html").read_text()
    first, tiers = (
        page.index("MLPerf Storage: would a compliant run show this?"),
        page.index("What each tier"),
    )
    section = page[first:tiers]
    assert first < tiers and "CLOSED-eligible: no, because" in section
    assert sum(section.count(f'<td class="{state}">') for state in ("CLOSED", "OPEN", "INVALID")) == len(
        RULES
    )
    # its figure: the AU threshold the cell was held to, and whole accelerators on the axis
    svg = (folder / "capacity.svg").read_text()
    assert "<!-- AU threshold 85% -->" in svg and "<!-- 1 -->" in svg and "<!-- 0.6 -->" not in svg


def test_the_command_lists_every_rule_with_its_figure_and_limit(finished, tmp_path):
    p = analysis("mlperf", str(finished[0]), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    for rule in RULES:
        line = next(line for line in lines if line[11:].startswith(rule))
        assert line.split()[0] in ("CLOSED", "OPEN", "INVALID") and "[limit: " in line, line
    assert "  INVALID  dataset size" in p.stdout
    runs = next(line for line in lines if line[11:].startswith("runs "))
    assert runs.startswith("  CLOSED ") and "5 measured, 1 warm-up" in runs, runs
    assert list(tmp_path.iterdir()) == []  # it prints; it writes nothing


def test_every_rule_holds_on_the_real_record_once_its_out_of_reach_figures_are_met(finished, tmp_path):
    # /dev/shm: the results on another file system than the data's disk
    shm = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        v = _judged(_passing(_record(finished)), shm / "cell")
    finally:
        shutil.rmtree(shm)
    assert [c.rule for c in v.checks] == list(RULES)
    assert v.state == rules.CLOSED, [c for c in v.checks if c.state != rules.CLOSED]
    assert v.line().endswith("CLOSED-eligible: yes, every rule holds")


@pytest.mark.parametrize(
    "rule,change,why",
    [
        ("runs", lambda r: r.runs.pop(), "4 measured and 1 warm-up runs, not 5 and 1"),
        ("runs", lambda r: r.runs.__setitem__(0, {**r.runs[0], "warmup": False}), "6 measured and 0 warm-up"),
        ("replication", lambda r: r.runs[-1].__setitem__("images_per_s", 1070.0), "samples/s spread 6."),
        (
            "seed",
            lambda r: r.runs[-1].__setitem__("shuffle_seed", r.runs[-2]["shuffle_seed"]),
            "a seed repeats",
        ),
        (
            "accelerator utilization",
            lambda r: r.runs[3].__setitem__("train_au_percentage", 84.0),
            "AU fell to 84.0%",
        ),
        (
            "dataset size",
            lambda r: r.provenance.__setitem__("mem_total_bytes", 64 * 2**30),
            "against the 320 GiB",
        ),
        ("dataset size", lambda r: _sized(r, 11_999 * RETINANET_SAMPLE), "11,999 samples against 12,000"),
        (
            "dataset size",  # the runs held to 8 GiB (platform.memory_limit_gb): 5 x 8 GiB, not 5 x 16 GiB
            lambda r: (
                _sized(r, 30 * 2**30),
                r.provenance.__setitem__("memory_limit_bytes", 8 * 2**30),
            ),
            "30.00 GiB against the 40 GiB that 5 x 1 x 8.0 GiB (the runs' memory limit) requires "
            "(a set that complies here: dataset.num_images=132990)",  # 40 GiB in samples of the set's mean
        ),
        (
            "first step",
            lambda r: r.runs[2].__setitem__("steady_runtime_s", r.runs[2]["runtime_s"]),
            "the first step is not left out of AU",
        ),
        (
            "sample size",  # ImageNet-like samples, as the set is without the profile's size
            lambda r: _sized(r, 200 * 2**30, 112_000),
            "the samples average 112.0 KB, not retinanet's 323.0 KB",
        ),
        ("workload and accelerator", lambda r: r.config["accelerator"].update(name="unet3d_h100"), "what-if"),
        (
            "workload and accelerator",
            lambda r: r.config["accelerator"].update(name="alexnet_h100"),
            "not an MLPerf",
        ),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_a_rule_fails_where_its_figure_passes_the_limit(finished, tmp_path, rule, change, why):
    rec = _passing(_record(finished))
    change(rec)
    shm = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        v = _judged(rec, shm / "cell")
    finally:
        shutil.rmtree(shm)
    failed = [c for c in v.checks if c.state != rules.CLOSED]
    # another workload's profile brings its own sample format and size: unet3d's are npz (OPEN) of 147 MB,
    # alexnet has neither
    also = {"what-if": ["sample format", "sample size"], "not an MLPerf": ["sample format", "sample size"]}
    also = also.get(why, [])
    assert [c.rule for c in failed] == [rule, *also], failed
    assert failed[0].state == rules.INVALID
    assert why in failed[0].why, failed[0]
    assert why in v.line()


def test_unet3ds_samples_stored_as_npz_meet_its_sample_format_and_jpegs_are_open(finished):
    """MLPerf Storage's unet3d reads one .npz file per sample: dataset.format=npz (what +experiment=mlperf
    reads a unet3d profile's dataset in) meets the rule; the same samples as JPEG files are OPEN."""
    shm = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        for fmt, state in (("npz", rules.CLOSED), ("files", rules.OPEN)):
            rec = _passing(_record(finished))
            rec.config["accelerator"].update(name="unet3d_b200")
            rec.dataset["format"] = fmt
            (check,) = [c for c in _judged(rec, shm / fmt).checks if c.rule == "sample format"]
            assert (check.figure, check.limit.split()[0], check.state) == (
                "npz" if fmt == "npz" else "jpeg",
                "npz",
                state,
            )
    finally:
        shutil.rmtree(shm)


def test_a_memory_limit_on_the_runs_is_the_memory_the_dataset_rule_counts(finished, tmp_path):
    """A 64 GiB machine whose runs were held to 32 GiB (platform.memory_limit_gb): their page cache could
    not hold more, so 200 GiB is five times what the clients had, and the figure says whose memory it is."""
    rec = _passing(_record(finished))
    rec.provenance.update(mem_total_bytes=64 * 2**30, memory_limit_bytes=32 * 2**30)
    check = _state(_judged(rec, tmp_path / "cell"), "dataset size")
    assert check.state == rules.CLOSED, check
    assert check.limit.startswith("≥ 5 x 1 x 32.0 GiB (the runs' memory limit) = 160.0 GiB"), check.limit
    rec.provenance["memory_limit_bytes"] = 128 * 2**30  # a limit above the machine's memory: the machine's
    assert _state(_judged(rec, tmp_path / "other"), "dataset size").state == rules.INVALID


def test_the_object_client_is_named_and_boto3_is_refused(finished, tmp_path):
    """The client is the one the runs read through, as the record says (``object_store.client``)."""
    rec = _passing(_record(finished))
    rec.config["storage"] = {**rec.config["storage"], "kind": "object", "reader": "native"}
    rec.provenance["object_store"] = {"client": "s3torchconnector"}
    v = _judged(rec, tmp_path / "torch")
    assert _state(v, "object client").figure == "s3torchconnector"
    assert _state(v, "object client").state == rules.CLOSED
    rec.config["framework"] = {**rec.config["framework"], "name": "tensorflow"}
    rec.provenance["object_store"] = {"client": "boto3"}
    v = _judged(rec, tmp_path / "tf")
    assert (_state(v, "object client").figure, _state(v, "object client").state) == ("boto3", rules.INVALID)
    assert "boto3 is not an approved client" in v.line()
    assert _state(v, "data loader").state == rules.OPEN  # another framework: OPEN, beside boto3's INVALID
    rec.provenance["object_store"] = {"client": "s3dlio"}
    assert _state(_judged(rec, tmp_path / "s3dlio"), "object client").state == rules.CLOSED
    rec.config["storage"]["reader"] = "fuse"
    rec.provenance["object_store"] = {"client": "s3fs"}
    assert _state(_judged(rec, tmp_path / "fuse"), "object client").figure == "s3fs"


def test_data_and_results_on_one_file_system_are_refused(finished, tmp_path):
    rec = _passing(_record(finished))
    data = rec.provenance["data_mount"]["dev"]
    st = os.stat(tmp_path)
    v = _judged(rec, tmp_path / "cell")  # tmp_path: the data's disk or not, as the machine has it
    same = data == f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    assert _state(v, "data and results").state == (rules.INVALID if same else rules.CLOSED)
    rec.provenance["data_mount"] = {
        **rec.provenance["data_mount"],
        "dev": f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}",
    }
    v = _judged(rec, tmp_path / "same")
    assert _state(v, "data and results").state == rules.INVALID
    assert "data and results share the file system" in v.line()


def test_a_run_that_waited_longer_than_a_run_is_refused(finished, tmp_path):
    rec = _passing(_record(finished))
    last = rec.runs[-1]
    start = datetime.fromisoformat(last["started_at"]) + timedelta(seconds=3600)
    last["started_at"] = start.isoformat()
    v = _judged(rec, tmp_path / "cell")
    assert _state(v, "gap between runs").state == rules.INVALID
    assert "apart, longer than a run" in v.line()


def test_a_folder_without_emulated_accelerators_is_refused_in_one_line(tmp_path):
    p = analysis("mlperf", str(tmp_path), cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "holds no completed cell of emulated accelerators" in p.stderr
    p = analysis("mlperf", str(tmp_path / "nope"), cwd=tmp_path)
    assert p.returncode == 2 and "is not a folder" in p.stderr
    assert command.closing_lines(tmp_path) == []


def test_a_failed_rule_says_what_limited_the_run(finished, tmp_path):
    rec = _passing(_record(finished))
    rec.runs[2]["train_au_percentage"] = 40.0
    v = _judged(rec, tmp_path / "cell")
    assert "AU fell to 40.0%, limited by " in v.line()
    assert any(
        w in v.line() for w in ("the client's CPU", "the storage", "request latency", "the page cache")
    )


def test_the_capacity_search_keeps_the_experiments_runs_and_loader():
    """``campaign.capacity +experiment=mlperf``: each round's cells carry the experiment's five runs and a
    warm-up and PyTorch's loader (the search's own three runs without a warm-up, and tf.data's prefetch,
    apply only where nothing sets them)."""
    from campaign.capacity import search

    overrides = [
        "+experiment=mlperf",
        "accelerator=retinanet_b200",
        "storage=local",
        "dataset.num_images=480",
    ]
    assert search.loader_defaults(overrides) == {}  # PyTorch's workers load ahead: no tf.data prefetch
    cell = search.prove_cell("local", {"name": "retinanet_b200", "batch_size": 24}, overrides)
    assert not any(o.startswith(("repeats=", "warmup=", "prefetch=")) for o in cell), cell
    plain = search.prove_cell("local", {"name": "retinanet_b200", "batch_size": 24}, overrides[1:])
    assert {"repeats=3", "warmup=0", "prefetch=2"} <= set(plain), plain  # without it: the search's own
    from campaign.capacity import checks

    # the cell as each round makes it passes the campaign's checks (tf.data's prefetch would be refused)
    assert checks.cells(overrides, {"name": "retinanet_b200", "batch_size": 24}) is None


def test_the_study_reads_its_profiles_what_if_scale_unless_a_set_or_a_size_is_chosen():
    """``+experiment=mlperf`` without ``dataset.num_images``: the profile's what-if scale (unet3d's rule
    asks 500 GB of its volumes here, which planning refused as 16,384 of them before), in the campaign and
    in the capacity search; a size or a dataset the user chose keeps its own."""
    from campaign.capacity import command as capacity
    from support.configs import compose_cell

    def images(*overrides: str) -> int:
        return compose_cell(["+experiment=mlperf", *overrides]).dataset.num_images

    assert images("accelerator=unet3d_b200") == 28
    assert images() == images("accelerator=retinanet_mi355") == 1024
    assert images("accelerator=resnet50_h100") == 2048  # five of its batches of 400
    assert images("accelerator=unet3d_b200", "dataset.num_images=64") == 64
    assert images("accelerator=unet3d_b200", "dataset=caltech101") == 9144  # the preset's own count
    # the search counts the accelerators the set can feed from the same number its cells read
    assert capacity._images(["+experiment=mlperf", "accelerator=unet3d_b200", "storage=local,tmpfs"]) == 28
    assert capacity._images(["accelerator=unet3d_b200", "storage=local"]) == 16384  # no experiment: as before
    assert capacity._images(["+experiment=mlperf", "accelerator=unet3d_b200", "dataset.num_images=70"]) == 70
    scaled = ["+experiment=mlperf", "accelerator=unet3d_b200", "accelerator.what_if_samples=14"]
    assert capacity._images(scaled) == images(*scaled[1:]) == 14


def test_a_what_if_scale_of_zero_is_refused_by_its_own_name(refusal):
    """Before: ``accelerator.what_if_samples=0`` was refused as ``dataset.num_images=0 must be at least 1``,
    a key the user did not type, and the capacity search said "0 images give no accelerator two batches"."""
    from campaign.capacity import checks

    zero = ["+experiment=mlperf", "accelerator=unet3d_b200", "accelerator.what_if_samples=0"]
    assert refusal(*zero) == (
        "dataset.num_images=0 must be at least 1; accelerator.what_if_samples=0 must be at least 1"
    )
    assert checks.arguments(8, zero) == "accelerator.what_if_samples=0 must be at least 1"
    assert checks.arguments(8, [*zero[:2], "accelerator.what_if_samples=many"]) == (
        "accelerator.what_if_samples=many is not a whole number"
    )


@pytest.mark.waits  # a real SeaweedFS server: its GETs wait
def test_the_study_on_an_object_store_counts_its_gets_and_names_its_client(tmp_path_factory):
    """``+experiment=mlperf storage=s3``: the emulated B200s read the embedded server's objects through
    s3torchconnector (an approved client), every image one counted GET, the runs cold; the verdict has the
    same form, and no server or folder of it is left."""
    import csv

    base = tmp_path_factory.mktemp("mlperf-s3")
    root = on_disk(tmp_path_factory, "mlperf-s3-data")
    folder = base / "run"
    p = campaign(
        "+experiment=mlperf",
        "storage=s3",
        f"storage.root={root}",
        "dataset.num_images=96",
        "threads=2",
        f"hydra.run.dir={folder}",
        cwd=base,
    )
    try:
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        tail = [line for line in p.stdout.splitlines() if line.startswith("[mlperf] ")]
        assert tail[0].startswith("[mlperf] retinanet on B200: 1 accelerator at AU "), tail
        v = command.verdicts(folder)[0]
        assert (_state(v, "object client").figure, _state(v, "object client").state) == (
            "s3torchconnector",
            rules.CLOSED,
        )
        measured = list(csv.DictReader((folder / "results.csv").open()))  # the measured runs' rows
        assert len(measured) == 5 and all(r["cache_state"] == "cold" for r in measured)
        assert all(float(r["requests"]) == float(r["images"]) == 96 for r in measured)
        assert list((root / "iocampaign" / "s3servers").iterdir()) == []  # the server and its data are gone
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_runs_are_laid_out_as_mlperfs_results_tree(finished, tmp_path):
    """--results-dir: one folder per measured run under the verdict's division, each with DLIO's summary
    and per-epoch statistics of that run, the cell's resolved config, its log and the verdict; a second
    call adds nothing; a CLOSED-eligible cell goes under closed/."""
    import json

    out = tmp_path / "results"
    p = analysis("mlperf", str(finished[0]), "--results-dir", str(out), "--system", "ws-2core", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-2].startswith(f"[mlperf] results tree: 5 run folders in {out} (invalid)")
    rec = _record(finished)
    base = out / "invalid" / "iocampaign" / "results" / "ws-2core" / "training" / "retinanet" / "run"
    folders = sorted(base.iterdir())
    assert len(folders) == 5 and all(f.name.startswith(rec.runs[1]["started_at"][:4]) for f in folders)
    measured = [r for r in rec.runs if not r.get("warmup")]
    for folder, run in zip(folders, measured):
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["num_accelerators"] == 1 and summary["epochs"] == 1
        assert summary["metric"]["train_au_mean_percentage"] == run["train_au_percentage"]
        assert summary["metric"]["train_throughput_samples_per_second"] == [run["images_per_s"]]
        assert summary["metric"]["train_au_meet_expectation"] == (
            "success" if run["train_au_percentage"] >= 85 else "fail"
        )
        epoch = json.loads((folder / "per_epoch_stats.json").read_text())["1"]
        assert epoch["duration"] == run["run_wall_s"] and epoch["au"] == run["train_au_percentage"]
        assert "accelerator:" in (folder / "dlio_config" / "config.yaml").read_text()
        assert "+experiment=mlperf" in (folder / "dlio_config" / "overrides.yaml").read_text()
        prov = json.loads((folder / "provenance.json").read_text())
        assert prov["verdict"] == "INVALID" and len(prov["checks"]) == len(RULES)
        assert (folder / "__main__.log").is_file()
    system = out / "invalid" / "iocampaign" / "systems" / "ws-2core.json"  # MLPerf's system description
    described = json.loads(system.read_text())
    prov = rec.provenance
    assert [h["node_name"] for h in described["benchmark_hosts"]] == [prov["host"]]
    client = described["nodes"][0]
    assert client["CPU"]["vendor_and_model_name"] == prov["cpu_model"]
    topology = prov["cpu_topology"]  # /proc/cpuinfo's sockets, cores and threads
    assert topology["sockets"] >= 1 and topology["threads_per_socket"] >= topology["cores_per_socket"] >= 1
    assert (client["CPU"]["socket_count"], client["CPU"]["cores_per_socket"]) == (
        topology["sockets"],
        topology["cores_per_socket"],
    )
    assert client["DRAM"]["capacity_MiB"] == prov["mem_total_bytes"] // 2**20
    mount = prov["data_mount"]
    assert described["storage_system"]["solution_type"] == f"{mount['fs_type']} on {mount['source']}"
    assert described["storage_system"]["client_mount_options"] == [mount["options"]]
    assert described["storage_system"]["vendor_name"] is None  # what no record says is left to the submitter
    assert f"[mlperf] system description: {system} (" in p.stdout and "yours to fill in" in p.stdout
    filled = system.read_text().replace('"vendor_name": null', '"vendor_name": "ACME"')
    system.write_text(filled)  # the submitter's own, filled in: left as it is
    again = analysis(
        "mlperf", str(finished[0]), "--results-dir", str(out), "--system", "ws-2core", cwd=tmp_path
    )
    assert again.stdout.splitlines()[-2].endswith("0 run folders in " + f"{out} (nothing new)")
    assert system.read_text() == filled

    shm = Path(tempfile.mkdtemp(dir="/dev/shm"))  # the results apart from the data: every rule holds
    try:
        cell = shm / "cell"
        _judged(_passing(rec), cell)
        shutil.copytree(finished[0] / ".hydra", cell / ".hydra")
        closed = analysis(
            "mlperf", str(cell), "--results-dir", str(out), "--system", "ws-2core", cwd=tmp_path
        )
    finally:
        shutil.rmtree(shm)
    assert closed.returncode == 0, closed.stderr
    assert len(list((out / "closed").glob("iocampaign/results/ws-2core/training/retinanet/run/*"))) == 5
    assert (out / "closed" / "iocampaign" / "systems" / "ws-2core.json").is_file()
    # a link in the description's place, to a file of the user's: neither followed nor replaced
    mine = tmp_path / "mine.json"
    mine.write_text("the user's own\n")
    planted = out / "open" / "iocampaign" / "systems"
    planted.mkdir(parents=True)
    (planted / "ws-2core.json").symlink_to(mine)
    shm = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        opened = _passing(rec)
        opened = dataclasses.replace(opened, config={**opened.config, "framework": {"name": "tensorflow"}})
        _judged(opened, shm / "cell")
        shutil.copytree(finished[0] / ".hydra", shm / "cell" / ".hydra")
        p = analysis(
            "mlperf", str(shm / "cell"), "--results-dir", str(out), "--system", "ws-2core", cwd=tmp_path
        )
    finally:
        shutil.rmtree(shm)
    assert p.returncode == 0 and "(open)" in p.stdout, p.stdout + p.stderr
    assert "ws-2core.json (not readable as JSON)" in p.stdout
    assert (planted / "ws-2core.json").is_symlink() and mine.read_text() == "the user's own\n"


def test_a_results_tree_that_cannot_be_written_is_refused_in_one_line(finished, tmp_path, other_user):
    """A name that is not plain (the cell's workload too: a profile named ``../..``), a link for the folder
    or inside the tree, another user's folder for it or inside it, a record that lacks a figure: one line,
    exit 2, nothing written through a link or into another user's folder, and no half-written run folder
    left that looks like a result."""
    import json

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "invalid").symlink_to(elsewhere)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, other_user[1], other_user[2])
    inside = tmp_path / "inside"  # ours, a level of it another user's (made in a shared folder, say)
    (inside / "invalid").mkdir(parents=True)
    os.chown(inside / "invalid", other_user[1], other_user[2])
    escaping = tmp_path / "escaping"  # a record whose accelerator is named to climb out of the tree
    shutil.copytree(finished[0], escaping, symlinks=True)
    rec = json.loads((escaping / records.FILENAME).read_text())
    rec["config"]["accelerator"]["name"] = "../../../../../../escaped"
    (escaping / records.FILENAME).write_text(json.dumps(rec))
    lacking = tmp_path / "lacking"  # a record edited by hand: its fourth measured run lacks its MB/s
    shutil.copytree(finished[0], lacking, symlinks=True)
    rec = json.loads((lacking / records.FILENAME).read_text())
    del rec["runs"][4]["mb_per_s"]
    (lacking / records.FILENAME).write_text(json.dumps(rec))
    for cell, args, says in (
        (finished[0], ("--results-dir", str(tmp_path / "r"), "--org", "a/b"), "--org='a/b': a plain name"),
        (finished[0], ("--results-dir", str(link)), f"--results-dir={link}: not a folder"),
        (finished[0], ("--results-dir", str(planted)), f"{planted / 'invalid'}: not a folder of yours"),
        (finished[0], ("--results-dir", str(theirs)), f"--results-dir={theirs}: another user's folder"),
        (finished[0], ("--results-dir", str(inside)), f"{inside / 'invalid'}: another user's folder"),
        (
            escaping,
            ("--results-dir", str(tmp_path / "e")),
            "cell .: its workload='../../../../../../escaped'",
        ),
        (lacking, ("--results-dir", str(tmp_path / "l")), "cell .: its record lacks or garbles 'mb_per_s'"),
    ):
        p = analysis("mlperf", str(cell), *args, cwd=tmp_path)
        assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert list(elsewhere.iterdir()) == [] and list(theirs.iterdir()) == [] and not (tmp_path / "r").exists()
    assert list((inside / "invalid").iterdir()) == [] and not list(tmp_path.rglob("escaped"))
    runs = list((tmp_path / "l").rglob("run/*"))  # the three runs before the garbled one, each whole
    assert len(runs) == 3 and all((r / "provenance.json").is_file() for r in runs), runs


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory) -> Path:
    """A real sharded checkpoint cell, MLPerf's run at a reduced size: 2 ranks of llama3_8b shrunk to 4 M
    parameters, 2 checkpoints written, then read back cold."""
    base = tmp_path_factory.mktemp("mlperf-ckpt")
    root = on_disk(tmp_path_factory, "mlperf-ckpt-data")
    folder = base / "run"
    p = campaign(
        "workload=sharded_checkpoint",
        "checkpoint_model=llama3_8b",
        "checkpoint.model.parameters=4000000",
        "checkpoint.ranks_written=2",
        "platform.tasks_per_node=2",
        "checkpoint.num_checkpoints_write=2",
        "checkpoint.num_checkpoints_read=2",
        "storage=local",
        f"storage.root={root}",
        "repeats=1",
        "warmup=0",
        f"hydra.run.dir={folder}",
        cwd=base,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return folder


def _as_mlperfs(rec: records.CellRecord) -> records.CellRecord:
    """The real record with what a 2-core machine cannot hold set as MLPerf's 8B run has it: 8 of 8 ranks,
    a 112 GB checkpoint, 10 written and 10 read."""
    out = copy.deepcopy(rec)
    for run in out.runs:
        run.update(ranks_written=8, model_ranks=8, model_checkpoint_gb=112.42)
        run.update(checkpoints_written=10, checkpoints_read=10)
    return out


def test_a_checkpointing_cell_is_judged_by_mlperfs_checkpointing_rules(checkpointed, tmp_path):
    """The reduced run: every rule beside its figure, and the verdict names what a what-if changed (the
    model's size, the subset of ranks, the checkpoints' count); set as MLPerf's run has them, on another
    file system than the data, every rule holds; each rule then fails alone where its figure passes it."""
    from analysis.mlperf import checkpointing

    p = analysis("mlperf", str(checkpointed), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "MLPerf Storage v3.0 checkpointing rules" in p.stdout
    line = p.stdout.splitlines()[-1]
    assert line.startswith("[mlperf] llama3-8b checkpointing on 2 processes: save "), line
    for why in (
        "not llama3-8b's 105 GiB",
        "2 processes wrote, not 8 (subset mode is allowed for 8B at 8 processes only)",
        "checkpoints written: 2 a run, not 10",
    ):
        assert why in line, line
    assert "  CLOSED   page cache" in p.stdout and "  CLOSED   read gap" in p.stdout

    rec = _as_mlperfs(records.read(checkpointed / records.FILENAME))
    shm = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        v = checkpointing.check(".", rec, records.write(rec, shm))
        assert v.state == rules.CLOSED, [c for c in v.checks if c.state != rules.CLOSED]
        for change, rule, why in (
            (lambda r: r.runs[0].update(read_gap_s=31.0), "read gap", "the reads started 31 s after"),
            (lambda r: r.runs[0]["shard_ranks"][0].update(cache_cleared=False), "page cache", "not cleared"),
            (lambda r: r.runs[0].update(ranks_written=4), "processes", "4 processes wrote, not 8"),
            (lambda r: r.runs[0].update(checkpoints_read=9), "checkpoints read", "9 a run, not 10"),
        ):
            bad = copy.deepcopy(rec)
            change(bad)
            failed = [
                c
                for c in checkpointing.check(".", bad, records.write(bad, shm)).checks
                if c.state != "CLOSED"
            ]
            assert [c.rule for c in failed] == [rule] and why in failed[0].why, failed
    finally:
        shutil.rmtree(shm)


def test_a_checkpointing_cells_runs_are_laid_out_as_mlperfs_checkpointing_results(checkpointed, tmp_path):
    """--results-dir on a checkpointing cell: its run under checkpointing/<MLPerf's model>/<timestamp>/,
    with DLIO's checkpointing summary (the checkpoint's GiB, each operation's mean and deviation of
    duration and rate) and the per-epoch saves and loads, figured from the record's own durations."""
    import json
    import statistics

    out = tmp_path / "results"
    p = analysis("mlperf", str(checkpointed), "--results-dir", str(out), "--system", "ws", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-2].startswith(f"[mlperf] results tree: 1 run folder in {out} (invalid)")
    (folder,) = (out / "invalid" / "iocampaign" / "results" / "ws" / "checkpointing" / "llama3-8b").iterdir()
    run = records.read(checkpointed / records.FILENAME).runs[-1]
    summary = json.loads((folder / "summary.json").read_text())
    gib = run["checkpoint_gb"] * 1e9 / 2**30
    saves, loads = run["save_each_duration_s"], run["load_each_duration_s"]
    assert len(saves) == len(loads) == 2 and summary["num_accelerators"] == 2
    m = summary["metric"]
    assert m["checkpoint_size_GB"] == pytest.approx(gib)
    assert m["save_checkpoint_duration_mean_seconds"] == pytest.approx(statistics.fmean(saves))
    assert m["load_checkpoint_io_mean_GB_per_second"] == pytest.approx(
        statistics.fmean(gib / d for d in loads)
    )
    assert m["save_checkpoint_io_stdev_GB_per_second"] >= 0
    assert (summary["num_checkpoints_write"], summary["num_checkpoints_read"]) == (2, 2)
    epoch = json.loads((folder / "per_epoch_stats.json").read_text())["1"]
    assert [k for k in epoch if "ckpt" in k] == ["save_ckpt1", "save_ckpt2", "load_ckpt1", "load_ckpt2"]
    assert epoch["load_ckpt2"]["duration"] == loads[1]
    prov = json.loads((folder / "provenance.json").read_text())
    assert prov["verdict"] == "INVALID" and prov["runs_median_samples_per_second"] is None
    assert "checkpoint_model=llama3_8b" in (folder / "dlio_config" / "overrides.yaml").read_text()
