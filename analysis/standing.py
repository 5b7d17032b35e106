"""What an answer stands on, in the words every answer line uses: the time its cells waited for other
campaigns' locks on their devices, and the share of the machine's CPU that other processes took while its
runs ran. Both are measured by every run (``device_lock_wait_s``, ``other_cpu_share``); an answer says
them only where they mattered (``LOCK_WAIT_S``, ``LOCK_WAIT_SHARE``, ``OTHER_CPU_SHARE``), so a campaign on
a quiet machine says nothing extra.

The campaign's last line, the capacity search's answers, the paper study's verdict line and
``analysis compare`` all call ``suffix`` (or ``sentence``): one wording, one set of thresholds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

LOCK_WAIT_S = 10.0  # a lock wait this long (summed over the cells) is said, whatever the campaign's time
LOCK_WAIT_SHARE = 0.05  # ... and so is a shorter one that is this share of the cells' time
# other processes holding this share of the machine's cores (time-weighted over the measured runs) leave a
# CPU-hungry pipeline short of cores: its rate is the client's, not the storage's
OTHER_CPU_SHARE = 0.25


@dataclass(frozen=True)
class Standing:
    """What a set of cells stood on."""

    lock_wait_s: float = 0.0  # summed over the cells, s
    cells_s: float = 0.0  # the cells' own time, start to end, summed (their lock waits included), s
    other_cpu: float | None = None  # share of the machine's CPU other processes took, over the runs
    # the cells whose own runs other processes held that share of the cores in, with the largest share:
    # the campaign's mean can hide one busy cell
    busy_cells: tuple[str, ...] = ()
    busiest: float | None = None

    @property
    def waited(self) -> bool:
        """The lock wait mattered: long, or a noticeable part of the cells' time."""
        return self.lock_wait_s >= LOCK_WAIT_S or (
            self.lock_wait_s > 0 and self.lock_wait_s >= LOCK_WAIT_SHARE * self.cells_s
        )

    @property
    def busy(self) -> bool:
        """Other processes took enough of the CPU to limit the runs."""
        return self.other_cpu is not None and self.other_cpu >= OTHER_CPU_SHARE

    def phrase(self) -> str:
        """The words, "" when neither mattered."""
        parts = []
        if self.waited:
            of = f" ({self.lock_wait_s / self.cells_s:.0%} of the cells' time)" if self.cells_s else ""
            parts.append(f"waited {self.lock_wait_s:.0f} s{of} for other campaigns on the same devices")
        if self.busy:
            parts.append(
                f"other processes held {self.other_cpu:.0%} of the machine's cores during the runs: "
                "this is this client's limit, not the storage's"
            )
        elif self.busy_cells:
            cells = ", ".join(self.busy_cells)
            parts.append(
                f"other processes held up to {self.busiest:.0%} of the machine's cores during the runs of "
                f"cell{'s' if len(self.busy_cells) > 1 else ''} {cells}: "
                f"{'their rates are' if len(self.busy_cells) > 1 else 'its rate is'} this client's limit, "
                "not the storage's"
            )
        elif parts:
            parts[-1] += " (not in the measured times)"
        return "; ".join(parts)


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if f != f else f


def of_collected(c, cell_dirs: set[str] | None = None) -> Standing:
    """What the cells of ``c`` (an ``analysis.tables.tidy.Collected``; only those in ``cell_dirs`` where
    given) stood on: their lock waits and time summed, other processes' CPU share weighted by each
    measured run's wall time."""
    cells = [x for x in c.cells if cell_dirs is None or x["cell_dir"] in cell_dirs]
    waited = sum(_num(x.get("device_lock_wait_s")) or 0.0 for x in cells)
    took = sum(_num(x.get("wall_s")) or 0.0 for x in cells)
    shares = [
        (str(r.get("cell_dir")), share, _num(r.get("run_wall_s")) or 1.0)
        for r in c.rows
        if (cell_dirs is None or r.get("cell_dir") in cell_dirs)
        and (share := _num(r.get("other_cpu_share"))) is not None
    ]
    if not shares:
        return Standing(waited, took)
    by_cell: dict[str, list[tuple[float, float]]] = {}
    for d, share, w in shares:  # grouped once: a campaign of thousands of runs is read in one pass
        by_cell.setdefault(d, []).append((share, w))
    busy = {d: v for d, pairs in by_cell.items() if (v := _weighted(pairs)) >= OTHER_CPU_SHARE}
    order = sorted(busy, key=lambda d: (not d.isdigit(), int(d) if d.isdigit() else 0, d))
    return Standing(
        waited,
        took,
        _weighted([(s, w) for _, s, w in shares]),
        tuple(order),
        max(busy.values(), default=None),
    )


def _weighted(pairs: list[tuple[float, float]]) -> float:
    """The mean of (share, weight) pairs, weighted."""
    return sum(s * w for s, w in pairs) / sum(w for _, w in pairs)


def of_folder(folder: str | Path) -> Standing:
    """What the cells under ``folder`` (a campaign, a study, a capacity search's tier) stood on."""
    from analysis.tables import tidy

    return of_collected(tidy.collect(folder))


def _of(where) -> Standing:
    return of_collected(where) if hasattr(where, "cells") else of_folder(where)


def suffix(where) -> str:
    """``"; <phrase>"`` to end an answer line with, or "" when nothing mattered; ``where`` is a folder or
    a ``Collected``."""
    words = _of(where).phrase()
    return f"; {words}" if words else ""


def sentence(where) -> str:
    """The phrase as a sentence of its own (" Waited ….") to end a line of sentences with, or ""."""
    words = _of(where).phrase()
    return f" {words[0].upper()}{words[1:]}." if words else ""
