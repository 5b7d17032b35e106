"""Planning refuses what cannot run (reliability round 3): one line naming the setting, exit status 2,
nothing written, in dry runs too. Most cases are planned in this process through the planner and the
checks a campaign runs; a few real commands prove the exit status, the single line and the empty folder."""

import os
import time

import pytest

from campaign import choices
from campaign.capacity import command as capacity
from jobs import schema
from support.commands import run_module


def _one(line: str | None, *expected: str) -> None:
    assert line is not None and "\n" not in line, line
    for e in expected:
        assert e in line, line


def test_a_backing_folder_and_its_mount_point_inside_each_other_are_refused(refusal, tmp_path):
    """Item 5: the layer would serve its own mount and FUSE deadlock (a process in D state)."""
    _one(
        refusal(
            "storage=modeled_hdd", f"storage.root={tmp_path}/p", f"storage.model.backing_dir={tmp_path}/p/in"
        ),
        f"storage.model.backing_dir={tmp_path}/p/in",
        "inside its own mount point",
        "hang",
    )
    _one(
        refusal(
            "storage=modeled_hdd", f"storage.root={tmp_path}/b/in", f"storage.model.backing_dir={tmp_path}/b"
        ),
        f"storage.root={tmp_path}/b/in lies inside storage.model.backing_dir={tmp_path}/b",
    )
    assert not (tmp_path / "p").exists() and not (tmp_path / "b").exists()


def test_thread_and_worker_counts_beyond_what_a_cell_can_use_are_refused(refusal):
    _one(refusal("threads=100000"), "threads=100000 is more than 1024")
    # the bound itself runs, as 8-64 on a 16-core node do
    assert refusal(f"threads={schema.THREADS_MAX}") is None
    _one(refusal("input.service=true", "input.workers=100000"), "input.workers=100000", "cores")


def test_a_dataset_beyond_the_roots_free_space_is_refused_without_visiting_its_images(refusal, tmp_path):
    t0 = time.perf_counter()
    line = refusal("dataset.num_images=100000000", f"storage.root={tmp_path}")
    assert time.perf_counter() - t0 < 1.0  # it estimated every image's size for ~18 minutes
    _one(line, "dataset.num_images=100000000", "GB free", "storage=local")
    assert os.listdir(tmp_path) == []


def test_the_size_model_matches_the_generators_sizes():
    """The closed form planning uses against jobs.data.synthetic's own estimate over a real sample."""
    from campaign import limits
    from jobs.data import synthetic
    from jobs.schema import DatasetConf

    for median_kb, spread in ((112, 0.5), (12, 0.55), (10, 1.0)):
        exact = synthetic.estimate_bytes(
            synthetic.SyntheticSpec("x", 10, median_kb, spread, 0.6, 0.0, 0), 0, 20000
        )
        model = limits.synthetic_bytes(DatasetConf(median_kb=median_kb, size_spread=spread), 20000)
        assert abs(model / exact - 1) < 0.02


@pytest.mark.parametrize(
    "root,expected",
    [
        ("/", "is the root of the file system"),
        ("/etc", "is /etc, a folder of the operating system"),
        ("/dev", "is /dev, a folder of the operating system"),
        ("/usr/share", "is in /usr, a folder of the operating system"),
    ],
)
def test_a_root_that_is_a_system_folder_is_refused(refusal, root, expected):
    _one(refusal(f"storage.root={root}"), f"storage.root={root} {expected}")


def test_a_link_into_etc_and_a_modelled_tier_over_a_system_folder_are_refused(refusal, tmp_path):
    (tmp_path / "etc").symlink_to("/etc")
    _one(refusal(f"storage.root={tmp_path}/etc"), f"storage.root={tmp_path}/etc (a link to /etc) is /etc")
    _one(
        refusal("storage=modeled_hdd", "storage.root=/etc/iocampaign"),
        "storage.root=/etc/iocampaign is in /etc",
    )
    _one(
        refusal("storage=modeled_hdd", "storage.model.backing_dir=/usr"),
        "storage.model.backing_dir=/usr is /usr",
    )
    assert refusal("storage.root=/dev/shm") is None and refusal(f"storage.root={tmp_path}") is None


def test_planning_writes_no_probe_into_the_root(refusal, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    before = os.stat(root).st_mtime_ns
    time.sleep(0.01)
    assert refusal(f"storage.root={root}") is None
    assert os.listdir(root) == [] and os.stat(root).st_mtime_ns == before  # a probe made and removed moves it


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ("storage.model.device=lustre",),
            "storage.model.device=lustre, but storage.model sets average_seek_ms",
        ),
        (("storage.model.backing_dir=''",), "storage.model.backing_dir is empty"),
        (("storage.model.backing_dir=tiers",), "storage.model.backing_dir=tiers is a relative path"),
    ],
)
def test_a_modelled_tier_that_contradicts_its_preset_or_has_no_backing_folder_is_refused(
    refusal, args, expected
):
    _one(refusal("storage=modeled_hdd", *args), expected)


def test_a_backing_path_that_is_a_file_is_refused_at_planning(refusal, tmp_path):
    (tmp_path / "afile").write_text("the user's")
    _one(
        refusal(
            "storage=modeled_hdd",
            f"storage.root={tmp_path}/mnt",
            f"storage.model.backing_dir={tmp_path}/afile",
        ),
        f"storage.model.backing_dir={tmp_path}/afile: {tmp_path}/afile is a file",
    )
    assert (tmp_path / "afile").read_text() == "the user's"


def test_two_modelled_tiers_on_one_root_are_refused(refusal, tmp_path):
    _one(
        refusal(
            "storage=modeled_hdd",
            f"storage.root={tmp_path}/m",
            "storage@stage=modeled_lustre",
            f"stage.root={tmp_path}/m/x",
        ),
        f"stage.root={tmp_path}/m/x (stage=modeled_lustre)",
        "mounted on top of each other",
    )


def test_a_baseline_file_larger_than_the_free_space_is_refused_at_planning(refusal, tmp_path):
    _one(
        refusal("workload=baseline", "workload.file_gb=1000000", f"storage.root={tmp_path}"),
        "workload.file_gb=1000000.0",
        "does not fit",
        "GB free on storage=local",
    )


BB = ("workload=checkpoint", "storage@checkpoint.slow=s3", "checkpoint.target=burst_buffer")


@pytest.mark.parametrize(
    "args,expected",
    [
        # a traceback (urlsplit's ValueError), or refused only when the client first reached the server
        (
            ("storage=s3", "storage.endpoint='http://[::1:bad'"),
            "storage.endpoint=http://[::1:bad is not an S3",
        ),
        (
            (*BB, "checkpoint.slow.endpoint='http://[::1:bad'"),
            "checkpoint.slow.endpoint=http://[::1:bad is not",
        ),
        (("storage=s3", "storage.endpoint=http://127.0.0.1:99999"), "port must be a whole number 1-65535"),
        (
            ("storage=s3", "storage.endpoint=http://127.0.0.1:abc"),
            "storage.endpoint=http://127.0.0.1:abc is not",
        ),
        (("storage=s3", "storage.endpoint='http://a b:9000'"), "host 'a b' is neither a host name nor an IP"),
        (("storage=s3", "storage.endpoint=http://256.1.1.1:9000"), "host '256.1.1.1' is not an IPv4 address"),
        (("storage=azure", "storage.endpoint=http://10.0.1:10000"), "host '10.0.1' is not an IPv4 address"),
        # ZeroDivisionError in the generator
        (("dataset.num_classes=0",), "dataset.num_classes=0 must be at least 1"),
        (("dataset.bytes_per_pixel=0",), "dataset.bytes_per_pixel=0.0 must be positive"),
        # bucket names S3 forbids, accepted by the embedded server
        (("storage=s3", "storage.bucket=192.168.1.1"), "storage.bucket=192.168.1.1 is not an S3 bucket name"),
        (("storage=s3", "storage.bucket=xn--abc"), "S3 reserves the prefix xn--"),
        (("storage=s3", "storage.endpoint='http://::1:9000'"), "an IPv6 address goes in brackets"),
        (
            ("storage=s3", "storage.bucket=null"),
            "storage.bucket is not set: the tool reads and writes in a bucket",
        ),
        (
            ("storage=azure", "storage.bucket=null"),
            "storage.bucket is not set: the tool reads and writes in a container",
        ),
        (
            ("storage=s3", "storage.bucket=a-.b"),
            "storage.bucket=a-.b is not an S3 bucket name: it holds '-.'",
        ),
        (("storage=s3", "storage.bucket=a..b"), "it holds '..'"),
        (("storage=s3", "storage.bucket=data-s3alias"), "S3 reserves the suffix -s3alias"),
        (("storage=s3", "storage.bucket=data--ol-s3"), "S3 reserves the suffix --ol-s3"),
        ((*BB, "checkpoint.slow.bucket=ab"), "checkpoint.slow.bucket=ab is not an S3 bucket name: it has 2"),
        # ran, and its rows said staged while every image was a GET
        (("storage=s3", "storage@stage=tmpfs"), "storage=s3 with storage@stage=tmpfs"),
        # recorded, never used (PyTorch itself refuses it)
        (
            ("framework=pytorch", "loader.num_workers=0", "loader.prefetch_factor=4"),
            "loader.prefetch_factor=4 with loader.num_workers=0",
        ),
        (
            ("loader.num_workers=0", "loader.prefetch_factor=2"),
            "loader.prefetch_factor=2 with loader.num_workers=0",
        ),
        # TensorFlow reads with map threads: a DataLoader's setting was recorded and never used
        (
            ("framework=tensorflow", "loader.num_workers=4"),
            "loader.num_workers=4: framework=tensorflow reads with map threads (threads=N)",
        ),
        (("loader.pin_memory=true",), "loader.pin_memory=true: framework=tensorflow reads with map threads"),
        (("loader.persistent_workers=true",), "leave loader.persistent_workers false"),
        (("loader.prefetch_factor=8",), "leave loader.prefetch_factor null"),
        (
            ("loader.multiprocessing_context=spawn",),
            "loader.multiprocessing_context=spawn: framework=tensorflow",
        ),
        # accepted silently
        (
            ("storage.kind=bogus",),
            "storage.kind=bogus is not a kind of storage; choose one of block, network, memory, object",
        ),
        (("dataset.size_spread=-1",), "dataset.size_spread=-1.0 must not be negative"),
        (("dataset.size_spread=inf",), "dataset.size_spread=inf is more than 3"),  # NaN sizes
        (("dataset.grayscale_fraction=2",), "dataset.grayscale_fraction=2.0 is more than 1"),
        (("dataset.median_kb=0",), "dataset.median_kb=0.0 must be positive"),
        (("dataset.median_kb=nan",), "dataset.median_kb=nan must be positive"),
        (
            ("workload=sharded_checkpoint", "checkpoint.model.model_bytes_per_param=0"),
            "checkpoint.model.model_bytes_per_param=0 must be at least 1",
        ),
        (("platform.timeout_min=0",), "platform.timeout_min=0 must be at least 1"),
        (("platform.poll_s=0",), "platform.poll_s=0.0 must be positive"),
        (("platform.wait_quiet=2",), "platform.wait_quiet=2.0 is more than 1 (a share of the machine's"),
        (("platform.wait_quiet_max_s=-1",), "platform.wait_quiet_max_s=-1.0 must not be negative"),
        (("seed=-1",), "seed=-1 must not be negative"),  # numpy's generators take no negative seed
    ],
)
def test_bad_values_the_red_team_found_are_refused_at_planning(refusal, args, expected):
    """Reliability round 4: each gave a traceback, failed at run time or late, or was accepted silently."""
    _one(refusal(*args), expected)


def test_what_the_bounds_and_names_allow_still_plans(refusal, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "users-own")  # a user's endpoint is reached with their keys
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "users-secret")
    assert refusal("framework=pytorch") is None  # prefetch_factor null: PyTorch's 2 with workers
    assert refusal("platform.wait_quiet=0.25", "platform.wait_quiet_max_s=0") is None
    assert refusal("framework=pytorch", "loader.num_workers=0") is None
    assert refusal("framework=pytorch", "loader.num_workers=2", "loader.prefetch_factor=4") is None
    for endpoint in ("http://[::1]:9000", "https://s3.example.org", "http://minio_1:9000/"):
        assert refusal(*BB, "framework=pytorch", f"checkpoint.slow.endpoint='{endpoint}'") is None
    for bucket in ("abc", "my.bucket-1", "a" * 63, "10.0.0.1.5"):
        assert refusal("storage=s3", f"storage.bucket={bucket}") is None
    assert (
        refusal("dataset.size_spread=0", "dataset.grayscale_fraction=1", "dataset.bytes_per_pixel=3") is None
    )


def test_a_null_prefetch_factor_keeps_the_cell_id_of_the_default_it_replaced():
    """The default was 2 (in every cell's id, TensorFlow's too): a cell planned before keeps its folder."""
    from campaign import planning
    from jobs.frameworks.pytorch.loader.build import Loader
    from support.configs import compose_cell

    planner = planning.Planner(lambda ov: compose_cell(list(ov)))
    for ov in ([], ["framework=pytorch", "loader.num_workers=0"]):
        assert planner.cell(ov).cell_id == planner.cell([*ov, "loader.prefetch_factor=2"]).cell_id
    assert planner.cell(["loader.prefetch_factor=4"]).cell_id != planner.cell([]).cell_id

    def loader(*ov: str) -> Loader:
        return Loader.from_config(planner.cell(["framework=pytorch", *ov]).config)

    assert loader().prefetch_factor == 2  # PyTorch's default, given to the DataLoader
    assert loader("loader.num_workers=0").prefetch_factor is None  # as PyTorch takes it without workers


def test_a_time_limit_beyond_a_year_is_refused(refusal):
    _one(
        refusal("platform.timeout_min=999999999999"), "platform.timeout_min=999999999999 is more than 525600"
    )


def test_an_interpolation_is_type_checked_when_a_sweep_plans_it(refusal):
    _one(
        refusal("batch_size=${dataset.name}"),
        "batch_size=${dataset.name}",
        "could not be converted to Integer",
    )


def test_before_hydra_a_model_setting_on_a_plain_tier_and_a_bad_interpolation_get_one_line():
    _one(
        choices.null_parent(["storage=local", "storage.model.backing_dir=/x"]),
        "storage.model.backing_dir=/x: storage=local is not a modelled tier",
    )
    _one(choices.bad_value(["threads=${oops}"]), "threads=${oops}: the interpolation does not resolve")
    # one that resolves is the user's to use
    assert choices.bad_value(["storage.root=${oc.env:HOME}"]) is None


@pytest.mark.parametrize(
    "args,expected",
    [
        (["storage.emulate.size_gb=abc"], "storage.emulate.size_gb=abc: Value 'abc' of type 'str'"),
        (["storage@stage=tmpfs", "stage.model.rpm=slow"], "stage.model.rpm=slow: Value 'slow'"),
        (["checkpoint.fast.emulate.size_gb=x"], "checkpoint.fast.emulate.size_gb=x: Value 'x'"),
        (["checkpoint.slow.root=/x", "platform.nodes=two"], "platform.nodes=two: Value 'two'"),
        (["dataset.num_images=1,x"], "dataset.num_images=x: Value 'x'"),
        (["storage.root=/x", "loader.num_workers=x"], "loader.num_workers=x: Value 'x'"),
        (["storage.root=/x", "threads=2", "seed=abc"], "seed=abc: Value 'abc'"),
    ],
)
def test_a_bad_value_below_each_group_is_named_before_hydra(args, expected):
    """``choices.bad_value`` checks each value against the schema of the group it lies in (a tier's, the
    checkpoint's, the platform's) or the campaign's own, built for that group only."""
    _one(choices.bad_value(args), expected)


def test_good_values_below_each_group_pass_before_hydra():
    good = ["storage.root=/x", "storage.emulate.size_gb=2", "checkpoint.fast.root=/y", "platform.nodes=2"]
    assert choices.bad_value([*good, "dataset.num_images=64", "loader.num_workers=2", "threads=1,2"]) is None


def test_a_setting_of_what_the_workload_has_none_of_is_one_line_before_hydra():
    """``checkpoint.model.X=`` where no model is chosen was a 23-line AssertionError from OmegaConf, and
    ``dataset.X=`` with workload=sharded_checkpoint (which reads no dataset) Hydra's 6-line "Missing
    mandatory value" (red team, round 4)."""
    _one(
        choices.null_parent(["-m", "workload=checkpoint", "checkpoint.model.model_bytes_per_param=0"]),
        "workload=checkpoint has no checkpoint.model",
    )
    _one(
        choices.null_parent(["checkpoint.model.model_bytes_per_param=0"]),
        "workload=microbench has no checkpoint.model",
    )
    _one(
        choices.null_parent(["workload=microbench,sharded_checkpoint", "dataset.num_images=64"]),
        "workload=sharded_checkpoint has no dataset",
    )
    for fine in (
        ["workload=sharded_checkpoint", "checkpoint.model.model_bytes_per_param=2"],
        ["workload=checkpoint", "checkpoint_model=llama3_8b", "checkpoint.model.model_bytes_per_param=2"],
        ["workload=sharded_checkpoint", "dataset=imagenet_subset", "dataset.num_images=64"],
        ["workload=microbench", "dataset.num_images=64"],
    ):
        assert choices.null_parent(fine) is None, fine


@pytest.mark.parametrize(
    "args,expected",
    [
        (("batch_size=0",), "batch_size=0 must be at least 1"),  # ZeroDivisionError
        (("batch_size=abc",), "batch_size=abc: Value 'abc'"),
        (("dataset.num_images=abc",), "dataset.num_images=abc: Value 'abc'"),
        (("threads=abc",), "threads=abc is not a whole number"),
        (("threads=autotune",), "threads=autotune: the search predicts from a fixed number"),
        (("dataset=nosuch",), "unknown dataset 'nosuch'"),  # FileNotFoundError
        (("threads=${oops}",), "threads=${oops}: the interpolation does not resolve"),
        (
            ("storage.model.backing_dir=/x",),
            "storage=local is not a modelled tier",
        ),  # AssertionError, in a sub-campaign
        (("--most", "0"), "--most 0 must be at least 1"),  # blamed dataset.num_images
        (("dataset.num_classes=0",), "dataset.num_classes=0 must be at least 1 [storage=local]"),  # ran cells
        (
            ("storage=s3", "storage.endpoint='http://[::1:bad'"),  # "Invalid IPv6 URL", naming no setting
            "storage.endpoint=http://[::1:bad is not an S3 endpoint URL",
        ),
    ],
)
def test_the_capacity_search_refuses_its_arguments_in_one_line(args, expected, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert (
        capacity.main(["--out", str(tmp_path / "out"), "accelerator=resnet50_a100", "storage=local", *args])
        == 2
    )
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("campaign.capacity: ") and expected in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_the_capacity_search_plans_its_cell_with_the_campaigns_checks():
    from campaign.capacity import checks as capacity_checks

    profile = capacity._profile("resnet50_a100", [])
    _one(capacity_checks.cells(["storage=local", "threads=100000"], profile), "threads=100000 is more than")
    assert capacity_checks.cells(["storage=local,tmpfs", "threads=2"], profile) is None


def _refused(cwd, module, *args, expected):
    p = run_module(module, *args, cwd=cwd)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stdout + p.stderr
    assert expected in lines[0], lines[0]
    assert list(cwd.rglob("*")) == []
    return lines[0]


def test_real_commands_exit_2_with_one_line_and_write_nothing(cwd, tmp_path):
    _refused(
        cwd,
        "campaign",
        "storage=modeled_hdd",
        f"storage.root={tmp_path}/p",
        f"storage.model.backing_dir={tmp_path}/p/in",
        "platform.dry_run=true",
        expected="inside its own mount point",
    )
    assert not (tmp_path / "p").exists()
    _refused(
        cwd, "campaign", "threads=${oops}", expected="threads=${oops}: the interpolation does not resolve"
    )
    _refused(
        cwd,
        "campaign",
        "-m",
        "batch_size=${dataset.name}",
        "platform.dry_run=true",
        expected="batch_size=${dataset.name}: While dereferencing",
    )
    # a traceback of 17-28 lines and .hydra/ written, with and without -m (round 4)
    _refused(
        cwd,
        "campaign",
        "storage=s3",
        "storage.endpoint='http://[::1:bad'",
        expected="storage.endpoint=http://[::1:bad",
    )
    _refused(
        cwd,
        "campaign",
        "-m",
        "storage=s3",
        "storage.endpoint=http://[::1:bad",  # unquoted: Hydra's grammar error, three lines and exit status 1
        "platform.dry_run=true",
        expected="storage.endpoint=http://[::1:bad: not an override Hydra can read",
    )
    # the hint named brackets or '=' where the value held neither, only a letter outside ASCII
    _refused(
        cwd,
        "campaign",
        "storage=s3",
        "storage.bucket=bücket",
        "platform.dry_run=true",
        expected="quote a value with letters outside ASCII in it: storage.bucket='...'",
    )
    _refused(
        cwd,
        "campaign.capacity",
        "accelerator=resnet50_a100",
        "storage=local",
        "batch_size=0",
        expected="campaign.capacity: batch_size=0 must be at least 1",
    )


def test_the_modelled_layers_answer_limit_is_bounded_and_changes_no_cells_id(refusal):
    """``storage.model.answer_s``: under the probe's second, a layer busy for a moment would be ended; and
    the limit says how long a fault is waited for, not what is measured, so a cell keeps its id."""
    from omegaconf import OmegaConf

    from jobs import plan
    from support.configs import compose_cell

    _one(
        refusal("storage=modeled_hdd", "storage.model.answer_s=0.5"),
        "storage.model.answer_s=0.5 must be at least 1 (the layer is asked once a second; at most a day)",
    )
    # the watch switched off in effect: a layer that stops would hold the run for ever
    _one(
        refusal("storage=modeled_hdd", "storage.model.answer_s=1e9"),
        "storage.model.answer_s=1000000000.0 is more than 86400",
    )
    configs = (compose_cell(["storage=modeled_hdd", *extra]) for extra in ([], ["storage.model.answer_s=5"]))
    assert len({plan.cell_id(OmegaConf.to_container(c, resolve=True)) for c in configs}) == 1
