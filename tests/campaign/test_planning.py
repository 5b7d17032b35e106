"""Planning: a planned cell equals Hydra's full composition of it, at a fraction of the cost."""

import pytest
from hydra import compose, initialize_config_dir

from campaign import errors, planning, schema
from jobs import plan
from support.paths import CONF

CELLS = [
    [],
    ["threads=4", "batch_size=32"],
    ["threads=autotune", "cache=warm", "workload.read_delay_ms=3", "seed=7"],
    ["workload=alexnet_small", "threads=2", "prefetch=1", "workload.steps=null", "workload.width=0.5"],
    [
        "workload=checkpoint",
        "checkpoint.target=burst_buffer",
        "checkpoint.mode=async",
        "storage@checkpoint.fast=local",
    ],
    ["workload=baseline", "workload.small_file_threads=[1,4]", "storage=tmpfs", "workload.file_gb=1"],
    [
        "storage=ssd",
        "storage.root=/mnt/ssd",
        "dataset=caltech101",
        "dataset.num_images=99",
        "platform=slurm",
        "platform.timeout_min=30",
        "platform.setup=[module load x]",
    ],
    # a value an interpolation reads (dataset.median_kb: ${oc.select:accelerator.sample_kb,112}): in full
    ["workload=emulated", "accelerator=resnet50_a100", "accelerator.sample_kb=50"],
    ["framework=pytorch", "loader={num_workers:2}", "threads=2"],  # a dict, merged by Hydra: in full
    ["+extra=1"],  # Hydra's own semantics: composed in full
]


@pytest.fixture(scope="module")
def composer():
    schema.register()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield lambda ov: compose("config", overrides=list(ov))


@pytest.mark.parametrize("overrides", CELLS, ids=lambda c: " ".join(c) or "defaults")
def test_a_planned_cell_is_the_full_composition(composer, overrides):
    planner = planning.Planner(composer)
    if overrides == ["+extra=1"]:
        cell = planner.cell(overrides)
        assert cell.data["extra"] == 1
        return
    full = plan.resolved(composer(overrides))
    cell = planner.cell(overrides)
    assert cell.data == full
    assert cell.cell_id == plan.cell_id(full)


def test_cells_sharing_group_choices_are_composed_once(composer):
    planner = planning.Planner(composer)
    ids = {
        planner.cell([f"threads={t}", f"batch_size={b}"]).cell_id for t in range(1, 5) for b in (8, 16, 32)
    }
    ids |= {planner.cell(["storage=tmpfs", f"threads={t}"]).cell_id for t in range(1, 5)}
    assert len(ids) == 16 and planner.compositions == 2


@pytest.mark.parametrize(
    "command, compositions",
    [
        (["storage=tmpfs", "threads=1,2,4", "dataset.num_images=64", "cache=cold,warm"], 0),
        (["threads=1,2", "workload=alexnet_small", "workload.steps=3"], 0),
        (["storage=local,tmpfs", "threads=1,2"], 2),  # a group swept: the primary holds no cell's choice
        (["+extra=1", "threads=1,2"], 0),  # composed in full, cell by cell
        # the swept value is read by an interpolation: its cells composed in full, the primary adopted
        (["workload=emulated", "accelerator=resnet50_a100", "accelerator.sample_kb=50,60", "threads=1"], 0),
    ],
)
def test_the_primary_config_is_the_composition_of_the_cells_with_the_command_lines_choices(
    composer, command, compositions
):
    """Hydra's own composition of a multirun's command line (its sweeps left out) is adopted as the cells'
    composition where their group choices are the command line's: each cell still equals its full
    composition, and the caller's config is left as it was."""
    from campaign import sweep

    primary = composer([o for o in command if "," not in o])
    before = plan.resolved(primary)
    planner = planning.Planner(composer)
    planner.adopt(command, primary)
    for overrides in sweep.expand(command):
        full = plan.resolved(composer(overrides))
        cell = planner.cell(overrides)
        assert cell.data == full and cell.cell_id == plan.cell_id(full)
    assert planner.compositions == compositions
    assert plan.resolved(primary) == before


def test_the_keys_interpolations_read_are_found_in_every_form_and_an_unknown_read_reads_anything():
    from omegaconf import OmegaConf

    def reads(**data):
        return planning.interpolated_keys(OmegaConf.create({"a": {"x": 1}, "d": data}))

    forms = ["${a.x}", "${ a.x }", "pre_${a.x}_post", "${oc.select:a.x,1}", "${oc.select: 'a.x', 1}"]
    for form in forms:
        assert reads(m=form) == {"a.x"}, form
    assert reads(m="${oc.env:HOME}", n="${now:%H}", k=3) == set()
    for form in ("${oc.select:${d.p},1}", "${.k}", "${oc.dict.keys:a}"):
        assert planning.ANY in reads(m=form, p="a.x"), form
    assert planning._overlaps("threads", planning.ANY) and not planning._overlaps("threads", "a.x")


def test_cells_of_one_composition_share_only_the_sections_no_value_changed(composer):
    """Planning copies the sections a cell's values reach and shares the rest; no cell's values, and no
    id's hashing, reach another cell's data or the composition's."""
    planner = planning.Planner(composer)
    a = planner.cell(["threads=2", "dataset.num_images=64"])
    b = planner.cell(["threads=4", "dataset.num_images=128"])
    c = planner.cell(["threads=8"])
    assert (a.data["threads"], b.data["threads"], c.data["threads"]) == (2, 4, 8)
    assert (a.data["dataset"]["num_images"], b.data["dataset"]["num_images"]) == (64, 128)
    assert a.data["dataset"] is not b.data["dataset"] is not c.data["dataset"]
    assert a.data["storage"] is b.data["storage"]  # no value of theirs is under storage
    base = plan.resolved(composer([]))
    assert c.data["dataset"] == base["dataset"] and c.data["storage"] == base["storage"]
    for cell in (a, b, c):
        assert (
            plan.cell_id(cell.data)
            == cell.cell_id
            == plan.cell_id(plan.resolved(composer(list(cell.overrides))))
        )
    assert c.data == plan.resolved(composer(["threads=8"]))  # hashing a and b's ids edited nothing shared


def test_values_set_inside_a_section_are_set_once_for_the_cells_that_share_them(composer):
    """A grid's cells that set the same values inside a section (``dataset.num_images=64``) share that
    section, typed and plain, so it is checked and hashed once; each still equals its full composition."""
    planner = planning.Planner(composer)
    cells = [planner.cell([f"threads={t}", "dataset.num_images=64", "cache=warm"]) for t in (1, 2)]
    other = planner.cell(["threads=1", "dataset.num_images=128", "cache=warm"])
    assert cells[0].config.dataset is cells[1].config.dataset is not other.config.dataset
    assert cells[0].data["dataset"] is cells[1].data["dataset"] is not other.data["dataset"]
    for cell in (*cells, other):
        full = plan.resolved(composer(list(cell.overrides)))
        assert cell.data == full and cell.cell_id == plan.cell_id(full)


def test_a_section_set_whole_and_inside_is_set_in_the_order_given(composer):
    planner = planning.Planner(composer)
    overrides = ["workload.small_file_threads=[2]", "workload=baseline", "workload.file_gb=1"]
    cell = planner.cell(overrides)
    assert cell.data == plan.resolved(composer(overrides))


SWEEP = [
    "threads=range(1,4)",
    "batch_size=8,16",
    "cache=cold,warm",
    "workload.read_delay_ms=0.5,2",
    "dataset.name='null',x",
    "shuffle=none",
    "storage=glob(tmp*)",
    "platform.setup=[a,b]",
    "+extra=true,False",
]


def test_the_kinds_a_planner_learns_from_a_sweep_are_hydras_parse_of_each_cells_override(composer):
    """The cells' overrides are not parsed again: what the planner takes from the sweep's own parse equals
    Hydra's parse of every override string the basic sweeper writes for a cell."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from campaign import sweep

    learned = planning.Planner(composer)
    learned.learn(OverridesParser.create().parse_overrides(overrides=SWEEP))
    raws = {raw for cell in sweep.expand([o for o in SWEEP if "glob" not in o]) for raw in cell}
    assert set(learned._parsed) <= raws and len(learned._parsed) >= 14
    parser = OverridesParser.create()
    for raw, kind in learned._parsed.items():
        expected = planning._kind(raw, parser.parse_overrides([raw])[0])
        assert kind == expected and type(kind[2]) is type(expected[2]), raw


@pytest.mark.parametrize(
    "override,expected",
    [
        ("batch_size=many", "batch_size=many"),
        ("nosuchkey=1", "nosuchkey=1"),
        ("checkpoint.mode=later", "checkpoint.mode=later"),
    ],
)
def test_a_bad_value_names_the_override(composer, override, expected):
    with pytest.raises(errors.ConfigError, match=expected):
        planning.Planner(composer).cell([override])


@pytest.mark.parametrize("overrides", CELLS[:-1], ids=lambda c: " ".join(c) or "defaults")
def test_a_planned_cell_is_typed_and_read_only(composer, overrides):
    """The one runtime form: the schema's dataclasses (a workload's own), every choice a StrEnum equal to
    its name, sealed once planned; the plain data beside it is what the record keeps."""
    import dataclasses

    from jobs import workloads
    from jobs.cell import Cell

    cell = planning.Planner(composer).cell(overrides)
    cfg = cell.config
    assert type(cfg.workload) is workloads.get(cell.data["workload"]["kind"]).schema
    assert cfg.cache == cell.data["cache"] and str(cfg.shuffle) == cell.data["shuffle"]
    assert cfg.storage.root == cell.data["storage"]["root"] and cfg.threads == cell.data["threads"]
    for section, name in ((cfg, "threads"), (cfg.storage, "root"), (cfg.workload, "name"), (cell, "cell_id")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(section, name, getattr(section, name))
    again = Cell.from_data(cell.data, cell.overrides, cell.num, cell.cell_id)
    assert again.config == cfg and again.data == cell.data  # what a task process or a Slurm job rebuilds


def test_a_planned_cell_runs_with_its_planned_data_and_the_sweeps_hydra_node(composer):
    """Launch composes nothing: the job's config is the cell's planned data beside the sweep's Hydra node,
    with the cell's number, overrides and override_dirname as Hydra's launcher would set them."""
    import dataclasses

    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from campaign.cell import job_config

    master = compose("config", overrides=[], return_hydra_config=True)
    cell = dataclasses.replace(planning.Planner(composer).cell(["threads=4", "batch_size=32"]), num=7)
    cfg = job_config(master, cell, job_id=7)
    HydraConfig.instance().set_config(cfg)  # what Hydra's run_job needs: a typed Hydra node
    task = OmegaConf.to_container(cfg, resolve=False)
    assert {k: v for k, v in task.items() if k != "hydra"} == cell.data
    assert list(cfg.hydra.overrides.task) == ["threads=4", "batch_size=32"] and cfg.hydra.job.num == 7
    assert cfg.hydra.job.override_dirname == "batch_size=32,threads=4"


@pytest.mark.parametrize("overrides", [[], ["workload=emulated", "accelerator=alexnet_h100"]])
def test_settings_added_since_keep_a_cells_id_at_their_defaults(composer, overrides):
    """A cell planned before ``dataset.samples`` and the profiles' sample sizes existed (its record holds
    none of them) has the id the same cell has today: a resumed campaign finds it done."""
    import copy

    today = plan.resolved(composer(overrides))
    before = copy.deepcopy(today)
    del before["dataset"]["samples"]
    if before.get("accelerator"):
        for key in ("samples", "sample_kb", "sample_spread"):
            del before["accelerator"][key]
    assert plan.cell_id(before) == plan.cell_id(today)
