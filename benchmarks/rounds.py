"""Rounds of a benchmark that compares sides (the campaign's loop against a bare one, a framework against
fio, a relayed server against a direct one): the order of the sides alternates from round to round, the
rounds repeat until the ratio's spread is stated, and every ratio is printed beside what it stands on.

On a shared machine one pass of a side can lose half its rate to other processes, so a ratio of a few
passes taken A A A then B B B says which side ran while the machine was quiet. Alternating (round r
starts with side r mod n) spreads the load over both sides; seven rounds give an interval of the
median; and the machine's load and each side's CPU per item say whether a low ratio is the side's cost
or the CPU the side could not get.

The interval is the distribution-free confidence interval of the median of the per-round ratios (order
statistics: ``median_interval``): with 8 rounds or fewer it is their min-max, with more it narrows. Its
coverage is printed with it (98% at 7 rounds).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

ROUNDS = 7  # rounds by default: their min-max is a 98% interval of the median
WITHIN = 0.05  # --max-rounds goes on until the interval is within +-5% of the median


@dataclass(frozen=True)
class Pass:
    """One side's measured pass in one round, with what it stood on."""

    key: str  # the benchmark's row (workers=2, files/4 readers...)
    round: int  # 0-based
    side: str
    rate: float  # the figure the ratio divides (images/s, MB/s, GETs/s)
    items: float  # what the pass handled (images, MB, GETs): CPU per item divides by it
    cpu_s: float | None  # CPU the side spent: this process, its waited-for children, its own helpers
    other_share: float | None  # share of the machine's CPU that other processes took during the pass
    load1: float  # the machine's 1-min load average at the pass's start


@dataclass(frozen=True)
class Summary:
    """Side ``a`` against side ``b`` over the rounds of one row."""

    a: str
    b: str
    rate_a: float  # median of a's passes
    rate_b: float
    ratio: float  # median of the per-round ratios a / b
    lo: float  # the median's interval (median_interval)
    hi: float
    coverage: float  # of that interval, 0-1
    rounds: int
    cpu_a: float | None  # CPU s per item, median of a's passes
    cpu_b: float | None
    other_share: float | None  # median over both sides' passes
    load1: float  # median over both sides' passes

    @property
    def within(self) -> bool:
        """Whether the interval is within +-WITHIN of the median."""
        return _within(self.lo, self.hi, self.ratio, WITHIN)


def add_arguments(p: argparse.ArgumentParser, *names: str, default: int = ROUNDS, help_name="rounds") -> None:
    """The shared options: ``names`` for the rounds (a benchmark's own spelling first: --rounds,
    --repeats, --passes), --max-rounds, --within and --log."""
    p.add_argument(
        *names,
        dest="rounds",
        type=int,
        default=default,
        metavar="N",
        help=f"at least this many {help_name}, the sides' order alternating (default {default})",
    )
    p.add_argument(
        "--max-rounds",
        type=int,
        default=None,
        metavar="N",
        help="go on past them, up to this many, until every ratio's interval is within --within",
    )
    p.add_argument(
        "--within",
        type=float,
        default=WITHIN,
        metavar="SHARE",
        help=f"the interval's half-width, a share of the median (default {WITHIN})",
    )
    p.add_argument(
        "--log", type=Path, default=None, metavar="CSV", help="every pass, in the order run, appended to CSV"
    )


def order(sides: Sequence[str], r: int) -> list[str]:
    """The sides in round ``r``'s order: round r starts with side r mod n (A B, B A, A B... for two)."""
    k = r % len(sides)
    return [*sides[k:], *sides[:k]]


def median_interval(xs: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(low, high, coverage) of the distribution-free interval of the median of ``xs``: the k-th lowest
    and k-th highest values, k the largest whose coverage 1 - 2 P(Binomial(n, 1/2) < k) is at least
    ``level`` (k = 1, the min-max, when none is: fewer than 6 values)."""
    x, n = sorted(xs), len(xs)

    def coverage(k: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    return x[k - 1], x[n - k], max(0.0, coverage(k))


def _within(lo: float, hi: float, mid: float, share: float) -> bool:
    return mid > 0 and lo >= mid * (1 - share) and hi <= mid * (1 + share)


class Watch:
    """The counters around one pass, from its creation to ``done``: this process's CPU (its waited-for
    children's included), the machine's busy ticks (``jobs.observe.usage``), the load average."""

    def __init__(self):
        from jobs.observe import usage

        self.load1 = os.getloadavg()[0]
        self.before = usage.snapshot(None)

    def done(self, key: str, r: int, side: str, rate: float, items: float, own_extra_s: float = 0.0) -> Pass:
        """The pass of ``side`` in round ``r`` of row ``key``; ``own_extra_s``: CPU seconds of a process the
        side owns but does not wait for (a server), its own and not another's."""
        from jobs.observe import usage

        after = usage.snapshot(None)
        other = usage.other_share(self.before, after, own_extra_s)
        return Pass(
            key, r, side, rate, items, after.cpu_s - self.before.cpu_s + own_extra_s, other, self.load1
        )


def run(
    sides: Sequence[str],
    measure: Callable[[int, str], Pass],
    pairs: Sequence[tuple[str, str]],
    args: argparse.Namespace,
    derive: Callable[[list[Pass]], list[Pass]] = list,
) -> list[Pass]:
    """Every pass of one row, in the order run: ``args.rounds`` rounds of each side's pass
    (``measure(round, side)``), the order alternating, then more, up to ``args.max_rounds``, while a ratio
    of ``pairs`` has an interval wider than ``args.within`` (sides of a pair may be ``derive``'s: the
    passes with sides made of the measured ones added). Appends each to ``args.log`` when given."""
    if args.rounds < 1:
        raise ValueError(f"--rounds={args.rounds}: give at least 1")
    most = max(args.rounds, args.max_rounds or 0)
    passes: list[Pass] = []
    for r in range(most):
        for side in order(sides, r):
            passes.append(measure(r, side))
            if args.log is not None:  # as it comes: a benchmark stopped midway keeps what it measured
                _append_log(args.log, passes[-1:])
        if r + 1 >= args.rounds and all(_settled(derive(passes), a, b, args.within) for a, b in pairs):
            break
    return passes


def _settled(passes: Sequence[Pass], a: str, b: str, share: float) -> bool:
    s = summarize(passes, a, b)
    return _within(s.lo, s.hi, s.ratio, share)


def summarize(passes: Sequence[Pass], a: str, b: str) -> Summary:
    """Side ``a`` against side ``b`` over ``passes`` (one row's): medians, the per-round ratios' median
    and interval, CPU per item, the others' share and the load."""
    by = {(p.round, p.side): p for p in passes}
    rounds = sorted({p.round for p in passes if (p.round, a) in by and (p.round, b) in by})
    ratios = [by[r, a].rate / by[r, b].rate for r in rounds]
    lo, hi, cov = median_interval(ratios)
    mine = [p for p in passes if p.side in (a, b)]
    others = [p.other_share for p in mine if p.other_share is not None]
    return Summary(
        a,
        b,
        statistics.median(by[r, a].rate for r in rounds),
        statistics.median(by[r, b].rate for r in rounds),
        statistics.median(ratios),
        lo,
        hi,
        cov,
        len(rounds),
        _per_item(passes, a),
        _per_item(passes, b),
        statistics.median(others) if others else None,
        statistics.median(p.load1 for p in mine),
    )


def _per_item(passes: Sequence[Pass], side: str) -> float | None:
    got = [p.cpu_s / p.items for p in passes if p.side == side and p.cpu_s is not None and p.items > 0]
    return statistics.median(got) if got else None


# the columns every ratio is printed with: its interval, the rounds, the load and each side's CPU per item
HEADER = f"{'(interval)':>11} {'cover':>5} {'rounds':>6} {'load':>4} {'others':>6} {'CPU:A':>6} {'CPU:B':>6}"


def columns(s: Summary, unit: float = 1e3) -> str:
    """``HEADER``'s columns for ``s``; CPU per item in ms (``unit``: 1e3) or what ``unit`` scales to."""

    def cpu(v: float | None) -> str:
        return "-" if v is None else f"{v * unit:.3g}"

    other = "-" if s.other_share is None else f"{s.other_share:.0%}"
    return (
        f"{f'({s.lo:.2f}-{s.hi:.2f})':>11} {s.coverage:>5.0%} {s.rounds:>6} {s.load1:>4.1f} {other:>6} "
        f"{cpu(s.cpu_a):>6} {cpu(s.cpu_b):>6}"
    )


def legend(cpu_unit: str, a: str = "A", b: str = "B") -> str:
    """The line under a table that says what its shared columns are."""
    return (
        "interval: of the median of the per-round ratios (order statistics), cover: its confidence; "
        "load: the 1-min load average; others: the share of the machine's CPU other processes took "
        f"during the passes (medians); CPU:A, CPU:B: {cpu_unit} of {a} and of {b}"
    )


def _append_log(path: Path, passes: Sequence[Pass]) -> None:
    """Every pass as a CSV row, in the order run (the header once)."""
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, [x.name for x in fields(Pass)])
        if new:
            w.writeheader()
        for p in passes:
            w.writerow(asdict(p))


def read_log(path: Path) -> list[dict]:
    """The passes a ``--log`` holds, as dicts of strings, in the order run."""
    with path.open(newline="") as f:
        return list(csv.DictReader(f))
