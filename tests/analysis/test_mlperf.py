"""Sharded checkpoints beside MLPerf Storage's published ones: the published figures in GB (DLIO's are GiB),
a subset run never called the submission's workload, a whole one is, and shapes without a submission
give no table."""

import pandas as pd
import pytest

from analysis.tables import mlperf

GIB = 2**30 / 1e9


def _rows(model, written, total_gb, gb, where="local", cache="cold", runs=2):
    return pd.DataFrame(
        [
            {
                "checkpoint_model": model,
                "storage": where,
                "checkpoint_target": "slow",
                "checkpoint_tiers": "",
                "ranks_written": written,
                "checkpoint_gb": gb,
                "model_checkpoint_gb": total_gb,
                "save_duration_s": 10.0 + k,
                "load_duration_s": 5.0 + k,
                "save_throughput_gb_s": gb / (10 + k),
                "load_throughput_gb_s": gb / (5 + k),
                "cache_state": cache,
            }
            for k in range(runs)
        ]
    )


def test_the_published_figures_are_the_submissions_in_gb():
    pubs = {p["model"]: p for p in mlperf.published()}
    assert set(pubs) == {"llama3_8b", "llama3_70b"}
    p8 = pubs["llama3_8b"]
    # the summary's own consistency: throughput = size / duration, in GiB
    assert p8["checkpoint_gib"] / p8["save_s"] == pytest.approx(p8["save_gib_s"], rel=0.01)
    assert p8["checkpoint_gib"] / p8["load_s"] == pytest.approx(p8["load_gib_s"], rel=0.01)
    t = mlperf.table(_rows("llama3_8b", 8, 112.4, 112.4))
    pub = t[t["source"] != "measured here"].iloc[0]
    assert pub["save_gb_s"] == pytest.approx(2.8118349 * GIB) and pub["checkpoint_gb"] == pytest.approx(
        112.43, rel=1e-3
    )
    assert "closed/Nebius/results/nebius-s3-ckpt-llama3-8b" in pub["why"]


def test_a_subset_run_is_never_the_submissions_workload_and_a_whole_cold_one_is():
    subset = mlperf.table(_rows("llama3_8b", 2, 112.4, 28.1))
    mine = subset[subset["source"] == "measured here"].iloc[0]
    assert mine["same_workload"] == "no" and mine["why"].startswith("subset mode: 2 of the model's ranks")
    assert mine["save_gb_s"] == pytest.approx(pd.Series([28.1 / 10, 28.1 / 11]).median())  # the runs' median
    assert mine["runs"] == 2
    whole = mlperf.table(_rows("llama3_8b", 8, 112.4, 112.4))
    assert whole[whole["source"] == "measured here"].iloc[0]["same_workload"] == "yes"
    warm = mlperf.table(_rows("llama3_8b", 8, 112.4, 112.4, cache="not_cold"))
    assert "loads not all cold (not_cold)" in warm[warm["source"] == "measured here"].iloc[0]["why"]
    both = mlperf.table(pd.concat([_rows("llama3_8b", 8, 112.4, 112.4), _rows("llama3_70b", 2, 979.0, 30.6)]))
    assert list(both["model"]) == ["llama3_8b", "llama3_8b", "llama3_70b", "llama3_70b"]


def test_shapes_no_submission_ran_give_no_table():
    assert mlperf.table(_rows("ci_tiny", 2, 0.048, 0.024)) is None
    assert mlperf.table(pd.DataFrame({"storage": ["local"], "images_per_s": [10.0]})) is None
