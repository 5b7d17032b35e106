"""platform=slurm without a cluster: site settings checked and mapped to submitit, the sbatch script
pinned, sacct/squeue parsed and the waiting line said from them, dry runs; the live-cluster tests are
tests/slurm/test_slurm.py."""

import pytest
from omegaconf import OmegaConf

from campaign.slurm import params, sacct, submit
from campaign.validate import ConfigError
from support.commands import campaign
from support.configs import SLURM_TINY


def _platform(**kw):
    from jobs.schema import PlatformConf

    base = OmegaConf.structured(PlatformConf(name="slurm", kind="slurm"))
    return OmegaConf.merge(base, kw)


@pytest.mark.parametrize(
    "key,value",
    [
        ("partition", "debug\n#SBATCH --exclusive"),
        ("account", "proj;rm -rf ~"),
        ("qos", "normal`id`"),
        ("constraint", "k80 $(reboot)"),
        ("partition", "a b"),
    ],
)
def test_directive_values_cannot_smuggle_shell(key, value):
    with pytest.raises(ConfigError, match=f"platform.{key}="):
        params.check(_platform(**{key: value}))


def test_setup_lines_are_single_shell_lines():
    params.check(_platform(setup=["module load cuda/9.1; module list", "source ~/venv/bin/activate"]))
    with pytest.raises(ConfigError, match=r"platform.setup\[1\] holds a line break"):
        params.check(_platform(setup=["module load x", "echo a\necho b"]))
    with pytest.raises(ConfigError, match=r"platform.setup\[0\] is an #SBATCH directive"):
        params.check(_platform(setup=["#SBATCH --mem=1T"]))


def test_the_nodes_python_is_one_path_quoted_in_the_script():
    params.check(_platform(python="/cfs/home/me/my venv/bin/python"))
    assert submit.nodes_python(_platform(python="/cfs/home/me/my venv/bin/python")) == (
        "'/cfs/home/me/my venv/bin/python'"
    )
    assert submit.nodes_python(_platform()) is None  # submitit's own: the Python that submits
    for bad in ("/cfs/bin/python\n#SBATCH --mem=1T", " "):
        with pytest.raises(ConfigError, match="platform.python=.* must be one path"):
            params.check(_platform(python=bad))


def test_valid_site_values_pass_and_map_to_submitit():
    p = _platform(
        partition="main",
        account="2024-1-23",
        constraint="k80&haswell",
        gpus_per_node=1,
        exclusive=True,
        setup=["module load cuda"],
        mem_gb=100,
        timeout_min=120,
        cpus_per_task=24,
    )
    params.check(p)
    kw = params.executor_parameters(p, job_name="x")
    assert kw["partition"] == "main" and kw["account"] == "2024-1-23" and kw["constraint"] == "k80&haswell"
    assert (
        kw["mem"] == "102400M" and kw["time"] == 120 and kw["exclusive"] is True and kw["gpus_per_node"] == 1
    )
    assert kw["array_parallelism"] == 1 and kw["setup"] == ["module load cuda"]


def test_sbatch_preview_pins_submitits_script(tmp_path):
    p = _platform(
        partition="debug", account="acc", exclusive=True, gpus_per_node=1, setup=["module load cuda/9.1"]
    )
    text = submit.sbatch_script(submit.executor(tmp_path, p), 3)
    for line in (
        "#SBATCH --array=0-2%1",
        "#SBATCH --partition=debug",
        "#SBATCH --account=acc",
        "#SBATCH --exclusive",
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --time=60",
        "module load cuda/9.1",
        "-m submitit.core._submit",
    ):
        assert line in text, line
    assert text.index("module load cuda/9.1") < text.index("srun")


def test_sacct_and_squeue_parsing():
    got = sacct.parse_sacct(
        "12_0|COMPLETED|0:0|node1\n12_1|CANCELLED by 0|0:15|node1\n"
        "12_[2-3]|PENDING|0:0|None assigned\n13|TIMEOUT|0:0|n2\n"
    )
    assert got["12_0"].state == "COMPLETED" and got["12_1"].state == "CANCELLED" and got["12_1"].terminal
    assert got["12_3"].state == "PENDING" and not got["12_3"].terminal and got["12_3"].node == ""
    assert got["13"].terminal
    q = sacct.parse_squeue("12_[2-3%1]|PENDING|JobArrayTaskLimit\n12_1|RUNNING|node1\n")
    assert q["12_2"].reason == "JobArrayTaskLimit" and q["12_1"].node == "node1"
    # as squeue prints a pending job's reason (before: "1 pending ((Resources))" in the waiting line)
    assert sacct.parse_squeue("14|PENDING|(ReqNodeNotAvail, UnavailableNodes:n2)\n")["14"].reason == (
        "ReqNodeNotAvail, UnavailableNodes:n2"
    )


def test_waiting_progress_line():
    from campaign.slurm.submit import progress

    states = {
        0: sacct.JobState("7_0", "COMPLETED"),
        1: sacct.JobState("7_1", "RUNNING", node="n1"),
        2: sacct.JobState("8", "PENDING", reason="Dependency"),
        3: sacct.JobState("9", "PENDING", reason="Priority"),
    }
    assert (
        progress(states, [0]) == "1 of 4 cells ended; 1 running (#1 on n1); 2 pending (Dependency, Priority)"
    )
    # the nodes Slurm starts no job on, which a pending job's reason does not name (before: not said)
    down = sacct.parse_sinfo("n2|drained|Kill task failed\nn2|drained|Kill task failed\nn3|idle*|none\n")
    assert down == ["n2 drained (Kill task failed)", "n3 idle, not responding"]
    assert progress(states, [0], down).endswith(
        "; 2 pending (Dependency, Priority); "
        "out of service: n2 drained (Kill task failed), n3 idle, not responding"
    )
    running = {n: s for n, s in states.items() if s.state != "PENDING"}
    assert "out of service" not in progress(running, [0], down)  # said only while a cell waits


def test_bad_sbatch_value_on_the_command_line(tmp_path):
    p = campaign("-m", "platform=slurm", "platform.constraint='k80 $(reboot)'", *SLURM_TINY, cwd=tmp_path)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode != 0 and len(lines) == 1 and "platform.constraint=" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_tegner_preset_needs_an_account(tmp_path):
    p = campaign("-m", "platform=tegner", "storage=lustre", "storage.root=/tmp", *SLURM_TINY, cwd=tmp_path)
    assert p.returncode != 0 and "platform.account is not set" in p.stderr


def test_slurm_without_multirun_says_how(tmp_path):
    p = campaign("platform=slurm", *SLURM_TINY, cwd=tmp_path)
    assert p.returncode == 2 and "add -m" in p.stderr
    assert list(tmp_path.iterdir()) == []


def test_multi_task_dry_run_shows_each_shape(tmp_path):
    p = campaign(
        "-m",
        "platform=slurm",
        "platform.dry_run=true",
        "platform.nodes=1,2",
        "platform.tasks_per_node=2",
        "storage=lustre",
        f"storage.root={tmp_path}",
        *SLURM_TINY,
        "hydra.sweep.dir=sweep",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    scripts = p.stdout.split("sbatch script")[1:]
    assert (
        len(scripts) == 2 and "1 node(s) x 2 task(s) per node" in scripts[0] and "2 node(s) x 2" in scripts[1]
    )
    assert "#SBATCH --nodes=1" in scripts[0] and "#SBATCH --nodes=2" in scripts[1]
    assert all(
        "#SBATCH --ntasks-per-node=2" in s and "srun --unbuffered" in s and "--nodes=1 --ntasks=1" in s
        for s in scripts
    )
    assert "#SBATCH --dependency" not in scripts[0] and "#SBATCH --dependency=afterany:" in scripts[1]
    assert not (tmp_path / "sweep").exists()


def test_a_site_preset_refuses_more_cpus_than_a_node_has(tmp_path):
    """tegner with 4 tasks per node asked for 4 x 24 = 96 CPUs of a 24-core node."""
    p = campaign(
        "-m",
        "platform=tegner",
        "platform.account=x",
        "platform.tasks_per_node=4",
        "platform.nodes=1",
        "workload=readonly",
        "storage=shared",
        f"storage.root={tmp_path}",
        *SLURM_TINY,
        cwd=tmp_path,
    )
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert (
        "asks for 96 CPUs on a node of platform.cores_per_node=24: set platform.cpus_per_task=6" in lines[0]
    )
    p = campaign(
        "-m",
        "platform=tegner",
        "platform.account=x",
        "platform.tasks_per_node=4",
        "platform.cpus_per_task=6",
        "workload=readonly",
        "storage=shared",
        f"storage.root={tmp_path}",
        "platform.dry_run=true",
        *SLURM_TINY,
        cwd=tmp_path,
    )
    assert p.returncode == 0 and "--cpus-per-task=6" in p.stdout, p.stderr[-2000:]
    # the submitting host's Python runs the cells
    assert "anaconda" not in p.stdout and "module load" not in p.stdout
