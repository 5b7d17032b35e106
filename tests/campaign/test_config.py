"""Config composition with Hydra's compose API, presets, and the sweep expansion we rely on."""

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from campaign import choices, limits, schema, sweep, validate
from jobs.cell import Cell
from support.paths import CONF

schema.register()


def _compose(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=True)


def test_defaults_are_the_papers():
    cfg = _compose()
    assert cfg.workload.name == "microbench" and cfg.workload.pipeline.value == "decode_resize"
    assert (
        cfg.dataset.name == "imagenet_subset"
        and cfg.dataset.num_images == 16384
        and cfg.dataset.median_kb == 112
    )
    assert (cfg.batch_size, cfg.prefetch, cfg.repeats, cfg.warmup, cfg.cache.value) == (64, 0, 5, 1, "cold")
    assert cfg.storage.name == "local" and cfg.platform.name == "workstation"


@pytest.mark.parametrize("group", choices.GROUPS)
def test_every_preset_composes(group):
    for name in choices.presets(group):
        if group == "experiment":
            cfg = _compose(f"+experiment={name}")
            if name == "paper":  # several grids: campaign/paper.py runs them; the preset only names it
                assert cfg.workload.name == "microbench"
            elif name == "mlperf":  # MLPerf Storage's training run: emulated accelerators, PyTorch's loader
                assert (cfg.workload.kind, cfg.framework.name, cfg.repeats, cfg.warmup) == (
                    "emulated",
                    "pytorch",
                    5,
                    1,
                )
                assert cfg.batch_size == cfg.accelerator.batch_size
            else:
                assert cfg.workload.kind == "alexnet" and cfg.hydra.mode.name == "MULTIRUN"
            continue
        cfg = _compose(f"{group}={name}")
        # its package: checkpoint.model
        node = cfg.checkpoint.model if group == "checkpoint_model" else cfg[group]
        assert name.startswith(node.name)  # alexnet_small is AlexNet at another scale


def test_a_platform_preset_writes_only_what_differs_from_the_schema():
    """Each default is written once, in PlatformConf: a site preset (conf/platform/) says only what its
    site changes, so a default changed in the schema reaches every preset that did not choose otherwise."""
    import yaml

    from jobs.schema import PlatformConf

    defaults = OmegaConf.to_container(OmegaConf.structured(PlatformConf), enum_to_str=True)
    for path in sorted((CONF / "platform").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        restated = [k for k, v in body.items() if k != "defaults" and k in defaults and v == defaults[k]]
        assert not restated, f"{path.name} restates the schema's defaults of {restated}"


def test_each_workload_gets_the_papers_dataset_unless_told():
    assert _compose("workload=readonly").dataset.name == "imagenet_subset"
    assert _compose("workload=alexnet").dataset.name == "caltech101"
    assert _compose("workload=alexnet_small").dataset.name == "caltech101"
    assert _compose("workload=alexnet", "dataset=imagenet_subset").dataset.name == "imagenet_subset"
    assert "default_for_alexnet" not in choices.presets("dataset")


def test_an_emulated_accelerators_set_is_generated_at_its_workloads_sample_size():
    """workload=emulated reads synthetic samples of the profile's workload's size (MLPerf Storage's record
    length, as ``python -m analysis mlperf`` checks it), ImageNet-like where the profile gives none; a
    dataset the user names keeps its own sizes."""
    import yaml

    profiles = yaml.safe_load((CONF.parent / "analysis" / "mlperf" / "training.yaml").read_text())["profiles"]
    sized = 0
    for name in choices.presets("accelerator"):
        cfg = _compose("workload=emulated", f"accelerator={name}")
        ds, acc = (OmegaConf.to_container(cfg[k], resolve=True) for k in ("dataset", "accelerator"))
        assert (ds["median_kb"], ds["size_spread"]) == (acc["sample_kb"], acc["sample_spread"]), name
        assert ds["samples"] == acc["samples"] == ("arrays" if name.startswith("unet3d") else "images"), name
        if (acc["sample_kb"], acc["sample_spread"]) == (112, 0.5):  # ImageNet-like: the profile says nothing
            continue
        sized += 1
        # the log-normal's mean (unet3d's spread: DLIO's standard deviation) is the record length
        mean = limits.mean_image_bytes(acc["sample_kb"], acc["sample_spread"])
        assert mean == pytest.approx(profiles[name]["record_bytes"], rel=0.005), name
    # unet3d (B200, H100, A100), retinanet (B200, MI355), resnet50 and cosmoflow (H100, A100)
    assert sized == 9
    named = _compose("workload=emulated", "accelerator=retinanet_b200", "dataset=caltech101").dataset
    assert named.median_kb != 322.957


def test_alexnet_presets():
    full = _compose("workload=alexnet").workload
    assert (full.image_side, full.width, full.steps, full.device.value) == (224, 1.0, None, "auto")
    small = _compose("workload=alexnet_small").workload
    assert small.image_side < 224 and small.width < 1


def test_experiment_presets_sweep_and_can_be_narrowed():
    cfg = _compose("+experiment=fig6")
    params = dict(cfg.hydra.sweeper.params)
    assert params == {"threads": "1,2,4,8", "prefetch": "0,1"}
    cells = sweep.expand([f"{k}={v}" for k, v in params.items()] + ["threads=1,8", "storage=local,tmpfs"])
    assert len(cells) == 2 * 2 * 2 and ["threads=1", "prefetch=0", "storage=local"] in cells
    assert dict(_compose("+experiment=fig7").hydra.sweeper.params)["batch_size"] == "16,32,64,128"


def test_caltech_preset():
    cfg = _compose("dataset=caltech101")
    assert (cfg.dataset.num_images, cfg.dataset.num_classes, cfg.dataset.median_kb) == (9144, 102, 12)


def test_tier_presets_need_a_root_and_carry_table_one():
    cfg = _compose("storage=hdd")
    assert OmegaConf.is_missing(cfg.storage, "root")
    assert cfg.storage.ior_read_mb_s == 163.0 and cfg.storage.ior_write_mb_s == 133.14
    assert _compose("storage=lustre").storage.kind == "network"
    assert _compose("storage=tmpfs").storage.kind == "memory"


def test_types_are_checked_by_the_schema():
    with pytest.raises(Exception) as e:
        _compose("batch_size=abc")
    assert "batch_size" in str(e.value) or isinstance(e.value.__cause__, ValidationError)
    with pytest.raises(Exception) as e:
        _compose("cache=lukewarm")
    assert "cold" in str(e.value) or "cold" in str(e.value.__cause__)


def test_unknown_choice_lists_valid_ones():
    msg = choices.unknown_choice(["threads=1,2", "storage=local,nvme"])
    assert msg and "storage 'nvme'" in msg and "local" in msg and "tmpfs" in msg
    assert choices.unknown_choice(["storage=local,tmpfs", "workload=readonly"]) is None
    assert "workload 'alexnetx'" in choices.unknown_choice(["workload=alexnetx"])
    # the suggestion is written as the user wrote the override: with its +
    assert "did you mean +experiment=mlperf?" in choices.unknown_choice(["+experiment=mlpref"])


def test_a_sweep_without_m_is_named_with_the_command_that_runs_it():
    line = choices.sweep_without_flag(["threads=1,2", "storage.root=/my dir"])
    assert line == (
        "threads=1,2 is a sweep: add -m to run each of its values as a cell "
        "(python -m campaign -m threads=1,2 'storage.root=/my dir')"
    )
    assert choices.sweep_without_flag(["threads=range(1,4)"]).startswith("threads=range(1,4) is a sweep")
    for plain in (
        ["-m", "threads=1,2"],
        ["--multirun", "threads=1,2"],
        ["dataset.name='a,b'"],  # quoted: one string
        ["platform.setup=[module load x,y]"],  # a list
        ["hydra.searchpath=[file:///a,file:///b]"],
        ["threads=2"],
    ):
        assert choices.sweep_without_flag(plain) is None, plain


def test_the_paper_study_is_chosen_in_any_override_form():
    for form in ("+experiment=paper", "experiment=paper", "++experiment=paper"):
        assert choices.study(["--scale", "ci", form]) == form
    assert choices.study(["+experiment=fig6"]) is None and choices.study(["experiment.paper=1"]) is None


def test_a_setting_the_chosen_workload_lacks_is_named():
    msg = choices.missing_field(["workload=microbench,alexnet_small", "workload.width=0.5"])
    assert (
        msg
        and msg.startswith("workload.width=0.5: workload=microbench has no setting 'width'")
        and "batches" in msg
    )
    assert "workload=microbench" in choices.missing_field(["workload.steps=3"])  # the default workload
    assert choices.missing_field(["workload=alexnet_small,checkpoint", "workload.width=0.5"]) is None
    assert choices.missing_field(["workload=baseline", "workload.file_gb=1"]) is None
    assert "'file_gb'" in choices.missing_field(["workload=readonly", "workload.file_gb=1"])


def test_sweep_expansion_matches_hydras_basic_sweeper():
    cells = sweep.expand(["threads=1,2", "storage=local,tmpfs", "repeats=2"])
    assert cells == [
        ["threads=1", "storage=local", "repeats=2"],
        ["threads=1", "storage=tmpfs", "repeats=2"],
        ["threads=2", "storage=local", "repeats=2"],
        ["threads=2", "storage=tmpfs", "repeats=2"],
    ]
    assert sweep.expand([]) == [[]]


@pytest.mark.cells
def test_the_paper_study_comes_from_its_yaml_files():
    import re

    from campaign import paper

    grids_text = (CONF / "paper" / "grids.yaml").read_text()
    used = set(re.findall(r"\{(\w+)\}", grids_text)) - {"tiers", "middle", "fast", "slow", "name", "lustre"}
    for scale in paper.scales():
        values = OmegaConf.load(CONF / "paper" / "scale" / f"{scale}.yaml")
        assert used <= set(values), (scale, used - set(values))
        grids = dict(paper.grids(scale, ["local", "tmpfs"]))
        assert list(grids) == ["table1", "fig4_fig5", "fig6_fig8", "fig7", "fig9_fig10"]
        for overrides in grids.values():  # every grid composes and passes the checks, cell by cell
            for cell in sweep.expand(overrides)[:1]:
                validate.check(Cell.from_composed(_compose(*cell)))
    ci = dict(paper.grids("ci", ["emulated_hdd", "emulated_ssd", "emulated_optane"]))
    grids_ci = dict(paper.grids("ci", ["local"]))
    assert (
        "storage@checkpoint.fast=emulated_optane" in ci["fig9_fig10"] and "storage=emulated_ssd" in ci["fig7"]
    )
    assert "workload.image_side=64" in ci["fig9_fig10"] and "dataset.num_images=128" in ci["table1"]
    assert not any(o.startswith("dataset.num_images") for o in dict(paper.grids("full", ["ssd"]))["table1"])
    # Fig. 4's Lustre bars: a grid of their own on --lustre's tier, left out without one
    ws = dict(paper.grids("workstation", ["modeled_hdd", "emulated_ssd"], "modeled_lustre"))
    assert list(ws)[:3] == ["table1", "fig4_fig5", "fig4_lustre"]
    assert ws["fig4_lustre"] == [
        "workload=microbench",
        "threads=1,2,4,8",
        "storage=modeled_lustre",
        "dataset.num_images=512",
        "repeats=3",
    ]
    for cell in sweep.expand(ws["fig4_lustre"])[:1]:
        validate.check(Cell.from_composed(_compose(*cell)))
    # paper.txt names the Lustre tier only where a grid reads it: an --only study without fig4_lustre ran none
    text = paper.study_text(
        "workstation", ["modeled_hdd"], ["tensorflow"], "modeled_lustre", "", list(ws.items())
    )
    assert "lustre=modeled_lustre\n" in text and "fig4_lustre: " in text
    only = paper.study_text(
        "workstation", ["modeled_hdd"], ["tensorflow"], "modeled_lustre", "", [("fig7", [])]
    )
    assert "lustre" not in only and only.endswith("fig7: \n")
    # --frameworks tensorflow,pytorch: the paper's grids unchanged, then the PyTorch ones, which plan
    both = dict(paper.grids("ci", ["local"], None, ("tensorflow", "pytorch")))
    assert list(both) == [*grids, "fig4_fig5_pytorch", "fig6_pytorch"]
    assert both["fig4_fig5"] == grids_ci["fig4_fig5"] and both["fig6_fig8"] == grids_ci["fig6_fig8"]
    assert "framework=pytorch" in both["fig4_fig5_pytorch"]
    # Fig. 6's PyTorch bars: fig6_fig8's threads as DataLoader workers, and 0 (its run without prefetch)
    assert "threads=1,2" in grids_ci["fig6_fig8"]
    assert {"framework=pytorch", "loader.num_workers=0,1,2", "storage=local"} <= set(both["fig6_pytorch"])
    assert not any(o.startswith(("threads=", "prefetch=")) for o in both["fig6_pytorch"])
    for name in ("fig4_fig5_pytorch", "fig6_pytorch"):
        for cell in sweep.expand(both[name]):
            validate.check(Cell.from_composed(_compose(*cell)))
    full = dict(paper.grids("full", ["ssd"], None, ("tensorflow", "pytorch")))
    assert (
        "loader.num_workers=0,1,2,4,8" in full["fig6_pytorch"] and "workload=alexnet" in full["fig6_pytorch"]
    )
    assert "fig4_lustre" not in dict(paper.grids("workstation", ["modeled_hdd"]))


def test_only_the_experiment_presets_set_hydras_mode_and_they_sweep_without_m(tmp_path):
    """``python -m campaign`` without -m skips Hydra's composition that only reads ``hydra.mode`` unless an
    argument could set it (``campaign.__main__.MODE_SETTERS``): that holds while no config in conf/ but an
    experiment preset sets the mode. A preset that does still sweeps without -m; a plain command runs once."""
    import yaml

    from support.commands import campaign

    setting = sorted(
        str(f.relative_to(CONF))
        for f in CONF.rglob("*.yaml")
        if "mode" in ((yaml.safe_load(f.read_text()) or {}).get("hydra") or {})
    )
    assert setting and all(f.startswith("experiment/") for f in setting), setting
    p = campaign("+experiment=fig7", "platform.dry_run=true", cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("dry run: 8 cells would run here"), p.stdout + p.stderr
    p = campaign("dataset.num_images=32", "batch_size=8", "platform.dry_run=true", cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("dry run: 1 cell would run here"), p.stdout + p.stderr
    assert list(tmp_path.iterdir()) == []
