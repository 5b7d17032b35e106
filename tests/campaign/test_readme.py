"""Every command of the README (and of docs/) as a user would type it: each ``python -m campaign`` line is
planned and checked as written (its dry run: every cell composed and validated, nothing run or written),
with the site's folders of the examples standing in as empty folders here; every other ``python -m``
line names a module and options that exist; every ``make`` target and script exists."""

import json
import os
import re
import shlex
import shutil

import pytest

from support.commands import python_env, run_module
from support.files import make_jpegs
from support.paths import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# the site folders the examples name, made here as empty folders (a dataset folder gets images)
SITE = ("/cfs/klemming/scratch/u/user", "/mnt/ssd", "/mnt/optane", "/mnt/hdd", "/var/tmp/iocampaign-shared")
ENV = {"USER": "user", "SLURM_ACCOUNT": "acct", "HOME": "/home/user"}
# a refusal that only says the stand-in folder is smaller than the site's (the 70B checkpoint's 988 GB)
SPACE_ONLY = re.compile(r"ranks write [\d.]+ GB, but \S+ has [\d.]+ GB free")


# a fenced block, from its opening fence (with its language, if any) to its closing one, each on a line of
# its own (indented in a list too): a block of another language (python, yaml, text) is passed over
# whole, and the fences after it still pair up
FENCED = re.compile(r"^[ \t]*```(\w*)[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)
SHELL = ("", "sh", "bash", "console")


def commands(text: str) -> list[str]:
    """The command lines of a markdown text's shell blocks: continuation lines joined, comments dropped."""
    out = []
    for lang, block in FENCED.findall(text):
        if lang not in SHELL:
            continue
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"\s+#\s.*$", "", line.strip())
            if line and not line.startswith("#"):
                out.append(line)
    return out


def _all() -> list[tuple[str, str]]:
    return [(doc.name, c) for doc in DOCS for c in commands(doc.read_text())]


def _campaign_lines() -> list[tuple[str, str]]:
    return [(d, c) for d, c in _all() if re.match(r"python -m campaign(\s|$)", c)]


def test_the_docs_have_commands_to_check():
    assert len(_campaign_lines()) >= 30 and DOCS[0].exists()


@pytest.mark.cells
def _traces(folder) -> dict:
    """The users' traces the examples replay: PyDarshan's sample log with DXT, and a real DFTracer trace."""
    from support.traces import program_trace, sample

    folder.mkdir(parents=True)
    log = folder / "my_job.darshan"
    shutil.copyfile(sample("dxt.darshan"), log)
    return {"/data/my_job.darshan": log, "/data/trace-app.pfw.gz": program_trace(folder)}


def test_every_campaign_command_plans_as_written(tmp_path):
    site = {p: tmp_path / "site" / p.strip("/").replace("/", "_") for p in SITE}
    for d in site.values():
        d.mkdir(parents=True)
    images = tmp_path / "site" / "caltech101"
    files = make_jpegs(images, 64, side=32)
    (tmp_path / "site" / "list.txt").write_text("".join(f"{f}\n" for f in files))
    site.update({"/data/caltech101": images, "/data/list.txt": tmp_path / "site" / "list.txt"})
    site.update(_traces(tmp_path / "site" / "traces"))
    before = sorted(str(p) for p in (tmp_path / "site").rglob("*"))
    lines = _campaign_lines()
    argvs = []
    for _, line in lines:
        for var, value in ENV.items():
            line = line.replace(f"${var}", value)
        args = shlex.split(line)[3:]
        for old, new in sorted(site.items(), key=lambda kv: -len(kv[0])):
            args = [a.replace(old, str(new)) for a in args]
        argvs.append([*args, "platform.dry_run=true"])
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    p = run_module(
        "campaign.subcampaign",  # every line in one process, one after another, as the shell would
        json.dumps(argvs),
        cwd=cwd,
        # the docs' user of their own store has its keys exported, as docs/object-storage.md says
        env=python_env(AWS_ACCESS_KEY_ID="users-own", AWS_SECRET_ACCESS_KEY="users-secret"),
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    results = [json.loads(x) for x in p.stdout.splitlines()]
    assert len(results) == len(lines)
    bad = [
        f"{doc}: {line}\n    -> status {r['status']}: {(r['err'].strip().splitlines() or [''])[-1]}"
        for (doc, line), r in zip(lines, results)
        if r["status"] != 0 and not SPACE_ONLY.search(r["err"])
    ]
    assert not bad, "\n".join(bad)
    for (_, line), r in zip(lines, results):
        if "--cfg" not in line and not SPACE_ONLY.search(r["err"]):
            said = r["out"]
            planned = "(nothing was run or written)" in said or "(nothing was submitted)" in said
            assert planned, (line, said[-500:])
    assert list(cwd.iterdir()) == []  # a dry run writes nothing
    assert sorted(str(p) for p in (tmp_path / "site").rglob("*")) == before


def _modules() -> dict[tuple[str, ...], set[str]]:
    """Each other ``python -m`` module (with its sub-command) the docs use, and the --options they give it."""
    out: dict[tuple[str, ...], set[str]] = {}
    for _, line in _all():
        if not line.startswith("python -m ") or re.match(r"python -m campaign(\s|$)", line):
            continue
        words = line.split()
        key = (
            (words[2], words[3])
            if words[2] == "analysis" and words[3:4] in (["compare"], ["profile"], ["mlperf"], ["trace"])
            else (words[2],)
        )
        out.setdefault(key, set()).update(
            w.strip("[]").split("=")[0] for w in words if w.strip("[").startswith("--")
        )
    return out


@pytest.mark.parametrize("module", sorted(_modules()), ids=" ".join)
def test_every_other_module_and_option_exists(module):
    p = run_module(*module, "--help", cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    missing = [o for o in _modules()[module] if o not in p.stdout]
    assert not missing, f"python -m {' '.join(module)} has no option {missing}"


def test_every_make_target_and_script_exists():
    makefile = (ROOT / "Makefile").read_text()
    for _, line in _all():
        if line.startswith("make "):
            target = line.split()[1]
            assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"make {target}"
        elif line.startswith("tests/"):
            script = ROOT / line.split()[0]
            assert script.exists() and os.access(script, os.X_OK), line
