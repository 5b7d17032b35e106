"""The paper campaign at CI scale, its report opened in a real headless Chromium, the claims, and
campaign-to-campaign comparison."""

import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from analysis.claims import judge as compare
from support.commands import analysis, campaign, campaign_status
from support.skips import CHROMIUM, needs_chromium

pytestmark = pytest.mark.cells  # the paper study (the session's ``paper``) and two campaigns of their own


def _dom(path, tmp_path) -> str:
    assert CHROMIUM, "CI=true but chromium is not installed"
    p = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'chromium'}",
            "--virtual-time-budget=10000",
            "--window-size=1280,900",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def test_paper_campaign_runs_every_grid(paper):
    for grid in ("table1", "fig4_fig5", "fig6_fig8", "fig7", "fig9_fig10"):
        assert (paper / grid / "plan.json").exists(), grid
    cells = pd.read_csv(paper / "cells.csv")
    assert set(cells["status"]) == {"completed"}
    results = pd.read_csv(paper / "results.csv")
    assert set(results["workload"]) == {"baseline", "microbench", "readonly", "alexnet", "checkpoint"}
    for name in (
        "table_i.png",
        "fig4.png",
        "fig5.png",
        "fig6.png",
        "fig7.png",
        "fig8.png",
        "fig9.png",
        "fig10.png",
    ):
        assert (paper / name).stat().st_size > 0, name


@needs_chromium
def test_report_opens_in_a_browser_with_every_figure(paper, tmp_path):
    dom = _dom(paper / "report.html", tmp_path)
    m = re.search(r'id="figure-check"[^>]*>figures loaded: (\d+)/(\d+)([^<]*)<', dom)
    assert m, "the page's figure check did not run"
    assert m[1] == m[2] == "8" and m[3] == "", m[0]
    assert re.search(r'<p id="figure-check" hidden="?"?>', dom), (
        "the check is for the tests, not a line for readers"
    )
    # no table is wider than a 1280-pixel window (the cells table once cut off bound_reason)
    assert re.search(r'id="table-check"[^>]*>tables wider than the page: 0<', dom), re.findall(
        r'id="table-check"[^>]*>[^<]*<', dom
    )
    for text in (
        "Comparison with the paper",
        "Table I",
        "Machine and software",
        "hdd_speedup_2",
        "burst_buffer_speedup",
        "What each tier delivered",
        "The paper's claims",
    ):
        assert text in dom, text
    # the claims it could not measure (no HDD, Lustre or burst buffer here) are folded below the measured ones
    claims = pd.read_csv(paper / "claims.csv")
    n = int((claims["status"] == "not measured").sum())
    folded = re.search(
        r"<details><summary>(\d+) claims not measured by this campaign[^<]*</summary>(.*?)</details>",
        dom,
        re.S,
    )
    assert (
        folded and int(folded[1]) == n and folded[2].count("<tr>") == n + 1 and "hdd_speedup_2" in folded[2]
    )
    table = dom[dom.index("Comparison with the paper") : folded.start()]
    assert "not measured" not in table.split("</p>", 1)[1] and "prefetch" in table


def test_every_claim_has_a_verdict(paper):
    claims = pd.read_csv(paper / "claims.csv")
    assert len(claims) == len(compare.load_claims())
    assert set(claims["status"]) <= set(compare.STATUSES)
    measured = claims.set_index("id")
    # local/tmpfs are no HDD or Lustre: those claims are not measured, never guessed
    assert measured.loc["hdd_speedup_2", "status"] == "not measured"
    assert measured.loc["lustre_speedup_8", "status"] == "not measured"
    # local against tmpfs is no HDD against an Optane: the burst buffer's claims are not measured
    assert measured.loc["burst_buffer_speedup", "status"] == "not measured"
    # AlexNet was measured, but on the CPU: the prefetch claim (about an accelerator) says so, with no number
    if "GPU" not in " ".join(map(str, pd.read_csv(paper / "results.csv")["device"].dropna())):
        assert measured.loc["prefetch_hides_io", "status"] == "not comparable"
        assert measured.loc["prefetch_hides_io", "measured_from"].startswith("trained on /CPU:0")
    else:
        assert measured.loc["prefetch_hides_io", "status"] in ("reproduced", "not reproduced")
    # the report's verdict line ends with what the runs stood on, where it mattered (analysis.standing)
    import html

    from analysis import standing

    line = html.unescape(
        re.search(r'<p class="verdicts">([^<]*)</p>', (paper / "report.html").read_text())[1]
    )
    said = standing.sentence(paper)
    assert line.endswith(said) if said else "other processes held" not in line, line


def test_compare_two_campaigns(paper, tmp_path):
    p = analysis(
        "compare",
        str(paper / "fig4_fig5"),
        str(paper / "fig4_fig5"),
        "--csv",
        str(tmp_path / "c.csv"),
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    table = pd.read_csv(tmp_path / "c.csv")
    assert "images_per_s_median_ratio" in table.columns and (table["images_per_s_median_ratio"] == 1.0).all()
    p = analysis("compare", str(paper / "fig4_fig5"), str(tmp_path / "nope"), cwd=tmp_path)
    assert p.returncode == 2 and "is not a folder" in p.stderr


def test_compare_pairs_cells_only_when_every_setting_is_equal(tmp_path):
    """Cells that differ in a setting outside results.csv's columns (dataset.num_images) never pair: the
    key that varies is shown, unmatched cells are listed and counted, not multiplied into false ratios."""
    common = [
        "workload=readonly",
        "batch_size=8",
        "repeats=1",
        "warmup=0",
        "threads=1",
        f"storage.root={tmp_path}",
    ]
    for name, sizes in (("A", "16,32"), ("B", "32,48")):
        p = campaign(
            "-m", *common, f"dataset.num_images={sizes}", f"hydra.sweep.dir={tmp_path / name}", cwd=tmp_path
        )
        assert p.returncode == 0, p.stderr[-2000:]
        # progress, with the time left
        assert "cell 1/2 (#0, ≈ " in p.stdout and "cell 2/2 (#1, about " in p.stdout
    p = analysis(
        "compare", str(tmp_path / "A"), str(tmp_path / "B"), "--csv", str(tmp_path / "c.csv"), cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
    assert "1 cell paired; told apart by dataset.num_images" in p.stdout
    assert "1 cell of A and 1 of B have no counterpart: A's 0 (dataset.num_images=16); B's 1 (" in p.stderr
    assert max(len(line) for line in p.stdout.splitlines()) <= 100
    t = pd.read_csv(tmp_path / "c.csv").set_index("dataset.num_images")
    assert sorted(t.index) == [16.0, 32.0, 48.0]
    assert (
        t.loc[32, "paired"] == "both"
        and t.loc[16, "paired"] == "only in A"
        and t.loc[48, "paired"] == "only in B"
    )
    assert pd.notna(t.loc[32, "images_per_s_median_ratio"]) and pd.isna(
        t.loc[16, "images_per_s_median_ratio"]
    )
    # leaving out the setting that tells A's own cells apart cannot pair them: each is named, and why
    p = analysis(
        "compare", str(tmp_path / "A"), str(tmp_path / "B"), "--ignore", "dataset.num_images", cwd=tmp_path
    )
    assert p.returncode == 1 and p.stdout.startswith("0 cells paired\n")
    assert re.search(r"^ +0 alike in A .*\n +1 alike in A ", p.stdout, re.M), p.stdout
    assert p.stderr.splitlines() == [
        "analysis: 2 cells of A cannot be paired, each alike another of A: 0 and 1 (they differ only in "
        "dataset.num_images, which --ignore dataset.num_images leaves out)",
        "analysis: 2 cells of B cannot be paired, each alike another of B: 0 and 1 (they differ only in "
        "dataset.num_images, which --ignore dataset.num_images leaves out)",
        "analysis: 0 cells paired: the lines above say why",
    ]


def test_status_of_a_paper_study_lists_every_grid(paper, tmp_path):
    p = campaign_status(str(paper), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    grids = [line[3:] for line in p.stdout.splitlines() if line.startswith("== ")]
    assert grids == ["table1", "fig4_fig5", "fig6_fig8", "fig7", "fig9_fig10"]
    assert "missing" not in p.stdout and "failed" not in p.stdout


def test_the_report_lists_cells_in_the_order_the_study_ran_them(paper):
    page = (paper / "report.html").read_text()
    firsts = [
        page.index(f"<td>{grid}/0</td>")
        for grid in ("table1", "fig4_fig5", "fig6_fig8", "fig7", "fig9_fig10")
    ]
    assert firsts == sorted(firsts)


def test_machine_and_software_lists_every_cells_versions(paper, tmp_path):
    """The first cell's record is TensorFlow's (no torch): the versions are every completed cell's."""
    import json

    from analysis.report.page import _provenance

    first, second = sorted(paper.rglob("record.json"))[:2]
    for name, src in (("a", first), ("b", second)):
        (tmp_path / name).mkdir()
        record = json.loads(src.read_text())
        record["provenance"]["versions"]["torch"] = None if name == "a" else "2.9.9"
        (tmp_path / name / "record.json").write_text(json.dumps(record))
    versions = _provenance(tmp_path).versions
    assert versions["torch"] == "2.9.9" and versions["python"]


def test_the_first_table_gives_each_object_store_reader_its_own_row():
    """``storage.reader=native,fuse``: one store read two ways is two rows (it was one "s3: ..." line)."""
    import pandas as pd

    from analysis.report import answers

    s = pd.DataFrame(
        {
            "storage": ["local", "local", "s3", "s3", "s3", "s3"],
            "reader": [None, None, "native", "native", "fuse", "fuse"],
            "workload": ["microbench"] * 6,
            "threads": [1, 2] * 3,
            "images_per_s_median": [200.0, 380.0, 150.0, 250.0, 153.0, 278.0],
            "bound": ["cpu", "cpu", "latency", "cpu", "latency", "cpu"],
        }
    )
    t = answers.table(s)
    assert list(t["tier"]) == ["local", "s3 · fuse", "s3 · native"]
    assert list(t["images/s"]) == ["200 → 380", "153 → 278", "150 → 250"]
    assert list(t["readers"]) == ["1 → 2 threads"] * 3 and list(t["×"]) == ["1.90", "1.82", "1.67"]
    assert t.loc[1, "what limited it"] == "latency-bound at 1 thread, cpu-bound at 2 threads"


def test_each_tier_answer_says_what_its_own_cells_stood_on():
    """Issue 59: the tier that waited for another campaign's lock says so in its own row (and sentence),
    the tier whose runs had the machine to themselves says nothing, and with no row that mattered there is
    no column at all."""
    from analysis.report import answers
    from analysis.tables.tidy import Collected

    s = pd.DataFrame(
        {
            "cell_dir": ["0", "1", "2", "3"],
            "storage": ["local", "local", "tmpfs", "tmpfs"],
            "workload": ["microbench"] * 4,
            "threads": [1, 2] * 2,
            "images_per_s_median": [200.0, 380.0, 900.0, 1500.0],
            "bound": ["storage", "storage", "cpu", "cpu"],
        }
    )
    waits = {"0": 40.0, "1": 25.0, "2": 0.0, "3": 0.0}
    cells = [{"cell_dir": d, "device_lock_wait_s": w, "wall_s": w + 20.0} for d, w in waits.items()]
    rows = [{"cell_dir": d, "other_cpu_share": 0.02, "run_wall_s": 5.0} for d in waits]
    t = answers.table(s, Collected(folder=Path("."), rows=rows, cells=cells))
    assert list(t["tier"]) == ["local", "tmpfs"]
    waited = "waited 65 s (62% of the cells' time) for other campaigns on the same devices"
    assert t.loc[0, "stood on"] == f"{waited} (not in the measured times)"
    assert t.loc[1, "stood on"] == ""
    said = answers.per_tier(s, Collected(folder=Path("."), rows=rows, cells=cells))
    assert said[0].endswith(f"; {waited} (not in the measured times).")
    assert (
        said[1]
        == "tmpfs, microbench: 900 images/s at 1 thread, 1,500 at 2 (1.67×); cpu-bound at 1–2 threads."
    )
    busy = [{**r, "other_cpu_share": 0.6} for r in rows]
    t = answers.table(
        s, Collected(folder=Path("."), rows=busy, cells=[{**c, "device_lock_wait_s": 0.0} for c in cells])
    )
    assert t["stood on"].str.startswith("other processes held 60% of the machine's cores").all()
    quiet = answers.table(
        s, Collected(folder=Path("."), rows=rows, cells=[{**c, "device_lock_wait_s": 0.0} for c in cells])
    )
    assert "stood on" not in quiet and list(quiet.columns) == list(answers.table(s).columns)
