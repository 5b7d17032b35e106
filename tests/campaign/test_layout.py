"""The code's shape: imports run one way (campaign -> jobs, analysis -> jobs; never back up), no module
imports itself back through another, and jobs/ is laid out by concern with no two modules of one name."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from support import collecting
from support.paths import ROOT

PACKAGES = ("campaign", "jobs", "analysis")
# what each package may import of the others (campaign orchestrates both)
ALLOWED = {"jobs": set(), "analysis": {"jobs"}, "campaign": {"jobs", "analysis"}}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in ``path``, those inside functions too."""
    found = []
    for x in ast.walk(ast.parse(path.read_text())):
        if isinstance(x, ast.ImportFrom) and x.module and not x.level:
            found += [(x.lineno, f"{x.module}.{a.name}") for a in x.names]
        elif isinstance(x, ast.Import):
            found += [(x.lineno, a.name) for a in x.names]
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rsplit(".", 1)[0] if "." in name else ""
        return name or None

    return {m: {t for _, name in _imports(p) if (t := resolve(name)) and t != m} for m, p in mods.items()}


def test_collecting_the_tests_imports_no_framework(request):
    """A test module imports a framework's modules inside its tests, not at its top: every worker collects
    every module (tests/support/collecting.py)."""
    assert request.config.stash[collecting.IMPORTED] == []


PLUG_INS = """
import sys
from support import forkserver
for module in forkserver.COMMANDS:
    __import__(module)
from jobs import frameworks, workloads
from jobs.storage import backends
found = backends.declared.cache_info().currsize, frameworks.declared.cache_info().currsize
print(*found, workloads._discovered[0])
print(sorted(m for m in sys.modules if m.startswith(("iocampaign_backends", "iocampaign_frameworks"))))
print(len(backends.BACKENDS) > 4, "elsewhere" in frameworks.FRAMEWORKS)
"""


def test_the_commands_modules_find_plug_ins_on_first_use_not_at_import(tmp_path):
    """The tests' fork server imports the commands' modules once (support/forkserver.py ``COMMANDS``) and
    forks each command from it: a kind of storage or a framework from outside the tool on the command's
    PYTHONPATH is found when the command first asks, not when the modules were imported."""
    import subprocess
    import sys

    from support.commands import python_env

    for package in ("iocampaign_backends", "iocampaign_frameworks"):  # namespace packages: no __init__.py
        (tmp_path / package).mkdir()
    (tmp_path / "iocampaign_backends" / "elsewhere.py").write_text(
        "import dataclasses\nfrom jobs.storage.backends import memory\n"
        "BACKEND = dataclasses.replace(memory.BACKEND, kind='elsewhere', rank=99)\n"
    )
    fw = tmp_path / "iocampaign_frameworks" / "elsewhere"
    fw.mkdir()
    (fw / "__init__.py").write_text(
        "import dataclasses\nfrom jobs.frameworks.pytorch import FRAMEWORK as _torch\n"
        "FRAMEWORK = dataclasses.replace(_torch, name='elsewhere', rank=99)\n"
    )
    env = python_env(PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}{os.pathsep}{tmp_path}")
    p = subprocess.run([sys.executable, "-c", PLUG_INS], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == ["0 0 False", "[]", "True True"], p.stdout


def test_no_import_runs_up():
    up = []
    for m, p in _modules().items():
        pkg = m.split(".")[0]
        for line, name in _imports(p):
            top = name.split(".")[0]
            if top in PACKAGES and top != pkg and top not in ALLOWED[pkg]:
                up.append(f"{p.relative_to(ROOT)}:{line} imports {name}")
    assert up == []


# what measures, which the reader of records never imports: it reads what a workload declares from the
# records (analysis.declarations), and no framework's engine (jobs.frameworks.<name>.<module>)
MEASURING = ("jobs.workloads", "jobs.runner", "jobs.execution")


def test_the_analysis_imports_nothing_that_measures():
    found = [
        f"{m} imports {t}"
        for m, targets in _graph().items()
        if m.startswith("analysis")
        for t in sorted(targets)
        if t.startswith(MEASURING) or (t.startswith("jobs.frameworks.") and t.count(".") >= 3)
    ]
    assert found == []


# inside jobs/, a folder imports only the layers below its own: what every layer shares (jobs/*.py but
# the runner, and what each framework declares), then data and storage, what a run observes, the workloads,
# the frameworks' engines (each runs a workload in its framework), how their processes start, the run loop;
# a user's traces read as a table sit beside what a run observes (the tool's own traces are dftracer's); the
# cell (jobs/cell.py) sits with the workloads: its config holds each workload's own schema
ENGINES = 3.5  # jobs.frameworks.<name>.<module>: a framework's engine (its package's __init__ is layer 0)
JOBS_LAYERS = {
    "data": 1,
    "storage": 1,
    "observe": 2,
    "traces": 2,
    "workloads": 3,
    "cell": 3,
    "execution": 4,
    "runner": 5,
}
# the traced child's process runs the run loop
ENTRY_POINTS = {("jobs.execution.traced_child", "jobs.runner")}


def test_jobs_folders_import_downwards_only():
    def layer(module: str) -> float:
        parts = module.split(".")
        if parts[1] == "frameworks" and len(parts) > 3:
            return ENGINES
        return JOBS_LAYERS.get(parts[1], 0)

    up = [
        f"{m} imports {t}"
        for m, targets in _graph().items()
        if m.startswith("jobs.")
        for t in sorted(targets)
        if t.startswith("jobs.") and layer(t) > layer(m) and (m, t) not in ENTRY_POINTS
    ]
    assert up == []


def test_no_import_cycle():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []


def test_jobs_is_laid_out_by_concern_with_no_two_modules_of_one_name():
    top = sorted(p.name for p in (ROOT / "jobs").glob("*.py"))
    assert top == [
        "__init__.py",
        "cell.py",
        "errors.py",
        "interrupts.py",
        "jsonfiles.py",
        "lifeline.py",
        "metrics.py",
        "nodes.py",
        "owned.py",
        "plan.py",
        "records.py",
        "schema.py",
    ]
    assert sorted(p.name for p in (ROOT / "jobs").iterdir() if p.is_dir() and p.name != "__pycache__") == [
        "data",
        "execution",
        "frameworks",
        "observe",
        "runner",
        "storage",
        "traces",
        "workloads",
    ]
    names = [p.name for p in (ROOT / "jobs").rglob("*.py") if p.name != "__init__.py"]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def _names_compared(path: Path, names: set[str]) -> list[str]:
    """``line: code`` of each comparison in ``path`` (==, !=, in, not in) against one of ``names`` written
    as a literal; ``"tensorflow" in sys.modules`` (whether the module is imported) is not one."""

    def literal(node) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(literal(e) for e in node.elts)
        return isinstance(node, ast.Constant) and node.value in names

    found = []
    for x in ast.walk(ast.parse(path.read_text())):
        if not isinstance(x, ast.Compare) or not any(literal(n) for n in (x.left, *x.comparators)):
            continue
        if any(ast.unparse(c) == "sys.modules" for c in x.comparators):
            continue
        found.append(f"{path.relative_to(ROOT)}:{x.lineno}: {ast.unparse(x)}")
    return found


def _compared_outside(owner: Path, names: set[str]) -> list[str]:
    paths = [p for pkg in (*PACKAGES, "benchmarks") for p in (ROOT / pkg).rglob("*.py") if p != owner]
    return [line for p in paths for line in _names_compared(p, names)]


def test_no_framework_name_is_compared_outside_its_package():
    """A workload, the runner, planning and the analysis ask the framework what it can do
    (``jobs.frameworks.framework.Framework``: its readers, prefetch, checkpoints, labels, its engines) or call
    its engine (``Workload.engine``); none compares its name, and no workload names one: the frameworks it
    runs on are those whose package has an engine for it. Read from the code's syntax tree, not by grep."""
    from jobs.frameworks import FRAMEWORKS

    names = {n for fw in FRAMEWORKS.values() for n in (fw.name, fw.package)}
    package = ROOT / "jobs" / "frameworks"
    inside = f"{package.relative_to(ROOT)}/"
    found = [line for line in _compared_outside(package, names) if not line.startswith(inside)]
    assert not found, "framework names compared:\n" + "\n".join(found)
    named = [
        f"{p.relative_to(ROOT)}:{x.lineno}: {ast.unparse(x)}"
        for p in (ROOT / "jobs" / "workloads").rglob("__init__.py")
        for x in ast.walk(ast.parse(p.read_text()))
        if isinstance(x, ast.Constant) and x.value in names
    ]
    assert not named, "framework names in a workload's declaration:\n" + "\n".join(named)


def test_every_engine_of_a_workload_has_the_functions_of_the_others():
    """A workload calls its engine without asking which framework's it is: every framework's engine module
    of a workload defines each function its workload's package calls on the engine (``self.engine(cfg).run``,
    ``engine = ...engine(cfg)`` then ``engine.check_store``), read from the code's syntax tree and text."""
    import re

    from jobs import workloads
    from jobs.frameworks import FRAMEWORKS

    by_workload: dict[str, list[str]] = {}
    for fw in FRAMEWORKS.values():
        for workload, module in fw.engines.items():
            by_workload.setdefault(workload, []).append(module)
    assert set(by_workload) >= {"microbench", "emulated", "alexnet", "checkpoint", "sharded_checkpoint"}
    for workload, modules in by_workload.items():
        folder = ROOT / Path(*type(workloads.get(workload)).__module__.split("."))
        called = set()
        for p in folder.rglob("*.py"):
            text = p.read_text()
            called |= set(re.findall(r"\.engine\([\w.]*\)\.(\w+)", text))
            for var in re.findall(r"(\w+) = [\w.()]*\.engine\([\w.]*\)\n", text):
                called |= set(re.findall(rf"\b{var}\.(\w+)", text))
        assert called, workload
        for m in modules:
            missing = called - _functions(ROOT / (m.replace(".", "/") + ".py"))
            assert not missing, f"{m} (framework engine of {workload}) lacks {sorted(missing)}"


def _functions(path: Path) -> set[str]:
    """The module-level functions, classes and names ``path`` defines."""
    tree = ast.parse(path.read_text())
    out = set()
    for x in tree.body:
        if isinstance(x, (ast.FunctionDef, ast.ClassDef)):
            out.add(x.name)
        elif isinstance(x, ast.Assign):
            out |= {t.id for t in x.targets if isinstance(t, ast.Name)}
        elif isinstance(x, (ast.ImportFrom, ast.Import)):
            out |= {(a.asname or a.name).split(".")[0] for a in x.names}
    return out


def test_no_storage_kind_is_compared_outside_the_storage_registry():
    """Planning, the estimates, the runner and the workloads ask a tier's back-end what it can do
    (``jobs.storage.backends.backend.Backend``: requests to a server, reached by every node, evicted, its own
    settings); none compares ``storage.kind`` with a kind's name. Read from the code's syntax tree."""
    from jobs.storage.backends import BACKENDS

    package = ROOT / "jobs" / "storage" / "backends"
    inside = f"{package.relative_to(ROOT)}/"
    found = [line for line in _compared_outside(package, set(BACKENDS)) if not line.startswith(inside)]
    assert not found, "storage kinds compared:\n" + "\n".join(found)


def test_no_object_storage_service_is_compared_outside_its_package():
    """The upload, the counted GETs, the cold proof, the clean-up and planning ask a store's service
    (``jobs.storage.objectstore.services.Service``: its requests, its embedded server, what it can do);
    none compares ``storage.service`` with a service's name. Read from the code's syntax tree."""
    from jobs.storage.objectstore.services import SERVICES

    package = ROOT / "jobs" / "storage" / "objectstore" / "services"
    inside = f"{package.relative_to(ROOT)}/"
    found = [line for line in _compared_outside(package, set(SERVICES)) if not line.startswith(inside)]
    assert not found, "object-storage services compared:\n" + "\n".join(found)
