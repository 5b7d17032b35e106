"""Processes started warm (``jobs.execution.warm``: forked from multiprocessing's forkserver, which imported
TensorFlow, Hydra and pandas once): each runs its module as ``python -m`` would, ends as it would, and dies
with the process that started it. Real processes throughout: a parent Python that starts them, a real
SIGKILL, TensorFlow's real import."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from jobs.execution import warm
from support.commands import python_env
from support.paths import ROOT
from support.skips import needs_root

pytestmark = pytest.mark.cells  # TensorFlow's import, twice

CHILD = """\
import json, multiprocessing, os, sys
from jobs.execution import tfstart
print(json.dumps({
    "argv": sys.argv[1:], "cwd": os.getcwd(), "said": os.environ.get("SAID"), "path0": sys.path[0],
    "tensorflow": "tensorflow" in sys.modules, "devices_unseen": tfstart._preloaded is not None,
    # as a fresh interpreter: its own processes forked by default (a DataLoader's workers its children),
    # itself the main process
    "start_method": multiprocessing.get_start_method(allow_none=True),
    "process": multiprocessing.current_process().name, "parent": multiprocessing.parent_process() is None,
}), flush=True)
if sys.argv[1] == "raise":
    raise ValueError("from the child")
if sys.argv[1] == "log":
    from pathlib import Path
    assert tfstart.import_quietly(Path(sys.argv[2]), keras=False)
    assert not tfstart.import_quietly(Path(sys.argv[2]), keras=False)  # once per process
if sys.argv[1] == "keras":  # a cell that builds a Keras model, forked from a server that left Keras out
    from pathlib import Path
    before = "keras" in sys.modules
    assert tfstart.import_quietly(Path(sys.argv[2]), keras=True)
    print(json.dumps({"keras_before": before, "keras_after": "keras" in sys.modules}), flush=True)
sys.exit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else None)
"""

# the parent: starts the child warm with the arguments given, prints its exit status
# (its standard output on the file named by ``INTO``, if given, while it asks: as a cell's log is put on
# standard error while its runs start their tasks)
PARENT = """\
import os, sys
from jobs.execution import warm
preload = warm.COMMON + (getattr(warm, os.environ.get("PRELOAD", "TENSORFLOW_DATA")),)
saved = os.dup(1)
if os.environ.get("INTO"):  # after the server has started, with a first child
    warm.start("warm_child", ["first", "0"], dict(os.environ), preload).wait()
    os.dup2(os.open(os.environ["INTO"], os.O_WRONLY | os.O_CREAT), 1)
child = warm.start("warm_child", sys.argv[1:], {**os.environ, "SAID": "hello"}, preload)
os.dup2(saved, 1)
print("returncode", child.wait(), flush=True)
"""


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("warm")
    (d / "warm_child.py").write_text(CHILD)
    return d


def _env(modules: Path, **extra: str) -> dict[str, str]:
    return python_env(PYTHONPATH=f"{ROOT}:{modules}", **extra)


def _script(code: str, modules: Path, cwd: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    """``python -c <code> <args>`` in ``cwd``, with the checkout and ``modules`` on its PYTHONPATH."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=_env(modules, **extra),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _parent(modules: Path, cwd: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return _script(PARENT, modules, cwd, *args, **extra)


def test_a_warm_child_runs_its_module_as_python_m_does_and_ends_with_its_status(modules, tmp_path):
    cwd = tmp_path / "here"
    cwd.mkdir()
    warm = _parent(modules, cwd, "a b", "7")
    cold = subprocess.run(
        [sys.executable, "-m", "warm_child", "a b", "7"],
        cwd=cwd,
        env={**_env(modules), "SAID": "hello"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cold.returncode == 7, cold.stderr
    assert warm.stdout.splitlines()[-1] == "returncode 7", warm.stdout + warm.stderr
    seen, seen_cold = json.loads(warm.stdout.splitlines()[0]), json.loads(cold.stdout.splitlines()[0])
    # TensorFlow already there, its devices not looked for (the child sets CUDA up itself, if any)
    assert seen.pop("tensorflow") and seen.pop("devices_unseen"), seen
    assert not seen_cold.pop("tensorflow") and not seen_cold.pop("devices_unseen")
    assert (
        seen
        == seen_cold
        == {
            "argv": ["a b", "7"],
            "cwd": str(cwd),
            "said": "hello",
            "path0": str(cwd),
            "start_method": None,
            "process": "MainProcess",
            "parent": True,
        }
    )

    into = tmp_path / "into.log"  # the parent's standard output when it asked, not when the server started
    again = _parent(modules, cwd, "again", "0", INTO=str(into))
    first, said = again.stdout.splitlines()
    assert json.loads(first)["argv"] == ["first", "0"] and said == "returncode 0", again.stdout + again.stderr
    assert json.loads(into.read_text())["argv"] == ["again", "0"]

    failed = _parent(modules, cwd, "raise")
    assert failed.stdout.splitlines()[-1] == "returncode 1", failed.stdout + failed.stderr
    assert "ValueError: from the child" in failed.stderr and "Traceback" in failed.stderr


def test_the_first_cell_of_a_warm_child_gets_tensorflows_start_up_lines_in_its_log(modules, tmp_path):
    """The import's lines were printed in the server, before the child existed: the child writes them into
    its first cell's log, then looks for the devices there, as a cold import_quietly does."""
    cold_log, warm_log = tmp_path / "cold.log", tmp_path / "warm.log"
    cold = subprocess.run(
        [sys.executable, "-m", "warm_child", "log", str(cold_log)],
        cwd=tmp_path,
        env=_env(modules, TF_CPP_MIN_LOG_LEVEL="0"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cold.returncode == 0, cold.stderr
    warm = _parent(modules, tmp_path, "log", str(warm_log), TF_CPP_MIN_LOG_LEVEL="0")
    assert warm.stdout.splitlines()[-1] == "returncode 0", warm.stdout + warm.stderr

    def sources(log: Path) -> list[str]:  # where each line was printed (file:line), not its time and pid
        return re.findall(r"\S+\.cc:\d+\]|absl::InitializeLog", log.read_text())

    assert sources(cold_log), cold_log.read_text()
    assert sorted(sources(warm_log)) == sorted(sources(cold_log)), (
        warm_log.read_text(),
        cold_log.read_text(),
    )
    assert "cudart_stub" not in warm.stderr and "oneDNN" not in warm.stderr, warm.stderr  # not the terminal


def test_a_server_for_cells_without_keras_leaves_it_out_and_a_keras_cell_gets_it_before_its_runs(
    modules, tmp_path
):
    """``warm.TENSORFLOW_DATA`` (the micro-benchmark's, the emulated accelerator's, the tf.data service's
    server): TensorFlow without Keras, 0.8-1.0 s of CPU less per server. A child whose cell does build a
    Keras model imports it in ``import_quietly``, before its runs, and still gets the import's lines in its
    log."""
    log = tmp_path / "warm.log"
    p = _parent(modules, tmp_path, "keras", str(log), TF_CPP_MIN_LOG_LEVEL="0")
    assert p.stdout.splitlines()[-1] == "returncode 0", p.stdout + p.stderr
    seen, keras = (json.loads(line) for line in p.stdout.splitlines()[:2])
    assert seen["tensorflow"] and seen["devices_unseen"], seen
    assert keras == {"keras_before": False, "keras_after": True}, keras
    assert re.search(r"\S+\.cc:\d+\]|absl::InitializeLog", log.read_text()), log.read_text()


def test_a_warm_child_ends_when_the_process_that_started_it_is_killed(modules, tmp_path, other_user, request):
    """SIGKILL to the parent: the server's pipe closes, the server ends, and the child, bound to it
    (``jobs.lifeline``), gets its SIGTERM and cleans up, as a cold child bound to the parent does. The
    folder of the server's socket is left behind, and the next start removes it; nothing planted beside
    it of the same name (another user's folder, a link, a folder that holds a file) is touched."""
    (modules / "warm_sleeper.py").write_text(
        "import os, signal, sys, time\n"
        "from pathlib import Path\n"
        "from jobs import lifeline\n"
        "def ended(*_):\n"
        "    Path(sys.argv[1]).write_text('SIGTERM')\n"
        "    os._exit(0)\n"
        "signal.signal(signal.SIGTERM, ended)\n"
        "assert lifeline.bind()\n"
        "print(os.getpid(), flush=True)\n"
        "time.sleep(300)\n"
    )
    ended = tmp_path / "ended"
    tmp = Path(tempfile.mkdtemp(prefix="warm-", dir="/tmp"))  # the parents' TMPDIR (a socket's path is short)
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys\nfrom jobs import lifeline\nfrom jobs.execution import warm\n"
            "warm.start('warm_sleeper', sys.argv[1:], lifeline.child_env()).wait()\n",
            str(ended),
        ],
        cwd=tmp_path,
        env=_env(modules, TMPDIR=str(tmp)),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        child = int(parent.stdout.readline())
        assert not ended.exists()
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30
        while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ended.read_text() == "SIGTERM"
        assert not Path(f"/proc/{child}").exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
    (left,) = tmp.iterdir()
    namespace, pid = left.name.split("-")[2:4]
    assert left.name.startswith(warm.SERVER_FOLDER) and pid == str(parent.pid)
    assert [f.is_socket() for f in left.iterdir()] == [True]
    planted = _plant_beside(tmp, namespace, parent.pid, other_user)
    planted.pop(left.name)
    again = _parent(modules, tmp_path, "again", "0", TMPDIR=str(tmp))
    assert again.stdout.splitlines()[-1] == "returncode 0", again.stdout + again.stderr
    assert not left.exists()  # the dead process's folder, by the next start; its own, at its end
    assert sorted(p.name for p in tmp.iterdir()) == sorted(planted)
    for name, what in planted.items():
        assert _what(tmp / name) == what, name


def _plant_beside(tmp: Path, namespace: str, dead: int, user) -> dict[str, tuple]:
    """Entries named as server folders that are not the tool's to remove: of a dead process, a folder of
    another user's, a link to a folder of sockets and a folder that holds a file; a folder of a live
    process (this one); folders named with a number no pid can be. {name: what it is}."""
    import socket

    def with_socket(folder: Path) -> Path:
        folder.mkdir(mode=0o700)
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(folder / "listener-x"))
        return folder

    stem = f"{warm.SERVER_FOLDER}{namespace}-{dead}"
    os.chown(with_socket(tmp / f"{stem}-theirs"), user[1], user[2])
    (tmp / f"{stem}-link").symlink_to(with_socket(tmp / "elsewhere"))
    (with_socket(tmp / f"{stem}-file") / "notes.txt").write_text("kept")
    with_socket(tmp / f"{warm.SERVER_FOLDER}{namespace}-{os.getpid()}-alive")
    # names no process of this machine's can have (os.kill overflowed on the first: every warm start failed)
    os.chown(with_socket(tmp / f"{warm.SERVER_FOLDER}{namespace}-2147483648-huge"), user[1], user[2])
    with_socket(tmp / f"{warm.SERVER_FOLDER}{namespace}-99999999999-mine")
    return {
        p.name: _what(p)
        for p in tmp.iterdir()
        if p.name.startswith(warm.SERVER_FOLDER) or p.name == "elsewhere"
    }


def _what(p: Path) -> tuple:
    st = p.lstat()
    inside = sorted(f.name for f in p.iterdir()) if p.is_dir() else []
    return st.st_uid, st.st_mode, inside


@needs_root
def test_a_warm_child_is_under_the_throttle_its_parent_joined_after_the_server_started(modules, tmp_path):
    """A cell's runs join an emulated tier's throttle (a cgroup) before they start their tasks; the server
    was started earlier (another cell's, or none), and a child forked from it is in the server's groups
    until it joins its parent's, as a child the parent forks itself would be."""
    (modules / "warm_groups.py").write_text(
        "import json\nfrom jobs.execution import warm\nprint(json.dumps(warm.cgroups()), flush=True)\n"
    )
    code = (
        "import json, os, sys\n"
        "from pathlib import Path\n"
        "from jobs.execution import warm\n"
        "from jobs.storage import throttle\n"
        "ctl, why = throttle.current()\n"
        "assert ctl is not None, why\n"
        "warm.start('warm_groups', [], dict(os.environ)).wait()  # the server runs, outside the group\n"
        "group = ctl.group(f'warm-test-{os.getpid()}')\n"
        "ctl.join(group)\n"
        "try:\n"
        "    print(json.dumps(warm.cgroups()), flush=True)\n"
        "    warm.start('warm_groups', [], dict(os.environ)).wait()\n"
        "finally:\n"
        "    ctl.leave()\n"
        "    print('removed', ctl.remove(group), flush=True)\n"
    )
    p = _script(code, modules, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    before, parents, childs, removed = p.stdout.splitlines()
    assert removed == "removed True"
    assert json.loads(childs) == json.loads(parents) != json.loads(before), p.stdout
    assert any("iocampaign-warm-test-" in path for path in json.loads(childs).values()), childs


ENDS_FAST = """
import atexit, os, sys
from jobs import lifeline
atexit.register(print, "earlier atexit", flush=True)
lifeline.end_without_teardown()
pid = os.fork()
if pid == 0:  # a child forked from it ends on its own, with its own status and its own atexit functions
    lifeline.exit_as_python(lambda: sys.exit(3))
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status), end="")  # left in the buffer: flushed as it ends
sys.exit(5)
"""


def test_a_warm_servers_end_flushes_its_streams_and_leaves_its_childrens_ends_to_them():
    """lifeline.end_without_teardown (a warm server's, jobs.execution.warmend): the process ends at once
    with its streams flushed and status 0, its earlier atexit functions not run (the one line is the
    child's); a process forked from it runs its own atexit functions and ends with its own status."""
    p = subprocess.run(
        [sys.executable, "-c", ENDS_FAST], env=python_env(), capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout == "earlier atexit\nchild 3", p.stdout


ENDS_WITH_TORCH = """
import atexit, sys, weakref

def report():  # registered first: runs last, after the finalizers that ran at exit
    print("torch's teardowns not run", sum(f.alive for f in teardowns), "of", len(teardowns), flush=True)
    print("the program's own finalizer ran", not own.alive, flush=True)

atexit.register(report)
import torch.library
from jobs import lifeline

class Held:
    pass

held = Held()
own = weakref.finalize(held, lambda: None)
teardowns = [f for f, info in weakref.finalize._registry.items() if info.func is torch.library._del_library]
lifeline.exit_as_python(lambda: sys.exit(4))
"""


def test_a_process_that_imported_pytorch_ends_without_deregistering_its_operators():
    """lifeline.exit_as_python with PyTorch imported: torch.library's finalizers, which deregister every
    operator library as the interpreter ends (0.03 s of CPU in each such process), are not run at exit;
    the program's own finalizers still are, and its status is its own."""
    p = subprocess.run(
        [sys.executable, "-c", ENDS_WITH_TORCH], env=python_env(), capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 4, p.stderr
    skipped, ran = p.stdout.splitlines()
    count = int(skipped.split()[-1])
    assert count > 0 and skipped == f"torch's teardowns not run {count} of {count}", p.stdout
    assert ran == "the program's own finalizer ran True", p.stdout


ZYGOTE_CHILD = """\
import json, os, sys
from jobs.execution import tfstart
server = open(f"/proc/{os.getppid()}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
print(json.dumps({
    "server": os.getppid(), "fresh_server": "multiprocessing.forkserver" in server,
    "tensorflow": "tensorflow" in sys.modules, "devices_unseen": tfstart._preloaded is not None,
}), flush=True)
"""

# a command's process that was started warm: what its warm children need already imported (TensorFlow
# without its devices looked for), then, for each case, a process forked from it (as a command is) that takes
# its zygote (or none) and starts one child warm with a cell's preload list and ``also``
ZYGOTE_PARENT = """\
import json, os, sys
from pathlib import Path
import hydra, omegaconf, pandas, submitit
import campaign.choices, jobs.runner
from jobs import lifeline
from jobs.execution import tfstart, warm
tfstart.preload(keras=False)

def case(seen, also):
    if seen:  # TensorFlow's devices looked for in this process
        tfstart.import_quietly(Path(os.devnull), keras=False)
    taken, zygote = warm.zygote(), warm._Zygote.pid
    child = warm.start("zygote_child", [], dict(os.environ), (*warm.COMMON, warm.TENSORFLOW_DATA, *also))
    returncode = child.wait()
    print(json.dumps({"taken": taken, "zygote": zygote, "kept": warm._Zygote.pid, "returncode": returncode}))

for seen, also in ((False, ()), (True, ()), (False, ("torch",))):
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        lifeline.exit_as_python(lambda: case(seen, also))
    os.waitpid(pid, 0)
"""


def test_a_process_started_warm_forks_its_warm_children_from_a_copy_of_itself(modules, tmp_path):
    """warm.zygote: a process that holds its warm children's libraries, TensorFlow's devices not looked for,
    takes a copy of itself as their server, and no fresh interpreter imports them again; where TensorFlow's
    devices were looked for (CUDA set up: a forked child could not use it) it takes none, and where the
    children need what it lacks (PyTorch) its copy is ended and a fresh server imports it."""
    (modules / "zygote_child.py").write_text(ZYGOTE_CHILD)
    p = _script(ZYGOTE_PARENT, modules, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    said = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(said) == 6, p.stdout
    cases = {"warm": (True, True), "devices seen": (False, False), "lacks PyTorch": (True, False)}
    for (name, (taken, served)), child, parent in zip(cases.items(), said[0::2], said[1::2]):
        assert parent["taken"] is taken and parent["returncode"] == 0, (name, p.stdout)
        assert (parent["zygote"] is not None) is taken, (name, p.stdout)
        assert child["tensorflow"] and child["devices_unseen"], (name, child)  # its own device query to come
        if served:
            assert child["server"] == parent["zygote"] == parent["kept"], (name, p.stdout)
            assert not child["fresh_server"], (name, p.stdout)
        else:
            assert child["fresh_server"] and parent["kept"] is None, (name, p.stdout)
            if taken:  # the copy was ended before the fresh server started
                assert not Path(f"/proc/{parent['zygote']}").exists(), (name, p.stdout)


def test_a_sweep_while_other_commands_start_and_end_skips_folders_removed_as_it_lists_them(tmp_path):
    """Two commands starting at once on one machine: the folders of a process that ends while another's start
    lists them are gone before it looks at their owner. Before: ``FileNotFoundError`` out of ``sweep``, and
    the command that was starting failed with that traceback (seen in the suite on a busy machine)."""
    churn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys\n"
            "tmp, stem = sys.argv[1], sys.argv[2] + str(os.getpid())\n"
            "names = [os.path.join(tmp, f'{stem}-{k:04d}') for k in range(300)]\n"
            "open(os.path.join(tmp, 'ready'), 'w').close()\n"
            "while True:\n"
            "    for n in names: os.mkdir(n)\n"
            "    for n in names: os.rmdir(n)\n",
            str(tmp_path),
            f"{warm.SERVER_FOLDER}{warm._pid_namespace():x}-",
        ]
    )
    try:
        while not (tmp_path / "ready").exists():
            time.sleep(0.01)
        for _ in range(300):  # each listing races the churn's removals; a live process's folders stay
            assert warm.sweep(str(tmp_path)) == []
    finally:
        churn.kill()
        churn.wait()
