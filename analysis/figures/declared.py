"""Every figure the workloads declare (``jobs.workloads.Figure``), drawn from the rows of their kind."""

from __future__ import annotations

from pathlib import Path


def rows_of(results, kind: str, figure):
    """The results rows a workload's figure is drawn from: its kind, then each (column, value) of
    ``where``."""
    df = results[results["kind"] == kind]
    for column, value in figure.where:
        if column not in df:
            return df.iloc[0:0]
        df = df[
            df[column].astype(object).where(df[column].notna(), "").astype(str) == str(value)
        ]  # a CSV's "" reads as NaN
    return df


def render_all(results, folder: Path) -> list[Path]:
    """Every figure the registered workloads declare that the results can draw, into ``folder``."""
    import importlib

    from jobs import workloads

    out: list[Path] = []
    for kind, figure in workloads.figures():
        rows = rows_of(results, kind, figure)
        if rows.empty:
            continue
        module, function = figure.draw.split(":")
        out += getattr(importlib.import_module(module), function)(rows, folder, figure)
    return out
