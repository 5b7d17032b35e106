"""The AlexNet mini-app's rows and its I/O cost table (``io_cost.csv``): the runtime loading ahead saved,
each framework on its own (tf.data's prefetch on and off; a DataLoader's workers against none)."""

from __future__ import annotations

from analysis.tables import tidy
from analysis.tables.order import thread_key
from analysis.tables.tidy import runtime_column

KIND = "alexnet"  # the workload module whose rows these are
PYTORCH = "pytorch"
KEYS = ["storage", "threads", "batch_size", "image_side", "width"]  # a row of io_cost.csv, by framework


def alexnet_rows(results):
    """The AlexNet rows of ``results``, threads as text, each row's ``framework`` (TensorFlow for rows
    from before the axis), what read in parallel (``readers``: the map threads, a PyTorch cell's
    DataLoader workers) and whether the input was loaded while the model computed (``prefetching``:
    tf.data's ``prefetch`` > 0; a PyTorch cell with 1 or more workers)."""
    df = results[results["kind"] == KIND].copy()
    df["threads"] = df["threads"].astype(str)
    df["framework"] = (
        tidy.text(df["framework"]).replace("", tidy.TENSORFLOW) if "framework" in df else tidy.TENSORFLOW
    )
    df["readers"] = tidy.readers(df)
    pytorch = df["framework"] == PYTORCH
    df["prefetching"] = (df["prefetch"] > 0).where(~pytorch, df["readers"] != "0").astype(bool)
    return df


def _tensorflow_cost(df, rt: str):
    """TensorFlow's rows: per storage, threads and batch size, the median runtime (``rt``) and data wait
    with prefetch off and on."""
    import pandas as pd

    med = df.groupby([*KEYS, "prefetching"])[rt].median().unstack("prefetching")
    wait = df.groupby([*KEYS, "prefetching"])["data_wait_s"].median().unstack("prefetching")
    out = pd.DataFrame(index=med.index)
    out["runtime_no_prefetch_s"] = med.get(False)
    out["runtime_prefetch_s"] = med.get(True)
    out["data_wait_no_prefetch_s"] = wait.get(False)
    out["data_wait_prefetch_s"] = wait.get(True)
    return out.reset_index()


def _pytorch_cost(df, rt: str):
    """PyTorch's rows: per storage, batch size and N >= 1 DataLoader workers (in ``threads``), the median
    runtime (``rt``) and data wait with the N workers loading ahead and, as the run without prefetch, the
    storage's 0-worker cell (the training process loads each batch between its steps, alone): at N > 1
    the difference holds what N readers gain over one too."""
    scale = [k for k in KEYS if k != "threads"]
    ahead = (
        df[df["prefetching"]]
        .groupby([*scale, "readers"])
        .agg(runtime_prefetch_s=(rt, "median"), data_wait_prefetch_s=("data_wait_s", "median"))
        .reset_index()
    )
    alone = (
        df[~df["prefetching"]]
        .groupby(scale)
        .agg(runtime_no_prefetch_s=(rt, "median"), data_wait_no_prefetch_s=("data_wait_s", "median"))
        .reset_index()
    )
    out = ahead.merge(alone, on=scale, how="left").rename(columns={"readers": "threads"})
    order = sorted(
        range(len(out)), key=lambda i: (str(out["storage"].iloc[i]), thread_key(out["threads"].iloc[i]))
    )
    return out.iloc[order]


COLUMNS = [
    "runtime_no_prefetch_s",
    "runtime_prefetch_s",
    "io_cost_s",
    "data_wait_no_prefetch_s",
    "data_wait_prefetch_s",
]


def io_cost(results):
    """Runtime without prefetch minus runtime with prefetch, per storage, threads and batch size (the
    paper's reading of Fig. 6: the excess is the cost of I/O). A PyTorch row (a ``framework`` column says
    which, whenever a framework other than TensorFlow read) compares N DataLoader workers (``threads``)
    with 0; a PyTorch row is never a median with a TensorFlow one."""
    import pandas as pd

    df = alexnet_rows(results)
    if df.empty:
        return pd.DataFrame()
    rt = runtime_column(df)
    parts = []
    for fw in tidy.frameworks(df):
        one = df[df["framework"] == fw]
        part = (_pytorch_cost if fw == PYTORCH else _tensorflow_cost)(one, rt)
        if not part.empty:
            parts.append(part.assign(framework=fw))
    if not parts:
        return pd.DataFrame()
    out = pd.concat(parts, ignore_index=True)
    out["io_cost_s"] = out["runtime_no_prefetch_s"] - out["runtime_prefetch_s"]
    named = ["storage", "framework"] if tidy.frameworks(df) != [tidy.TENSORFLOW] else ["storage"]
    return out[[*named, *KEYS[1:], *COLUMNS]]
