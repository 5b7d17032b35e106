"""What every figure shares: saving as PNG and SVG, reading a run's I/O trace, and the text a bar gets
for what limited its cell."""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from pathlib import Path

# what the figures saved within ``footnote()`` say under them: the campaign's cells they cannot show
_FOOTNOTE: contextvars.ContextVar[str | None] = contextvars.ContextVar("footnote", default=None)

# every bar says what limited its cell: a bar without text would leave the reader to guess which bound it is
MARKED = {
    "cpu": "CPU-bound",
    "cache": "from cache",
    "mixed": "mixed",
    "storage": "storage-bound",
    "latency": "latency-bound",
}


@dataclass
class BarText:
    """A bar's text (what limited its cell) and what decides where it goes."""

    text: object  # matplotlib Text, rotated 90°
    bar: object  # its bar (Rectangle)
    colour: str  # inside the bar (contrast with its grey)
    whisker: float  # the top of its whisker, data units
    over: list = field(default_factory=list)  # texts written over the bar (MB/s, GET latency)


def inside_or_above(fig, ax, labels: list[BarText]) -> None:
    """Keep every bar's text readable: inside its bar, left of the whisker, where it fits; else above the
    bar, over its whisker and what is written there, in black; then the y limit raised until every text is
    inside the axes. A short bar (a slow tier beside tmpfs) would otherwise cut its text at its top. Call
    after ``tight_layout``: it measures the texts as drawn."""
    from matplotlib.transforms import offset_copy

    beside = offset_copy(ax.transData, fig=fig, x=-1.5, units="points")  # just left of the whisker's line
    # texts and bars are measured with the canvas's renderer, without drawing the figure (a draw per
    # measure was a fifth of a campaign's analysis); the limits autoscaling left pending, settled first
    renderer = fig.canvas.get_renderer()
    for _ in range(4):
        ax.viewLim  # noqa: B018 - settles the axes' pending autoscaling, which the transforms read
        for lab in labels:
            t, bar = lab.text, lab.bar
            centre = bar.get_x() + bar.get_width() / 2
            length = t.get_window_extent(renderer).height  # rotated 90°: its length is its height
            if bar.get_window_extent(renderer).height * 0.96 - length >= 2:
                t.set(
                    transform=beside, ha="right", color=lab.colour, position=(centre, bar.get_height() * 0.04)
                )
                continue
            top = max(
                [ax.transData.transform((centre, lab.whisker))[1]]
                + [o.get_window_extent(renderer).y1 for o in lab.over]
            )
            y = ax.transData.inverted().transform((0, top + 3))[1]
            t.set(transform=ax.transData, ha="center", color="black", position=(centre, y))
        box = ax.get_window_extent(renderer)
        highest = max((lab.text.get_window_extent(renderer).y1 for lab in labels), default=box.y0)
        if highest <= box.y1 - 2:
            return
        low, high = ax.get_ylim()
        ax.set_ylim(low, high * max(1.05, (highest - box.y0 + 4) / box.height))


@contextlib.contextmanager
def footnote(text: str | None):
    """Every figure saved in this block carries ``text`` under it (None: nothing): a campaign's failed or
    missing cells, which no figure can draw, are named on each instead of leaving a silent gap."""
    token = _FOOTNOTE.set(text)
    try:
        yield
    finally:
        _FOOTNOTE.reset(token)


def save(fig, stem: Path) -> list[Path]:
    """Write ``fig`` as ``<stem>.png`` and ``<stem>.svg`` and close it (with the ``footnote`` of the block
    it is saved in, below everything else)."""
    import matplotlib.pyplot as plt

    from analysis import outputs

    note, extra = _FOOTNOTE.get(), {}
    if note:
        import textwrap

        width = int(fig.get_figwidth() * 72 / (7 * 0.55))  # characters of 7 pt text across the figure
        lines = textwrap.fill(note, width=width, break_long_words=False, break_on_hyphens=False)
        fig.text(0.01, -0.01, lines, ha="left", va="top", fontsize=7, color="#b00020")
        extra = {"bbox_inches": "tight", "pad_inches": 0.1}  # the saved page grows to hold it
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        p = stem.with_suffix(f".{ext}")
        with outputs.create(p, binary=True) as f:
            fig.savefig(f, format=ext, dpi=150, **extra)
        paths.append(p)
    plt.close(fig)
    return paths


def read_trace(folder: Path, rel: str):
    """(samples, marks) of a trace CSV written by jobs.observe.trace: one row per interval, and
    event -> time."""
    import pandas as pd

    t = pd.read_csv(folder / rel)
    is_event = t["event"].notna() & (t["event"] != "")
    samples = t[~is_event].astype({"t_s": float, "dt_s": float, "read_mb_s": float, "write_mb_s": float})
    marks = dict(zip(t.loc[is_event, "event"], t.loc[is_event, "t_s"].astype(float)))
    return samples, marks


def step_series(samples, column: str, t0: float) -> tuple[list[float], list[float]]:
    """x, y for a step="pre" plot: value i covers (x[i-1], x[i]]; the first interval starts where it began."""
    x = [float(samples["t_s"].iloc[0] - samples["dt_s"].iloc[0]) - t0, *(samples["t_s"] - t0)]
    y = [float(samples[column].iloc[0]), *samples[column]]
    return x, y
