"""``python -m analysis compare`` on real campaigns (issue 59): two paper studies pair grid by grid, although
two of their grids hold the same cells; a cell that cannot be paired is named with its grid and settings;
the printed tables fit 100 columns, and ``--csv`` keeps every setting."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from support.commands import analysis
from support.golden import same_as_golden

pytestmark = pytest.mark.cells  # the session's paper study (``paper``)

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture(scope="module")
def studies(paper, tmp_path_factory) -> tuple[Path, Path]:
    """Two paper studies: copies of the session's one (a real run of the same command; a second run would
    cost minutes and pair the same cells), each with its fig6_fig8 grid copied as a sixth grid, so that
    two grids hold the same cells, as Fig. 7's batch-64 cells are Figs. 6 and 8's 8-thread cells at the
    workstation scale (at the CI scale Fig. 7 has no batch 64)."""
    base = tmp_path_factory.mktemp("compare")
    for name in ("A", "B"):
        shutil.copytree(paper, base / name, symlinks=True)
        shutil.copytree(base / name / "fig6_fig8", base / name / "fig6_fig8_again", symlinks=True)
    return base / "A", base / "B"


def _masked(text: str) -> str:
    """The printed tables without what each run measures: every measured number (they have a decimal
    point or a thousands comma; settings are whole numbers) as ``#``, runs of spaces as one."""
    text = re.sub(r"\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+", "#", text)
    return "\n".join(re.sub(r" +", " ", line).strip() for line in text.splitlines()) + "\n"


def _without_standing(text: str, a: Path, b: Path) -> str:
    """The printed tables without the lines that say what each side stood on, after checking them: they
    are there exactly when that side's own records crossed the thresholds (analysis.standing), so the
    tables' golden holds on a busy machine too."""
    from analysis import standing

    for side, folder in (("A", a), ("B", b)):
        said = re.search(rf"^{side}: (.*(?:\n   .*)*)\n", text, re.M)
        words = standing.of_folder(folder).phrase()
        assert (said is not None) == bool(words), text[-2000:]
        if said:
            assert re.sub(r"\s+", " ", said.group(1)) == words
            text = text.replace(said.group(0), "")
    return text


def test_two_paper_studies_pair_grid_by_grid_in_tables_that_fit_100_columns(studies, tmp_path):
    """Before: "16 cells of A are the same cell once paths is left out: they cannot be paired (leave out
    less with --ignore)", exit 2, nothing compared; and tables 150 to 918 characters wide."""
    a, b = studies
    p = analysis("compare", str(a), str(b), "--csv", str(tmp_path / "all.csv"), cwd=tmp_path)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "33 cells paired within each of 6 grids"  # --csv given: no hint where every setting is
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    assert "NaN" not in p.stdout and "null" not in p.stdout
    for grid, keys in (
        ("fig4_fig5", "workload, storage, threads"),
        ("fig6_fig8", "storage, threads, prefetch"),
        ("fig6_fig8_again", "storage, threads, prefetch"),
        ("fig7", "batch_size, prefetch"),
        ("fig9_fig10", "checkpoint.target"),
    ):
        assert re.search(rf"^== {grid}: \d+ cells paired; told apart by {keys}$", p.stdout, re.M), grid
    same_as_golden(GOLDEN / "compare_paper.txt", _masked(_without_standing(p.stdout, a, b)))
    # the CSV keeps the whole table: every setting that differs anywhere, each cell's folder, every metric
    every = pd.read_csv(tmp_path / "all.csv")
    assert {"grid", "storage.kind", "workload.pipeline", "cell_a", "cell_b", "cpu_share_median_a"} <= set(
        every.columns
    )
    assert set(every["paired"]) == {"both"} and (every["cell_a"] == every["cell_b"]).all()
    assert (every["images_per_s_median_ratio"].dropna() == 1.0).all()


def test_cells_that_cannot_be_paired_are_named_with_their_grid_and_settings(studies, tmp_path):
    """A study beside one of its own grids: that grid's cells pair; the study's other cells are named by
    their folder (grid) and settings; and the two grids' same cells, which no grid tells apart here, are
    named as alike, never paired by chance. No option is put in the user's mouth."""
    a, b = studies
    p = analysis("compare", str(a), str(b / "fig4_fig5"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("8 cells paired; told apart by workload, storage, threads, ")
    assert max(map(len, p.stdout.splitlines())) <= 100
    only, alike = p.stderr.splitlines()
    assert re.match(
        r"analysis: \d+ cells of A and 0 of B have no counterpart: A's fig7/0 \(workload=alexnet "
        r"storage=tmpfs threads=2 batch_size=16 prefetch=0[^)]*\); A's fig7/1 ",
        only,
    ), only
    assert only.endswith(
        "(cells pair only when every setting is equal; to leave a setting out of the pairing, "
        "give --ignore KEY)"
    )
    assert alike == (
        "analysis: 16 cells of A cannot be paired, each alike another of A: fig6_fig8/0 and "
        "fig6_fig8_again/0; fig6_fig8/1 and fig6_fig8_again/1; fig6_fig8/2 and fig6_fig8_again/2; "
        "fig6_fig8/3 and fig6_fig8_again/3; and 4 more alike (every setting equal; in two grids, and B has "
        "no grids to pair them by)"
    )
    rows = _without_standing(p.stdout, a, b / "fig4_fig5").splitlines()[3:]
    assert sum("alike in A" in r for r in rows) == 16 and sum(r.endswith("1.00") for r in rows) == 8
