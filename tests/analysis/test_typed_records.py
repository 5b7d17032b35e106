"""One loader for every record (issue 60, item 6): ``jobs.cell.recorded`` reads the config a record keeps,
whichever version wrote it, into the schema's dataclasses, and the analysis reads the typed config instead
of falling back by hand; ``jobs.records.read`` fills the runs' and provenance's fields added since, so the
analysis keeps no fallback for them; a value this version cannot type makes the record unreadable, in one
line naming the setting."""

import dataclasses
from enum import StrEnum

import pytest
from omegaconf import OmegaConf

from analysis.tables import tidy
from jobs import cell, records
from jobs.schema import CampaignConf, DatasetConf, FrameworkConf, RecordedWorkload, StorageConf
from support.configs import compose_cell


def _record(config: dict, status: str = records.COMPLETED, cell_id: str = "c0") -> records.CellRecord:
    return records.CellRecord(cell_id, status, config, [], [], {}, {}, "", "")


def _config(*overrides: str) -> dict:
    return OmegaConf.to_container(compose_cell(list(overrides)), resolve=True)


def test_a_records_config_is_the_planned_cells_typed_config_and_the_workloads_own_settings_as_written():
    data = _config("framework=pytorch", "threads=2", "storage=tmpfs", "dataset.num_images=64")
    planned = cell.Cell.from_data(data).config
    read = cell.recorded(_record(data))
    assert isinstance(read, CampaignConf)
    for section in ("storage", "dataset", "platform", "framework", "loader", "checkpoint", "input", "trace"):
        assert getattr(read, section) == getattr(planned, section), section
    assert isinstance(read.storage, StorageConf) and isinstance(read.dataset, DatasetConf)
    assert isinstance(read.cache, StrEnum) and read.cache == planned.cache
    assert isinstance(read.workload, RecordedWorkload)
    assert (read.workload.name, read.workload.kind) == (planned.workload.name, planned.workload.kind)
    assert read.workload.own["image_side"] == planned.workload.image_side  # the workload's own, as written
    try:
        read.framework.name = "jax"
        raise AssertionError("a record's config was changed")
    except dataclasses.FrozenInstanceError:
        pass


def test_a_record_written_before_a_setting_reads_as_what_the_cell_did():
    """The settings added since the first records (the framework axis, the loader, where batches wait, the
    shuffle, the tf.data service, replay, the workload's module) read as the cell ran: the schema's
    default, or ``WRITTEN_BEFORE``'s where the schema has none."""
    old = _config("threads=2")
    for name in ("framework", "loader", "prefetch_to", "shuffle", "shuffle_buffer", "input", "replay"):
        del old[name]
    del old["workload"]["kind"]
    read = cell.recorded(_record(old))
    assert read.framework == FrameworkConf() and read.framework.name == "tensorflow"
    assert (read.prefetch_to, read.shuffle, read.input.service, read.replay.trace) == (
        "host",
        "global",
        False,
        None,
    )
    assert read.workload.kind == "microbench"
    values = tidy._cell_values(read)
    assert (values["framework"], values["kind"], values["shuffle"], values["prefetch_to"]) == (
        "tensorflow",
        "microbench",
        "global",
        "host",
    )
    assert (values["service"], values["replay_trace"], values["loader_workers"]) == (0, "", None)


def test_a_value_this_version_cannot_type_makes_the_record_unreadable_in_one_line_naming_it(tmp_path):
    good = _config("threads=2")
    bad = {**good, "storage": {**good["storage"], "reader": "teleport"}}
    for folder, config, cell_id in (("0", good, "good"), ("1", bad, "bad")):
        (tmp_path / folder).mkdir()
        records.write(_record(config, records.COMPLETED, cell_id), tmp_path / folder)
    (tmp_path / "2").mkdir()  # a failed cell is listed with its error, whatever its config holds
    records.write(_record({}, records.FAILED, "empty"), tmp_path / "2")
    try:
        cell.recorded(_record(bad, cell_id="bad"))
        raise AssertionError("a value of no choice was read")
    except records.RecordError as e:
        assert (
            str(e) == "the record of cell bad holds storage.reader='teleport', which this version cannot read"
        )
    c = tidy.collect(tmp_path)
    assert len(c.unreadable) == 1 and "storage.reader='teleport'" in c.unreadable[0]
    assert c.unreadable[0].startswith(f"{tmp_path / '1' / 'record.json'}: the record of cell bad holds ")
    assert [(cell["cell_dir"], cell["status"]) for cell in c.cells] == [
        ("0", records.COMPLETED),
        ("2", records.FAILED),
    ]
    try:
        cell.recorded(_record({}, records.FAILED, "empty"))
        raise AssertionError("a record without a config was read")
    except records.RecordError as e:
        assert str(e) == "the record of cell empty holds no workload and no storage and no platform section"


def test_a_record_of_every_version_reads_in_todays_shape_and_keeps_what_it_holds(tmp_path):
    """The fields added to runs and provenance since the first records are filled by the loader, once, as
    the tool then had them (the analysis keeps no fallback of its own): a run's steady runtime, the emulated
    tier's blkio throttle, the accelerator TensorFlow described; a value the record holds is kept."""
    import json

    from jobs.observe import accelerator

    run = {"run": 1, "warmup": False, "cache_state": "cold", "runtime_s": 10.0, "first_step_s": 2.5}
    kept = {**run, "run": 2, "steady_runtime_s": 7.0}
    old = {
        **dataclasses.asdict(_record(_config("threads=2"))),
        "schema_version": 1,
        "runs": [run, kept],
        "provenance": {
            "emulated_tier": {"name": "emulated_ssd", "read_bps": 1},
            "accelerator": {"gpus": [], "tensorflow_gpus": [], "cuda_build_enabled": False},
        },
    }
    del old["declared"]  # version 1 kept none
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / records.FILENAME).write_text(json.dumps(old))
    rec = records.read(tmp_path / "c" / records.FILENAME)
    assert [r["steady_runtime_s"] for r in rec.runs] == [7.5, 7.0]
    assert rec.provenance["emulated_tier"]["throttle"] == "blkio-v1"
    assert rec.provenance["accelerator"]["framework"] == "TensorFlow"
    said = accelerator.summary(rec.provenance["accelerator"])
    assert said == "none (TensorFlow sees 0 GPU); TensorFlow built without CUDA", said
    rows = tidy.collect(tmp_path).rows
    assert [(r["steady_runtime_s"], r["throttle"]) for r in rows] == [(7.5, "blkio-v1"), (7.0, "blkio-v1")]
    # what today's tool writes is read as written
    today = {**old, "schema_version": records.SCHEMA_VERSION, "declared": None, "runs": [kept]}
    today["provenance"] = {"emulated_tier": {"name": "x", "throttle": "io.max-v2"}}
    (tmp_path / "c" / records.FILENAME).write_text(json.dumps(today))
    again = records.read(tmp_path / "c" / records.FILENAME)
    assert again.runs == [kept] and again.provenance == today["provenance"]


def test_a_records_runs_read_typed_with_their_defaults_written_once_and_warm_ups_apart(tmp_path):
    """``records.runs_of``: the measured runs (warm-ups on request), each with what every run has typed and
    the labels some workloads add read as "" where a run has none or null (one place, not a fallback in each
    reader), and the run as recorded readable, not writable, by name."""
    import json

    warm = {"run": 0, "warmup": True, "cache_state": "cold", "images_per_s": 1.0, "trace_device": "warm"}
    ckpt = {"step": 3, "tier": "local", "bytes": 4_000_000}
    first = {
        "run": 1,
        "warmup": False,
        "cache_state": "cold",
        "images_per_s": 2.0,
        "fallback": None,  # the checkpoint workload writes null where its target held
        "effective_target": "local",
        "checkpoints": [ckpt],
        "trace_file": "trace_r1.csv",
        "trace_device": "sda",
    }
    second = {"run": 2, "warmup": False, "cache_state": "cold", "images_per_s": 3.0}  # no labels at all
    rec = records.CellRecord(
        "c0", records.COMPLETED, _config("threads=2"), [], [warm, first, second], {}, {}, "", ""
    )
    runs = records.runs_of(rec)
    assert [(r.run, r.warmup, r.cache_state) for r in runs] == [(1, False, "cold"), (2, False, "cold")]
    assert [r.run for r in records.runs_of(rec, warmups=True)] == [0, 1, 2]
    one, two = runs
    assert (one.fallback, one.effective_target, one.trace_file, one.checkpoints) == (
        "",
        "local",
        "trace_r1.csv",
        (ckpt,),
    )
    assert (two.device, two.fallback, two.effective_target, two.trace_file, two.steps_file) == ("",) * 5
    assert two.checkpoints == () and two["images_per_s"] == 3.0 and two.get("posix_calls") is None
    assert dict(one) == first and "checkpoints" in one and "checkpoints" not in two
    try:
        one.recorded["images_per_s"] = 9.0
        raise AssertionError("a run read from its record was changed")
    except TypeError:
        pass
    # the tables take the typed run: its labels and its checkpoints; a warm-up is no row
    (tmp_path / "0").mkdir()
    records.write(rec, tmp_path / "0")
    c = tidy.collect(tmp_path)
    assert [(r["run"], r["images_per_s"], r["checkpoint_fallback"], r["trace_file"]) for r in c.rows] == [
        (1, 2.0, "", "0/trace_r1.csv"),
        (2, 3.0, "", ""),
    ]
    assert [(k["run"], k["step"], k["fallback"]) for k in c.checkpoints] == [(1, 3, "")]
    # Fig. 9's label reads the device of the measured run by its number, not by its place after the warm-ups
    from analysis.figures import checkpoints

    assert checkpoints._trace_device(tmp_path, {"record": "0/record.json", "run": 1}) == "sda"
    assert json.loads((tmp_path / "0" / records.FILENAME).read_text())["runs"][1] == first
    # a run edited by hand into what no run is: the record is unreadable, in one line naming the run
    edited = json.loads((tmp_path / "0" / records.FILENAME).read_text())
    edited["runs"][2]["run"] = "two"
    (tmp_path / "0" / records.FILENAME).write_text(json.dumps(edited))
    c = tidy.collect(tmp_path)
    assert c.rows == [] and c.unreadable == [
        f"{tmp_path / '0' / records.FILENAME}: run 3 of 3 does not match schema {records.SCHEMA_VERSION} "
        "(a run needs a whole number run, a true or false warmup and a cache_state)"
    ]


def test_a_records_provenance_and_dataset_read_typed_with_their_defaults_written_once():
    """``records.provenance_of`` and ``records.dataset_of``: what the analysis reads typed (the machine, the
    versions, the store the runs read through, the mount, the dataset's size and form), None, 0 or empty
    where an old or partial record keeps nothing, and the whole as recorded readable by name, not writable."""
    prov = {
        "host": "n1",
        "cpu_model": "EPYC",
        "mem_total_bytes": 8 * 2**30,
        "versions": {"tensorflow": "2.21.0", "torch": None},
        "object_store": {"service": "s3", "client": "boto3"},
        "data_mount": {"fs_type": "ext4", "dev": "8:1"},
        "storage_mount": {"fs_type": "tmpfs"},
        "device_lock_wait_s": 1.5,
    }
    dataset = {"files": 64, "total_bytes": 6_400_000, "format": "tfrecord", "stage": {"storage": "local"}}
    rec = records.CellRecord("c0", records.COMPLETED, {}, [], [], dataset, prov, "", "")
    p, ds = records.provenance_of(rec), records.dataset_of(rec)
    assert (p.host, p.cpu_model, p.mem_total_bytes, p.device_lock_wait_s) == ("n1", "EPYC", 8 * 2**30, 1.5)
    assert dict(p.versions) == prov["versions"] and p.object_store["client"] == "boto3"
    # the data's, then the root's
    assert p.read_mount["fs_type"] == "ext4" and p.storage_mount["fs_type"] == "tmpfs"
    assert (p.kernel, p.git_commit, p.accelerator, p.emulated_tier, p.memory_limit_bytes) == (None,) * 5
    assert p["versions"] is prov["versions"] and dict(p) == prov
    assert (ds.files, ds.total_bytes, ds.format, ds.stage) == (
        64,
        6_400_000,
        "tfrecord",
        {"storage": "local"},
    )
    # a record that keeps none of them (a failed cell's, or one written before they were kept)
    bare = records.CellRecord("c1", records.FAILED, {}, [], [], {}, {}, "", "")
    p, ds = records.provenance_of(bare), records.dataset_of(bare)
    assert (p.host, p.mem_total_bytes, dict(p.versions), p.object_store, dict(p.read_mount)) == (
        None,
        0,
        {},
        None,
        {},
    )
    assert (ds.files, ds.total_bytes, ds.format, ds.stage) == (0, 0, "files", None)
    for part, key in ((p, "host"), (ds, "files")):
        try:
            part.recorded[key] = "x"
            raise AssertionError(f"{key} of a record read typed was changed")
        except TypeError:
            pass


def test_a_provenance_or_dataset_field_edited_into_another_type_is_one_line_naming_it(tmp_path):
    """Before: ``provenance.versions: "5"`` ended ``python -m analysis`` in a traceback (``AttributeError``:
    ``.items()`` of a string, in the report's machine section); now the record is listed as unreadable."""
    good = _record(_config("threads=2"))
    for n, (section, key, value, said) in enumerate(
        (
            ("provenance", "versions", "5", "provenance.versions holds a string, not an object"),
            (
                "provenance",
                "mem_total_bytes",
                True,
                "provenance.mem_total_bytes holds true or false, not a whole number",
            ),
            ("dataset", "files", "many", "dataset.files holds a string, not a whole number"),
        )
    ):
        rec = dataclasses.replace(good, **{section: {**getattr(good, section), key: value}})
        (tmp_path / str(n)).mkdir()
        path = records.write(rec, tmp_path / str(n))
        try:
            records.read(path)
            raise AssertionError(f"{section}.{key}={value!r} was read")
        except records.RecordError as e:
            assert str(e) == f"{path}: {said}, which schema {records.SCHEMA_VERSION} does not allow"
    assert len(tidy.collect(tmp_path).unreadable) == 3


def _completed_with_runs() -> dict:
    run = {"run": 1, "warmup": False, "cache_state": "cold", "images_per_s": 2.0, "checkpoints": []}
    rec = dataclasses.asdict(_record(_config("threads=2")))
    return {**rec, "runs": [{**run, "run": 0, "warmup": True}, run, {**run, "run": 2}]}


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda r: r.update(dataset=[1]), "record fields do not match schema 2 (wrong types)"),
        (lambda r: r.update(error="boom"), "record fields do not match schema 2 (wrong types)"),
        (lambda r: r.update(error={"type": 5}), "record fields do not match schema 2 (wrong types)"),
        (lambda r: r["runs"][1].update(checkpoints="x"), "run 1's checkpoints holds a string, not a list"),
        (
            lambda r: r["runs"][1].update(checkpoints=[1]),
            "run 1's checkpoints hold something other than objects",
        ),
        (
            lambda r: r["runs"][2].update(trace_file=5),
            "run 2's trace_file holds a whole number, not a string",
        ),
        (
            lambda r: r["runs"][1].update(images_per_s="fast"),
            "run 1's images_per_s holds a string, not a number",
        ),
        (
            lambda r: r["runs"][1].update(images_per_s=10**400),
            "run 1's images_per_s holds a number beyond 64 bits",
        ),
        (lambda r: r["runs"][2].update(run=1), "runs numbered [1] twice"),
        (lambda r: r["runs"][2].update(run=-7), "a measured run numbered -7"),
        (
            lambda r: r["provenance"].update(mem_total_bytes=10**400),
            "provenance.mem_total_bytes holds a number beyond 64 bits",
        ),
        (lambda r: r["dataset"].update(files=-3), "dataset.files holds -3, not a count"),
        (lambda r: r["dataset"].update(files=64.7), "dataset.files holds a number, not a whole number"),
        # the file's own text: a list nested 100,000 deep
        (lambda r: "[" * 100_000 + "]" * 100_000, "not a readable record (nested too deep to parse)"),
    ],
)
def test_a_record_edited_into_what_its_readers_cannot_take_is_one_line_not_a_traceback(tmp_path, edit, said):
    """Red team, 2026-11-30: each of these ended ``python -m analysis`` (or its MLPerf verdict, or
    ``campaign.status``) in a traceback (``TypeError``, ``KeyError``, ``AttributeError``, ``OverflowError``,
    ``RecursionError``), or put a run numbered -7, or two runs numbered 1, in results.csv."""
    import json

    raw = _completed_with_runs()
    (tmp_path / "0").mkdir()
    path = tmp_path / "0" / records.FILENAME
    path.write_text(json.dumps(raw))
    assert len(tidy.collect(tmp_path).rows) == 2  # unedited: read, its two measured runs
    text = edit(raw)
    path.write_text(text if isinstance(text, str) else json.dumps(raw))
    c = tidy.collect(tmp_path)
    assert c.rows == [] and len(c.unreadable) == 1 and said in c.unreadable[0], c.unreadable
    assert c.unreadable[0].startswith(f"{path}: ")
