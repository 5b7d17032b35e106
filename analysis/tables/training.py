"""The AlexNet mini-app's rows and its I/O cost table (``io_cost.csv``): the runtime prefetch saved."""

from __future__ import annotations

from analysis.tables.tidy import runtime_column

KIND = "alexnet"  # the workload module whose rows these are


def alexnet_rows(results):
    """The AlexNet rows of ``results``, threads as text and a ``prefetching`` column."""
    df = results[results["kind"] == KIND].copy()
    df["threads"] = df["threads"].astype(str)
    df["prefetching"] = df["prefetch"] > 0
    return df


def io_cost(results):
    """Runtime without prefetch minus runtime with prefetch, per storage, threads and batch size
    (the paper's reading of Fig. 6: the excess is the cost of I/O)."""
    import pandas as pd

    df = alexnet_rows(results)
    if df.empty:
        return pd.DataFrame()
    keys = ["storage", "threads", "batch_size", "image_side", "width"]
    rt = runtime_column(df)
    med = df.groupby([*keys, "prefetching"])[rt].median().unstack("prefetching")
    wait = df.groupby([*keys, "prefetching"])["data_wait_s"].median().unstack("prefetching")
    out = pd.DataFrame(index=med.index)
    out["runtime_no_prefetch_s"] = med.get(False)
    out["runtime_prefetch_s"] = med.get(True)
    out["io_cost_s"] = out["runtime_no_prefetch_s"] - out["runtime_prefetch_s"]
    out["data_wait_no_prefetch_s"] = wait.get(False)
    out["data_wait_prefetch_s"] = wait.get(True)
    return out.reset_index()
