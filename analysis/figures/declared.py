"""Every figure the records' workloads declare (``analysis.declarations``), drawn from the rows of their
kind."""

from __future__ import annotations

from pathlib import Path


def rows_of(results, kind: str, figure):
    """The results rows a workload's figure is drawn from: its kind, then each (column, value) of
    ``where``."""
    df = results[results["kind"] == kind]
    for column, value in figure.where:
        if column not in df:
            return df.iloc[0:0]
        # a CSV's "" reads as NaN
        df = df[df[column].astype(object).where(df[column].notna(), "").astype(str) == str(value)]
    return df


def render_all(results, folder: Path, declared) -> list[Path]:
    """Every figure ``declared`` (``analysis.declarations.Declared``) that the results can draw, into
    ``folder``; a figure whose drawing function cannot be imported is left out with one line on stderr."""
    import sys

    from analysis import declarations
    from jobs import interrupts

    out: list[Path] = []
    for kind, figure in declared.ordered():
        rows = rows_of(results, kind, figure)
        if rows.empty:
            continue
        try:
            function = declarations.draw(figure)
        except (ImportError, AttributeError) as e:
            print(f"iocampaign: {figure.key} ({kind!r}) is not drawn: {figure.draw}: {e}", file=sys.stderr)
            continue
        try:
            out += function(rows, folder, figure)
        except Exception as e:  # noqa: BLE001 - a workload's own drawing code, or a title matplotlib refuses
            interrupts.surface(e)  # the error a signal left (Ctrl-C while it drew) ends the analysis
            why = f"{type(e).__name__}: {e}"
            print(f"iocampaign: {figure.key} ({kind!r}) is not drawn: {why}", file=sys.stderr)
    return out
