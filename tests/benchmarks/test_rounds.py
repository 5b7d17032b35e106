"""The rounds every comparing benchmark shares (benchmarks/rounds.py): the sides alternate, the rounds go
on until the ratio's interval is stated (or within --within), and each pass carries its load and CPU."""

import argparse
import hashlib

import pytest

from benchmarks import rounds


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    rounds.add_arguments(p, "--rounds")
    return p.parse_args(list(argv))


def _work(r: int, side: str, rates: dict) -> rounds.Pass:
    """A real pass: hashing some bytes (CPU this process spends), its rate given by the test."""
    watch = rounds.Watch()
    hashlib.sha256(bytes(200_000)).digest()
    return watch.done("row", r, side, rates[side](r), 10)


def test_defaults_are_seven_rounds_that_alternate_and_each_pass_says_its_load_and_cpu(tmp_path):
    args = _args("--log", str(tmp_path / "passes.csv"))
    assert args.rounds == 7 and args.max_rounds is None and args.within == 0.05
    passes = rounds.run(
        ("a", "b"), lambda r, s: _work(r, s, {"a": lambda r: 2.0, "b": lambda r: 1.0}), [("a", "b")], args
    )
    assert [p.side for p in passes] == ["a", "b", "b", "a"] * 3 + ["a", "b"]
    assert all(p.cpu_s > 0 and p.load1 >= 0 and p.items == 10 for p in passes)
    assert all(p.other_share is None or 0 <= p.other_share <= 1 for p in passes)
    logged = rounds.read_log(tmp_path / "passes.csv")
    assert [(int(x["round"]), x["side"]) for x in logged] == [(p.round, p.side) for p in passes]
    s = rounds.summarize(passes, "a", "b")
    assert (s.ratio, s.lo, s.hi, s.rounds) == (2.0, 2.0, 2.0, 7) and s.within
    assert s.coverage == pytest.approx(1 - 2 / 2**7)  # min-max of 7: the median's 98% interval
    line = rounds.columns(s)
    assert line.split()[:3] == ["(2.00-2.00)", "98%", "7"] and len(line.split()) == len(rounds.HEADER.split())


def test_three_sides_rotate_so_each_goes_first_in_turn():
    assert [rounds.order(("tf", "torch", "fio"), r) for r in range(3)] == [
        ["tf", "torch", "fio"],
        ["torch", "fio", "tf"],
        ["fio", "tf", "torch"],
    ]


def test_max_rounds_goes_on_while_the_interval_is_wider_than_within():
    noisy = {"a": lambda r: 1.0 + (0.3 if r % 3 == 0 else 0.0), "b": lambda r: 1.0}
    steady = {"a": lambda r: 1.0, "b": lambda r: 1.0}
    wide = rounds.run(
        ("a", "b"),
        lambda r, s: _work(r, s, noisy),
        [("a", "b")],
        _args("--rounds", "2", "--max-rounds", "12"),
    )
    assert {p.round for p in wide} == set(range(12))  # a 30% outlier every third round keeps it wide
    assert not rounds.summarize(wide, "a", "b").within
    narrow = rounds.run(
        ("a", "b"),
        lambda r, s: _work(r, s, steady),
        [("a", "b")],
        _args("--rounds", "2", "--max-rounds", "12"),
    )
    assert {p.round for p in narrow} == {0, 1}  # within +-5% after the rounds asked: it stops there


def test_the_median_interval_narrows_with_more_rounds():
    assert rounds.median_interval([3, 1, 2]) == (1, 3, 0.75)  # min-max: fewer than 6 give no 95%
    lo, hi, cover = rounds.median_interval(list(range(20)))
    assert (lo, hi) == (5, 14) and cover >= 0.95
    with pytest.raises(ValueError, match="--rounds=0"):
        rounds.run(("a", "b"), lambda r, s: None, [("a", "b")], _args("--rounds", "0"))
