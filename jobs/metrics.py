"""Every per-run metric a record carries, declared once with its unit and direction.

The column table of docs/outputs.md, the analysis and the figure labels read these declarations.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    better: str  # "higher", "lower" or "" (a count or a fact, not a score)
    doc: str

    @property
    def label(self) -> str:
        return f"{self.doc.split(';')[0]} ({self.unit})" if self.unit else self.doc.split(";")[0]


MB = 1_000_000  # MB and MB/s are decimal throughout, as the paper and IOR report them

METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("images", "images", "", "images delivered by the iterator in the timed interval"),
        Metric(
            "images_dropped",
            "images",
            "lower",
            "images removed by ignore_errors (unreadable, truncated, not images)",
        ),
        Metric("batches", "batches", "", "micro-benchmark: batches drawn from the iterator"),
        Metric(
            "seconds",
            "s",
            "lower",
            "micro-benchmark: time from the first iterator call to the return of the last",
        ),
        Metric(
            "first_batch_s",
            "s",
            "lower",
            "micro-benchmark: time of the first iterator call alone (pipeline start-up)",
        ),
        Metric("images_per_s", "images/s", "higher", "Bandwidth; images / seconds"),
        Metric(
            "mb_per_s", "MB/s", "higher", "Bandwidth; bytes of the delivered images' files / seconds / 1e6"
        ),
        Metric("bytes_consumed", "B", "", "bytes of the files of the delivered images"),
        Metric(
            "bytes_read_device",
            "B",
            "",
            "bytes this process read from block devices during the run (/proc/self/io read_bytes); "
            "storage=s3: what the embedded server read from its disk",
        ),
        Metric(
            "bytes_read_syscall",
            "B",
            "",
            "bytes returned by read system calls during the run (/proc/self/io rchar)",
        ),
        Metric("steps", "steps", "", "AlexNet: training steps run"),
        Metric(
            "runtime_s", "s", "lower", "Runtime; AlexNet: first iterator call to the end of the last step"
        ),
        Metric("data_wait_s", "s", "lower", "AlexNet: time spent waiting for the next batch, all steps"),
        Metric(
            "compute_s",
            "s",
            "lower",
            "AlexNet: time spent in training steps (forward, backward, Adam), all steps",
        ),
        Metric(
            "first_step_s",
            "s",
            "lower",
            "AlexNet: wait and compute of the first step (includes graph tracing)",
        ),
        Metric(
            "steady_runtime_s",
            "s",
            "lower",
            "Runtime without the first step; AlexNet and checkpoint: graph tracing left out, "
            "what figures and claims compare",
        ),
        Metric(
            "train_au_percentage",
            "%",
            "higher",
            "AU; AlexNet: accelerator utilization as MLPerf Storage defines it: "
            "compute time / runtime x 100, first step left out "
            "(on a CPU, the share of the loop spent computing)",
        ),
        Metric(
            "accelerator_busy_percentage",
            "%",
            "",
            "AlexNet on a GPU: the GPU's busy share over the timed loop "
            "(NVML utilization.gpu, mean of samples); absent without a GPU",
        ),
        Metric(
            "compute_only_s",
            "s",
            "lower",
            "AlexNet: the run's steady steps trained on one batch held in the training device's memory, "
            "no input pipeline (median of workload.compute_only_steps steps x steps)",
        ),
        Metric(
            "input_only_s",
            "s",
            "lower",
            "AlexNet: the cell's input pipeline drained without training over the same steps, "
            "cache as the runs (once per cell, after its runs; workload.input_only)",
        ),
        Metric(
            "seq_read_mb_s",
            "MB/s",
            "higher",
            "Baseline: sequential read of one large file, O_DIRECT (Table I)",
        ),
        Metric(
            "seq_write_mb_s",
            "MB/s",
            "higher",
            "Baseline: sequential write of one large file, O_DIRECT, flushed (Table I)",
        ),
        Metric("baseline_runtime_s", "s", "lower", "Checkpoint: the same run's runtime without checkpoints"),
        Metric(
            "baseline_steady_runtime_s",
            "s",
            "lower",
            "Checkpoint: the same run's runtime without checkpoints, first step left out",
        ),
        Metric(
            "checkpoint_bytes_left",
            "B",
            "",
            "Checkpoint: bytes of the run's checkpoints left on the tiers after it "
            "(0 unless checkpoint.keep=true)",
        ),
        Metric(
            "checkpoint_stall_s",
            "s",
            "lower",
            "Checkpoint: time training was blocked by checkpoints, all of them",
        ),
        Metric(
            "median_stall_s", "s", "lower", "Checkpoint: median time training was blocked by one checkpoint"
        ),
        Metric(
            "restore_s",
            "s",
            "lower",
            "Checkpoint, checkpoint.restore=true: time to read the run's last durable "
            "checkpoint back into a new model from a cold cache "
            "(the slow tier's copy when both tiers hold one)",
        ),
        Metric("restore_mb_s", "MB/s", "higher", "Checkpoint: bytes of that checkpoint / restore_s"),
        Metric(
            "restore_device_read_ratio",
            "ratio",
            "",
            "Checkpoint: device bytes read during the restore / its bytes "
            "(about 1 when the restore was cold)",
        ),
        Metric(
            "restore_fast_s",
            "s",
            "lower",
            "Checkpoint through the burst buffer, checkpoint.restore=true: time to "
            "read the last checkpoint's fast-tier copy (kept until then) into a new model, evicted first",
        ),
        Metric(
            "drain_after_end_s",
            "s",
            "lower",
            "Checkpoint: time from the end of training until the burst buffer was drained",
        ),
        Metric(
            "run_wall_s",
            "s",
            "",
            "Wall time of the whole run as the runner saw it (the usage figures cover the "
            "workload's timed interval where it marks one, the whole run otherwise: the record's usage_over)",
        ),
        Metric("cpu_s", "s", "", "CPU time of the process and its children during the run (user + system)"),
        Metric("cpu_cores_busy", "cores", "", "CPU seconds per wall second during the run"),
        Metric(
            "cpu_cores_usable",
            "cores",
            "",
            "cores the run could keep busy: "
            "min(CPUs allowed, map threads; AlexNet on a CPU: map threads + 1)",
        ),
        Metric("cpu_share", "", "", "cpu_cores_busy / cpu_cores_usable (1.0: every usable core busy)"),
        Metric(
            "machine_cpu_busy",
            "",
            "",
            "share of all the machine's CPU time that was busy during the run (any process)",
        ),
        Metric(
            "other_cpu_share",
            "",
            "",
            "share of all the machine's CPU time that other processes took during the run (machine_cpu_busy "
            "less the run's own process, its children, its embedded S3 server, s3fs and tf.data service)",
        ),
        Metric(
            "device_lock_wait_s",
            "s",
            "",
            "time the cell waited for other campaigns' locks on its devices and tiers before its first run "
            "(the record's provenance; the same on each of the cell's runs, not part of any run's time)",
        ),
        Metric(
            "memory_limit_bytes",
            "B",
            "",
            "platform.memory_limit_gb: the cgroup memory limit the cell's runs read under, their page cache "
            "with them (the record's provenance; empty: none)",
        ),
        Metric(
            "memory_peak_bytes",
            "B",
            "",
            "platform.memory_limit_gb: the most memory the limited runs held, page cache included, as the "
            "kernel counted it (the record's provenance)",
        ),
        Metric(
            "quiet_wait_s",
            "s",
            "",
            "platform.wait_quiet: time waited before the run for other processes to leave the CPU "
            "(empty: no wait asked)",
        ),
        Metric(
            "device_busy",
            "",
            "",
            "share of the run the data device had a request in flight (/proc/diskstats io_ticks)",
        ),
        Metric(
            "device_queue_depth",
            "requests",
            "",
            "mean requests in flight on the data device (weighted ms / ms)",
        ),
        Metric(
            "device_requests_in_flight",
            "requests",
            "",
            "modelled tiers: mean requests the device had in flight as each arrived, itself included "
            "(1.0: one at a time); counted by the model, so a busy CPU that stretches the run's wall time "
            "does not lower it as it lowers device_queue_depth",
        ),
        Metric(
            "device_read_mb_s",
            "MB/s",
            "",
            "read rate of the whole data device during the run (every process)",
        ),
        Metric(
            "device_read_iops",
            "1/s",
            "",
            "read requests completed per second by the data device during the run",
        ),
        Metric(
            "resident_bytes_before",
            "B",
            "",
            "bytes of the dataset in the page cache when the run started (mincore)",
        ),
        # platform.tasks_per_node > 1 (jobs.execution.tasks): the run's tasks, each reading its shard
        Metric("task_images_per_s_min", "images/s", "", "multi-task run: the slowest task's own images/s"),
        Metric("task_images_per_s_median", "images/s", "", "multi-task run: the median task's own images/s"),
        Metric("task_images_per_s_max", "images/s", "", "multi-task run: the fastest task's own images/s"),
        Metric(
            "task_start_spread_s",
            "s",
            "lower",
            "multi-task run: the last task's start - the first's (the barrier's spread)",
        ),
        # input.service=true (jobs.execution.service): the workers of the tf.data service read the data
        Metric(
            "service_workers",
            "workers",
            "",
            "tf.data service: workers that ran the pipeline (none: no service)",
        ),
        Metric(
            "worker_mb_s_min",
            "MB/s",
            "",
            "tf.data service: the slowest worker's read rate (rchar / the run's time)",
        ),
        Metric(
            "worker_mb_s_max",
            "MB/s",
            "",
            "tf.data service: the fastest worker's read rate (rchar / the run's time)",
        ),
        # trace.posix=true (jobs.observe.posix): what the run asked of the file system, call by call, on its
        # tiers
        Metric(
            "posix_calls", "calls", "", "POSIX trace: calls on the data and checkpoint tiers during the run"
        ),
        Metric("posix_opens", "calls", "", "POSIX trace: open calls"),
        Metric(
            "posix_unclosed",
            "calls",
            "",
            "POSIX trace: opens whose close the trace lacks (lost events, or left open)",
        ),
        Metric(
            "posix_misnamed_calls",
            "calls",
            "",
            "POSIX trace: calls dftracer named after a file it had seen closed (another file on the freed "
            "descriptor number), left out of every other figure",
        ),
        Metric("posix_reads", "calls", "", "POSIX trace: read calls (read, pread, readv, ...)"),
        Metric("posix_writes", "calls", "", "POSIX trace: write calls"),
        Metric("posix_bytes_read", "B", "", "POSIX trace: bytes returned by the read calls"),
        Metric("posix_bytes_written", "B", "", "POSIX trace: bytes written by the write calls"),
        Metric(
            "posix_eof_reads",
            "calls",
            "",
            "POSIX trace: reads that returned 0 bytes (finding the end of a file)",
        ),
        Metric(
            "posix_small_read_share",
            "",
            "",
            "POSIX trace: share of reads that returned under 100 B (0-byte reads included)",
        ),
        Metric("posix_mean_read_bytes", "B", "", "POSIX trace: bytes per read call"),
        Metric("posix_read_s", "s", "", "POSIX trace: time inside read calls, summed over threads"),
        Metric(
            "posix_reads_in_flight",
            "calls",
            "",
            "POSIX trace: mean read calls in progress (posix_read_s / the run's time)",
        ),
        Metric("posix_files", "files", "", "POSIX trace: distinct files the run touched on its tiers"),
        Metric("posix_files_reopened", "files", "", "POSIX trace: files opened more than once in the run"),
        Metric("posix_threads", "threads", "", "POSIX trace: threads that made read calls"),
        Metric(
            "posix_coverage",
            "",
            "",
            "POSIX trace: posix_bytes_read / bytes_consumed (under 0.98: the trace missed reads)",
        ),
        Metric(
            "posix_rchar_bytes",
            "B",
            "",
            "bytes returned by every read call of the process over the run's window (rchar)",
        ),
        Metric(
            "posix_rchar_share",
            "",
            "",
            "POSIX trace: posix_bytes_read / posix_rchar_bytes (the rest: Python, /proc, ...)",
        ),
        Metric(
            "posix_complete",
            "",
            "",
            "POSIX trace: coverage >= 0.98 and at most 2% of opens unclosed (false: incomplete)",
        ),
        Metric(
            "requests",
            "requests",
            "",
            "object store: requests the run made (GETs), answered or failed; storage.reader=fuse: every "
            "request s3fs made, as the embedded server answered them",
        ),
        Metric("request_errors", "requests", "lower", "object store: requests that failed (the run fails)"),
        Metric("request_bytes", "B", "", "object store: bytes of the objects the GETs returned"),
        Metric("get_latency_p50_ms", "ms", "lower", "object store: median GET, request to last byte"),
        Metric("get_latency_p99_ms", "ms", "lower", "object store: 99th percentile GET (nearest rank)"),
        Metric(
            "requests_in_flight_mean",
            "requests",
            "",
            "object store: mean GETs in progress over the timed interval (request-seconds / seconds)",
        ),
        Metric("requests_in_flight_max", "requests", "", "object store: most GETs in progress at once"),
        Metric(
            "server_bytes_read",
            "B",
            "",
            "embedded S3 server: bytes its processes (SeaweedFS, its relay) read from its disk during the "
            "run (bytes_read_device)",
        ),
        Metric(
            "server_cpu_s",
            "s",
            "",
            "embedded S3 server: CPU time of its processes (SeaweedFS, its relay) during the run (on the "
            "same cores as the reader)",
        ),
    )
}


def declare(metric: Metric) -> Metric:
    """Add a workload's metric (idempotent); results.csv gains its column after the built-in ones.
    Raises ValueError when another declaration already uses the name with another unit or meaning."""
    known = METRICS.get(metric.name)
    if known is not None and known != metric:
        raise ValueError(f"metric {metric.name} is declared twice, differently: {known} and {metric}")
    METRICS[metric.name] = metric
    return metric


def of(*names: str) -> tuple[Metric, ...]:
    """The declared metrics named ``names`` (for a built-in workload's declaration)."""
    return tuple(METRICS[n] for n in names)


def label(name: str) -> str:
    """Axis label of a metric: its short description and unit."""
    return METRICS[name].label
