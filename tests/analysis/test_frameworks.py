"""The framework as a dimension of the analysis (``framework=tensorflow,pytorch``): the cell columns, Figs. 4
and 5 with a bar group per storage and framework, the per-tier table and its sentence, the report's lines,
and the paper's claims judged on TensorFlow's rows only."""

from pathlib import Path

import pandas as pd
import pytest

from analysis.claims import judge
from analysis.figures import bandwidth, plotting
from analysis.report import answers
from analysis.tables import bounds, frameworks, tidy
from jobs import records, workloads
from support.commands import campaign
from support.configs import compose_cell
from support.files import make_jpegs

EVIDENCE = {  # what the runner records on a 2-core machine for a run of each limit
    "storage": {"cpu_share": 0.30, "cpu_cores_busy": 0.6, "cpu_cores_usable": 2, "device_busy": 0.97},
    "cpu": {"cpu_share": 0.985, "cpu_cores_busy": 1.97, "cpu_cores_usable": 2, "device_busy": 0.25},
}


def _rows(framework, rates: dict, storage="local", limit="cpu", cell=0, startup=None):
    """Three runs per thread (TensorFlow) or worker (PyTorch) count at ``rates[count]`` images/s, the
    tidy rows the analysis builds from records (results.csv's columns)."""
    rows = []
    for i, (n, rate) in enumerate(rates.items()):
        for run in (1, 2, 3):
            row = {
                "workload": "microbench",
                "kind": "microbench",
                "pipeline": "decode_resize",
                "framework": framework,
                "storage": storage,
                "stage": "",
                "tasks_per_cell": 1,
                "service": 0,
                "format": "files",
                "shuffle": "global",
                "threads": n,
                "loader_workers": n if framework != "tensorflow" else None,
                "batch_size": 64,
                "prefetch": 0,
                "cache": "cold",
                "run": run,
                "cache_state": "cold",
                "images_per_s": rate + run - 2,  # median: rate; min and max one either side
                "mb_per_s": (rate + run - 2) * 0.11,
                "first_batch_s": 0.1 * (i + 1),
                "startup_s": startup,
                "bytes_consumed": 1000,
                "bytes_read_device": 1000,
                "device_read_ratio": 1.0,
                "fs_type": "ext4",
                "cell_dir": f"{cell + i}",
                **EVIDENCE[limit],
            }
            row["bound"], row["bound_reason"] = bounds.label(row)
            rows.append(row)
    workloads.names()  # the workloads' own metrics (startup_s, ...) are columns once they are registered
    columns = tidy.results_frame(tidy.Collected(folder=".")).columns
    return pd.DataFrame(rows).reindex(columns=columns)


def _both():
    """TensorFlow at 1 and 2 threads, PyTorch at 1 and 2 workers: the same threads, on one tier."""
    return pd.concat(
        [
            _rows("tensorflow", {1: 400.0, 2: 800.0}),
            _rows("pytorch", {1: 250.0, 2: 450.0}, cell=2, startup=0.05),
        ],
        ignore_index=True,
    )


def _config(*overrides):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose_cell(list(overrides)), resolve=True)


def _recorded(config: dict):
    """``config`` as the analysis reads it from a record (``jobs.cell.recorded``)."""
    from jobs import records
    from jobs.cell import recorded

    rec = records.CellRecord("id", records.COMPLETED, config, [], [], {}, {}, "", "")
    return recorded(rec)


def test_the_cell_columns_say_the_framework_and_the_dataloaders_workers():
    tf = tidy._cell_values(_recorded(_config("framework=tensorflow", "threads=2")))
    assert (tf["framework"], tf["loader_workers"]) == ("tensorflow", None)
    pt = tidy._cell_values(_recorded(_config("framework=pytorch", "threads=2")))
    assert (pt["framework"], pt["loader_workers"], pt["threads"]) == ("pytorch", 2, 2)  # null: threads
    pt = tidy._cell_values(_recorded(_config("framework=pytorch", "threads=2", "loader.num_workers=3")))
    assert pt["loader_workers"] == 3
    old = _config("threads=2")
    del old["framework"], old["loader"]  # a record written before the framework axis: TensorFlow's
    del old["workload"]["kind"]  # and before the workload modules: the micro-benchmark's
    assert tidy._cell_values(_recorded(old))["framework"] == "tensorflow"
    assert tidy._cell_values(_recorded(old))["kind"] == "microbench"
    columns = list(tidy.results_frame(tidy.Collected(folder=".")).columns)
    assert columns.count("workers") == 1 and "loader_workers" in columns  # the run metric stays apart


def test_the_medians_keep_a_tensorflow_and_a_pytorch_cell_of_the_same_threads_apart():
    summary = tidy.summary_frame(_both())
    assert len(summary) == 4
    one = summary[summary["threads"].astype(str) == "1"].set_index("framework")
    assert one.loc["tensorflow", "images_per_s_median"] == 400.0
    assert one.loc["pytorch", "images_per_s_median"] == 250.0
    assert pd.isna(one.loc["tensorflow", "loader_workers"]) and one.loc["pytorch", "loader_workers"] == 1
    assert answers.per_tier(summary) == [
        "local, microbench (tensorflow): 400 images/s at 1 thread, 800 at 2 (2.00×); "
        "cpu-bound at 1–2 threads.",
        "local, microbench (pytorch): 250 images/s at 1 worker, 450 at 2 (1.80×); cpu-bound at 1–2 workers.",
    ]


def _drawn(rows, monkeypatch):
    """Fig. 4 drawn from ``rows``: the matplotlib figure, kept open instead of saved."""
    kept = []
    monkeypatch.setattr(plotting, "save", lambda fig, stem: kept.append(fig) or [])
    figure = next(f for _, f in workloads.figures() if f.key == "fig4")
    bandwidth.bandwidth_figure(rows, Path("unused"), figure)
    return kept[0]


def test_fig4_draws_a_bar_group_per_storage_and_framework(monkeypatch, tmp_path):
    fig = _drawn(_both(), monkeypatch)
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["local\n(ext4)\ntensorflow", "local\n(ext4)\npytorch"]
    heights = sorted(round(p.get_height()) for p in ax.patches if p.get_height() == p.get_height())
    assert heights == [250, 400, 450, 800]  # each cell's median, none merged with the other framework's
    legend = ax.get_legend()
    assert legend.get_title().get_text() == "map threads / DataLoader workers"
    assert [t.get_text() for t in legend.get_texts()] == ["1 thread / worker", "2 threads / workers"]
    # the legend sits above the bars (the y limit leaves it room)
    top = max(p.get_height() + 1 for p in ax.patches)
    fig.canvas.draw()
    box = legend.get_window_extent().transformed(ax.transData.inverted())
    assert box.y0 > top
    import matplotlib.pyplot as plt

    plt.close(fig)
    monkeypatch.undo()
    paths = bandwidth.bandwidth_figure(
        _both(), tmp_path, next(f for _, f in workloads.figures() if f.key == "fig4")
    )
    assert [p.name for p in paths] == ["fig4.png", "fig4.svg"] and all(p.stat().st_size > 0 for p in paths)


def test_fig4_with_one_framework_is_drawn_as_before(monkeypatch):
    rows = _rows("tensorflow", {1: 400.0, 2: 800.0}).drop(columns=["framework", "loader_workers"])
    fig = _drawn(rows, monkeypatch)  # rows from before the framework axis, and TensorFlow's own below
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["local\n(ext4)"]
    assert ax.get_legend().get_title().get_text() == "map threads"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["1 thread", "2 threads"]
    assert ax.get_xlabel() == "Storage (file system)"
    fig = _drawn(_rows("tensorflow", {1: 400.0, 2: 800.0}), monkeypatch)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["local\n(ext4)"]


def test_the_per_tier_table_and_its_sentence():
    rows = pd.concat([_both(), _rows("tensorflow", {4: 90.0}, storage="hdd", limit="storage", cell=4)])
    rows = pd.concat(
        [rows, _rows("pytorch", {4: 120.0}, storage="hdd", limit="storage", cell=5, startup=0.2)]
    )
    t = frameworks.table(rows)
    assert list(t.columns) == list(frameworks.COLUMNS)
    local = t[t["storage"] == "local"]
    assert list(zip(local["framework"], local["readers"])) == [
        ("tensorflow", "1"),
        ("tensorflow", "2"),
        ("pytorch", "1"),
        ("pytorch", "2"),
    ]
    first = local.iloc[0]
    assert first["images_per_s"] == 400.0 and first["runs"] == 3
    assert first["images_per_s_per_core"] == pytest.approx(400.0 / 1.97)
    assert first["device_read_ratio"] == 1.0 and first["first_batch_s"] == pytest.approx(0.1)
    assert pd.isna(first["startup_s"]) and local.iloc[2]["startup_s"] == 0.05
    assert set(t["bound"]) == {"cpu", "storage"}
    said = frameworks.sentences(t)
    assert said["local"] == [
        "local: tensorflow read faster, 800 images/s at 2 threads against pytorch's 450 at 2 workers "
        "(1.78×); "
        f"tensorflow was cpu-bound ({local.iloc[1]['bound_reason']}); "
        f"pytorch was cpu-bound ({local.iloc[3]['bound_reason']})."
    ]
    assert said["hdd"][0].startswith(
        "hdd: pytorch read faster, 120 images/s at 4 workers against tensorflow's 90 "
    )
    assert "pytorch was storage-bound (storage-bound: device busy 97%" in said["hdd"][0]


def test_three_frameworks_are_ranked_in_one_sentence_and_fig4_names_each_ones_readers(monkeypatch, tmp_path):
    """JAX's Grain beside tf.data and PyTorch's DataLoader (``framework=tensorflow,pytorch,jax``): the tier's
    sentence ranks all three, each in its own terms; Fig. 4's legend names each kind of reader."""
    from analysis.report import sections

    rows = pd.concat([_both(), _rows("jax", {1: 200.0, 2: 380.0}, cell=4)], ignore_index=True)
    t = frameworks.table(rows)
    assert list(dict.fromkeys(t["framework"])) == ["tensorflow", "jax", "pytorch"]
    (said,) = frameworks.sentences(t)["local"]
    assert said.startswith(
        "local: tensorflow read fastest, 800 images/s at 2 threads, against pytorch's 450 at 2 workers "
        "(1.78× slower), jax's 380 at 2 workers (2.11× slower); tensorflow was cpu-bound ("
    )
    assert "; pytorch was cpu-bound (" in said and "; jax was cpu-bound (" in said
    fig = _drawn(rows, monkeypatch)
    legend = fig.axes[0].get_legend()
    assert legend.get_title().get_text() == "map threads / Grain workers / DataLoader workers"
    import matplotlib.pyplot as plt

    plt.close(fig)
    t.to_csv(tmp_path / frameworks.FRAMEWORKS, index=False)
    page = sections.frameworks(tmp_path)
    assert page.startswith("<h2>TensorFlow, JAX and PyTorch</h2>")
    assert "Grain, JAX&#x27;s data loader (<code>framework=jax</code>" in page


def test_no_table_with_one_framework():
    assert frameworks.table(_rows("tensorflow", {1: 400.0, 2: 800.0})) is None
    assert frameworks.table(_rows("pytorch", {1: 400.0})) is None
    assert frameworks.sentences(None) == {}


def test_the_claims_ignore_pytorch_rows():
    """A TensorFlow speed-up of 1.70 at 2 threads on the HDD reproduces the paper's 1.65; PyTorch's cells of
    the same tier and threads (3.0×) beside them change no verdict and no measured value."""
    tf = _rows("tensorflow", {1: 100.0, 2: 170.0, 4: 300.0, 8: 230.0}, storage="modeled_hdd", limit="storage")
    pt = _rows("pytorch", {1: 100.0, 2: 300.0, 4: 300.0, 8: 300.0}, storage="modeled_hdd", limit="storage")
    no_baselines = pd.DataFrame(columns=["storage", "measure", "mb_per_s"])
    alone = judge.claims_frame(tf, no_baselines).set_index("id")
    both = judge.claims_frame(pd.concat([tf, pt], ignore_index=True), no_baselines).set_index("id")
    assert alone.loc["hdd_speedup_2", "status"] == judge.REPRODUCED
    assert both.loc["hdd_speedup_2", "measured"] == pytest.approx(alone.loc["hdd_speedup_2", "measured"])
    pd.testing.assert_frame_equal(alone, both)
    # PyTorch's rows alone judge nothing
    only = judge.claims_frame(pt, no_baselines).set_index("id")
    assert only.loc["hdd_speedup_2", "status"] == judge.NOT_MEASURED


@pytest.fixture(scope="module")
def both_frameworks(tmp_path_factory):
    """A real campaign: the micro-benchmark on 16 images, one measured run with TensorFlow at 1 thread
    and with PyTorch at 1 worker."""
    base = tmp_path_factory.mktemp("frameworks")
    make_jpegs(base / "data", 16)
    out = base / "sweep"
    p = campaign(
        "-m",
        "framework=tensorflow,pytorch",
        "threads=1",
        "dataset.source=folder",
        f"dataset.path={base / 'data'}",
        f"storage.root={base}",
        "repeats=1",
        "warmup=0",
        "batch_size=4",
        f"hydra.sweep.dir={out}",
        cwd=base,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return out


@pytest.mark.cells
def test_a_real_campaign_with_both_frameworks(both_frameworks):
    out = both_frameworks
    results = pd.read_csv(out / "results.csv")
    by = results.set_index("framework")
    assert sorted(by.index) == ["pytorch", "tensorflow"]
    assert by.loc["pytorch", "loader_workers"] == 1 and by.loc["pytorch", "workers"] == 1
    assert pd.isna(by.loc["tensorflow", "loader_workers"]) and pd.isna(by.loc["tensorflow", "workers"])
    assert by.loc["pytorch", "startup_s"] > 0
    # TensorFlow's cell is the sweep's first (#0) and runs last: PyTorch's workers fork from this
    # process before TensorFlow's threads are in it
    ran = {
        r.config["framework"]["name"]: (r.started_at, p.parent.name)
        for p in out.glob("*/record.json")
        for r in [records.read(p)]
    }
    assert ran["tensorflow"][1] == "0" and ran["pytorch"][0] < ran["tensorflow"][0]
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(summary["framework"]) == ["pytorch", "tensorflow"]
    table = pd.read_csv(out / frameworks.FRAMEWORKS)
    assert list(table["framework"]) == ["tensorflow", "pytorch"] and list(table["readers"]) == [1, 1]
    assert (out / "fig4.png").stat().st_size > 0
    page = (out / "report.html").read_text()
    assert "<h2>TensorFlow and PyTorch</h2>" in page
    (sentence,) = frameworks.sentences(table).values()
    assert " read faster, " in sentence[0] and "-bound" in sentence[0]
    import html

    assert html.escape(sentence[0]) in page
    first = page[page.index("What each tier delivered") :].split("</table>")[0]
    assert "<th>framework</th>" in first and "<td>tensorflow</td>" in first and "<td>pytorch</td>" in first


def test_a_pytorch_cell_is_compared_with_fio_at_its_workers_and_its_layout_row_says_its_framework():
    from analysis.tables import baselines, layouts

    summary = tidy.summary_frame(
        pd.concat(
            [
                _rows("tensorflow", {2: 400.0}),
                _rows("pytorch", {2: 250.0}, cell=1).assign(loader_workers=3),  # loader.num_workers=3
                _rows("pytorch", {2: 300.0}, cell=2).assign(loader_workers=3, format="hdf5"),
            ],
            ignore_index=True,
        )
    )
    fio = pd.DataFrame(
        {
            "storage": ["local", "local"],
            "format": ["files", "files"],
            "measure": ["small_read", "small_read"],
            "readers": [2, 3],
            "mb_per_s": [20.0, 40.0],
        }
    )
    got = baselines.efficiency(summary, fio).set_index("framework")
    assert got.loc["tensorflow", "small_file_mb_s"] == 20.0  # 2 map threads: 2 fio readers
    assert got.loc["pytorch"].iloc[0]["small_file_mb_s"] == 40.0  # 3 workers: 3 fio readers
    reach = layouts.reach(summary)
    assert list(zip(reach["framework"], reach["threads"], reach["format"])) == [
        ("tensorflow", "2", "files"),
        ("pytorch", "3", "files"),
        ("pytorch", "3", "hdf5"),
    ]


def _training(framework, runtimes: dict, storage="local", cell=0):
    """AlexNet rows (results.csv's columns), three runs a cell at ``runtimes[(readers, prefetch)]`` s
    steady runtime (median; one either side by 0.01 s): TensorFlow's by map threads and prefetch, PyTorch's
    by DataLoader workers (``loader.num_workers``, its threads left at 1; prefetch is always 0)."""
    rows = []
    for i, ((n, prefetch), runtime) in enumerate(runtimes.items()):
        for run in (1, 2, 3):
            steady = runtime + (run - 2) * 0.01
            rows.append(
                {
                    "workload": "alexnet_small",
                    "kind": "alexnet",
                    "pipeline": "decode_resize",
                    "framework": framework,
                    "storage": storage,
                    "stage": "",
                    "tasks_per_cell": 1,
                    "service": 0,
                    "format": "files",
                    "shuffle": "global",
                    "threads": n if framework == "tensorflow" else 1,
                    "loader_workers": n if framework != "tensorflow" else None,
                    "batch_size": 64,
                    "prefetch": prefetch,
                    "image_side": 128,
                    "width": 0.25,
                    "run": run,
                    "cache_state": "cold",
                    "runtime_s": steady + 0.5,
                    "steady_runtime_s": steady,
                    "data_wait_s": steady / 4,
                    "compute_s": steady / 2,
                    "train_au_percentage": 50.0 + n,
                    "fs_type": "ext4",
                    "cell_dir": f"{storage}/{framework}/{cell + i}",
                }
            )
    workloads.names()  # the workloads' own metrics (startup_s, ...) are columns once they are registered
    columns = tidy.results_frame(tidy.Collected(folder=".")).columns
    return pd.DataFrame(rows).reindex(columns=columns)


TF_RUNTIMES = {(1, 0): 4.0, (1, 1): 3.0, (2, 0): 2.5, (2, 1): 2.0}  # map threads, prefetch: s
PT_RUNTIMES = {(0, 0): 6.0, (1, 0): 5.0, (2, 0): 3.5}  # DataLoader workers (0: none), prefetch 0: s


def _fig6(rows, monkeypatch):
    """Fig. 6 drawn from the rows the figure declares (its kind and layout): the figure, kept open."""
    from analysis.figures import declared, training

    kept = []
    monkeypatch.setattr(plotting, "save", lambda fig, stem: kept.append(fig) or [])
    figure = next(f for _, f in workloads.figures() if f.key == "fig6")
    training.fig6(declared.rows_of(rows, "alexnet", figure), Path("unused"), figure)
    return kept[0]


def test_fig7_marks_and_names_the_runtime_without_prefetch_where_it_was_the_shorter(monkeypatch):
    """Where a batch size ran faster without prefetch, Fig. 7 draws a tick at that runtime inside the gray
    bar (no white excess) and its legend says what the tick is, as Fig. 6's does."""
    from analysis.figures import declared, training

    faster_with = _training("tensorflow", {(2, 0): 3.0, (2, 1): 2.0})
    faster_without = _training("tensorflow", {(2, 0): 2.0, (2, 1): 2.5}, cell=2).assign(batch_size=128)
    kept = []
    monkeypatch.setattr(plotting, "save", lambda fig, stem: kept.append(fig) or [])
    figure = next(f for _, f in workloads.figures() if f.key == "fig7")
    rows = declared.rows_of(pd.concat([faster_with, faster_without]), "alexnet", figure)
    training.fig7(rows, Path("unused"), figure)
    ax = kept[0].axes[0]
    ticks = [tuple(line.get_xydata()[0]) for line in ax.lines if line.get_marker() == "_"]
    assert ticks == [(1.0, 2.0)]  # batch 128, the runtime without prefetch
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    tick = "without prefetch, where it was faster"
    assert legend[:3] == ["prefetch 1 batch", "excess without prefetch", tick]


def _bars(ax):
    """(x centre, bottom, height, face, hatch) of every bar drawn, rounded, left to right."""
    out = [
        (
            round(p.get_x() + p.get_width() / 2, 3),
            round(p.get_y(), 3),
            round(p.get_height(), 3),
            p.get_facecolor()[:3],
            p.get_hatch(),
        )
        for p in ax.patches
    ]
    return sorted(out)


def _under(ax) -> list[str]:
    """The numbers written under the bars, left to right."""
    return [a.get_text() for a in sorted(ax.texts, key=lambda a: a.xy[0]) if a.xy[1] == 0]


def test_fig6_draws_pytorch_beside_tensorflow(monkeypatch):
    """A bar group per storage and framework: TensorFlow's gray with prefetch and white on top the excess
    without; PyTorch's by DataLoader workers, gray where workers load ahead and its 0-worker cell (the run
    without prefetch) a hatched bar of its own; no median mixes the two."""
    rows = pd.concat([_training("tensorflow", TF_RUNTIMES), _training("pytorch", PT_RUNTIMES, cell=4)])
    fig = _fig6(rows, monkeypatch)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["local\ntensorflow", "local\npytorch"]
    assert _under(ax) == ["1", "2", "0", "1", "2"]
    assert "map threads (TensorFlow), DataLoader workers (PyTorch)" in ax.get_xlabel()
    white, gray = (1.0, 1.0, 1.0), (0.6, 0.6, 0.6)
    bars = _bars(ax)
    assert {round(p.get_width(), 3) for p in ax.patches} == {round(0.8 / 3 * 0.9, 3)}  # PyTorch's 3 bars
    assert [b[0] for b in bars if b[3] == gray] == pytest.approx([-0.133, 0.133, 1.0, 1.267])  # centred
    tf = [b for b in bars if b[0] < 0.5]
    assert [(b[1], b[2], b[3]) for b in tf] == [
        (0.0, 3.0, gray),  # 1 thread, prefetch
        (3.0, 1.0, white),  # the excess without prefetch: 4.0 - 3.0
        (0.0, 2.0, gray),
        (2.0, 0.5, white),
    ]
    pt = [b for b in bars if b[0] > 0.5]
    assert [(b[1], b[2], b[3], bool(b[4])) for b in pt] == [
        (0.0, 6.0, white, True),  # 0 workers: its whole runtime, hatched
        (0.0, 5.0, gray, False),
        (0.0, 3.5, gray, False),
    ]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:3] == [
        "TensorFlow: prefetch 1 batch; PyTorch: workers loading ahead",
        "TensorFlow: excess without prefetch (I/O cost)",
        "PyTorch: 0 workers, the training process loads each batch",
    ]
    au = sorted(a.get_text() for a in ax.texts if a.xy[1] != 0)
    assert au == ["51%", "51%", "52%", "52%"]  # on the gray bars only: TensorFlow's and PyTorch's 1 and 2
    fig.canvas.draw()  # the legend sits above the tallest bar
    box = ax.get_legend().get_window_extent().transformed(ax.transData.inverted())
    assert box.y0 > 6.0 + 0.01


def test_fig6_of_a_tensorflow_campaign_is_drawn_as_before(monkeypatch):
    """Without PyTorch's cells, Fig. 6 is the paper's: a bar group per storage, bars at -0.4 + w(j + 1/2),
    the y limit 1.3 × the tallest, the same words; a PyTorch row of another workload changes nothing."""
    rows = pd.concat([_training("tensorflow", TF_RUNTIMES), _rows("pytorch", {1: 250.0})])
    fig = _fig6(rows, monkeypatch)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["local"]
    assert ax.get_xlabel() == "Storage (numbers under the bars: map threads)"
    assert _under(ax) == ["1", "2"]
    bars = _bars(ax)
    assert [b[0] for b in bars] == [-0.2, -0.2, 0.2, 0.2] and not any(b[4] for b in bars)
    assert [b[2] for b in bars] == [3.0, 1.0, 2.0, 0.5]
    assert ax.get_ylim() == pytest.approx((0, 4.0 * 1.3))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "prefetch 1 batch",
        "excess without prefetch (I/O cost)",
        "n%: AU with prefetch (compute ÷ runtime)",
    ]
    import matplotlib.pyplot as plt

    plt.close(fig)
    old = _training("tensorflow", TF_RUNTIMES).drop(columns=["framework", "loader_workers"])
    fig = _fig6(old, monkeypatch)  # records from before the framework axis: the same figure
    assert _bars(fig.axes[0]) == bars


def test_the_legend_covers_no_bar_of_fig6_or_fig7(monkeypatch):
    """The legend sits at the top right: where the tallest bar is on the right (tmpfs, the most threads, the
    smallest batch), the y limit rises until the legend is over it."""
    from analysis.figures import declared, training

    tall_right = {(1, 0): 2.0, (1, 1): 1.5, (2, 0): 4.0, (2, 1): 3.0}  # threads 2, prefetch off: the tallest
    fig = _fig6(_training("tensorflow", tall_right), monkeypatch)
    fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.get_legend().get_window_extent().transformed(ax.transData.inverted()).y0 > 4.0 + 0.01
    small = _training("tensorflow", {(2, 0): 1.0, (2, 1): 0.9}, cell=8).assign(batch_size=32)
    rows = pd.concat([_training("tensorflow", {(2, 0): 4.0, (2, 1): 3.0}), small], ignore_index=True)
    rows = rows.iloc[::-1]  # batch 32 first: its bar drawn left, batch 64's (the tallest) right
    kept = []
    monkeypatch.setattr(plotting, "save", lambda fig, stem: kept.append(fig) or [])
    figure = next(f for _, f in workloads.figures() if f.key == "fig7")
    training.fig7(declared.rows_of(rows, "alexnet", figure), Path("unused"), figure)
    kept[0].canvas.draw()
    ax = kept[0].axes[-1]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["32", "64"]
    assert ax.get_legend().get_window_extent().transformed(ax.transData.inverted()).y0 > 4.0 + 0.01
    import matplotlib.pyplot as plt

    plt.close("all")


def test_figs_7_and_8_draw_tensorflows_rows_only():
    from analysis.figures import declared

    rows = pd.concat([_training("tensorflow", TF_RUNTIMES), _training("pytorch", PT_RUNTIMES, cell=4)])
    drawn = {f.key: declared.rows_of(rows, "alexnet", f) for _, f in workloads.figures()}
    assert set(drawn["fig6"]["framework"]) == {"tensorflow", "pytorch"}
    assert set(drawn["fig7"]["framework"]) == set(drawn["fig8"]["framework"]) == {"tensorflow"}
    captions = {f.key: f.title for _, f in workloads.figures()}
    assert "TensorFlow's cells" in captions["fig7"] and "TensorFlow's cells" in captions["fig8"]


def test_io_cost_keeps_the_frameworks_apart():
    """TensorFlow's I/O cost compares prefetch off and on at the same map threads; PyTorch's compares N
    workers with its 0-worker cell (its threads, 1, never meet TensorFlow's 1 thread)."""
    from analysis.tables import training

    tf = _training("tensorflow", TF_RUNTIMES)
    alone = training.io_cost(tf)
    assert list(alone.columns) == [
        "storage",
        "threads",
        "batch_size",
        "image_side",
        "width",
        "runtime_no_prefetch_s",
        "runtime_prefetch_s",
        "io_cost_s",
        "data_wait_no_prefetch_s",
        "data_wait_prefetch_s",
    ]
    assert list(alone["io_cost_s"]) == pytest.approx([1.0, 0.5])
    both = training.io_cost(pd.concat([tf, _training("pytorch", PT_RUNTIMES, cell=4)], ignore_index=True))
    assert list(both.columns) == ["storage", "framework", *alone.columns[1:]]
    pd.testing.assert_frame_equal(
        both[both["framework"] == "tensorflow"].drop(columns="framework").reset_index(drop=True), alone
    )
    pt = both[both["framework"] == "pytorch"]
    assert list(pt["threads"]) == ["1", "2"]  # the DataLoader workers that loaded ahead
    assert list(pt["runtime_no_prefetch_s"]) == pytest.approx([6.0, 6.0])  # the 0-worker cell
    assert list(pt["runtime_prefetch_s"]) == pytest.approx([5.0, 3.5])
    assert list(pt["io_cost_s"]) == pytest.approx([1.0, 2.5])
    assert list(pt["data_wait_no_prefetch_s"]) == pytest.approx([1.5, 1.5])


def test_an_object_store_runs_gets_in_flight_are_set_against_its_readers_workers_or_threads():
    run = {"requests_in_flight_mean": 1.5, "get_latency_p50_ms": 2.0}
    assert "GETs in flight 1.50 of 4 readers" in bounds.store_use({**run, "threads": 2, "workers": 4})
    assert "of 1 readers" in bounds.store_use({**run, "threads": 2, "workers": 0})  # the loader's own process
    assert "of 2 readers" in bounds.store_use({**run, "threads": 2, "workers": None})  # tf.data's threads
