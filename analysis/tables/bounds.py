"""What limited each run, and each cell: the ``bound`` label, from the evidence every run records
(``jobs.observe.usage``: CPU time, device busy time and read rate; ``jobs.storage.cache``: the cache state).

Rules, in this order (docs/measurements.md, "What limited a number", states them too):

  cache    the data came from memory: the run's cache_state is memory, warm or not_cold
  mixed    the CPU and the storage were both saturated
  cpu      the CPU was saturated: cpu_share >= CPU_SATURATED (cores busy / min(cores, map threads)), or
           the machine's CPUs were busy >= CPU_SATURATED with other processes' work (contention)
  storage  the storage was saturated: device_busy >= STORAGE_SATURATED, or on an emulated tier the
           device's read rate or read requests per second reached STORAGE_SATURATED of the tier's
           throttle (the throttle holds requests before the device counts them busy)
  latency  neither was saturated: the run waited (per-request latency, synchronisation, sleeps), or
           there are no device counters (a network file system) and the CPU was not saturated

On an object store the reason adds the GETs in flight against the readers and the median GET, and
the embedded server's own CPU (it shares the machine's cores with the reader: the machine's CPUs
then count it as other processes' work).

AlexNet runs also get ``train_bound``: ``input`` when waiting for data took at least INPUT_BOUND of
the steady runtime (the steps after the first, whose share of compute is the run's AU), else ``compute``.
The first step's wait (the pipeline's or the DataLoader's workers' start) is left out as AU leaves it
out: on a fast accelerator it can be a quarter of a short run whose later steps never wait (8 DataLoader
workers on an H200: AU 94%, and 25% of the whole runtime spent waiting, most of it for the first batch).
A run without AU (a checkpoint run) is judged on its whole runtime.
"""

from __future__ import annotations

CPU_SATURATED = 0.85
STORAGE_SATURATED = 0.80
OVER_THROTTLE = 1.02  # a read rate past the throttle by more than this is explained in the reason
INPUT_BOUND = 0.20
FROM_MEMORY = {"memory", "warm", "not_cold"}
LABELS = ("storage", "cpu", "cache", "mixed", "latency")  # every bound a run or a cell can have


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if f != f else f  # NaN: not measured


def storage_use(row: dict, emulate: dict | None) -> tuple[float | None, str]:
    """How saturated the storage was (0..1, None unknown) and how that was judged; ``emulate``: the
    emulated tier's throttles (its config section), None for a real device."""
    busy, rate, iops = (_num(row.get(k)) for k in ("device_busy", "device_read_mb_s", "device_read_iops"))
    limit_mb, limit_iops = (_num((emulate or {}).get(k)) for k in ("read_mb_s", "read_iops"))
    if limit_mb and rate is not None:
        use = rate / limit_mb
        how = f"device read {rate:.0f} MB/s = {use:.0%} of the tier's {limit_mb:.0f} MB/s throttle"
        seconds = _num(row.get("seconds")) or _num(row.get("runtime_s"))
        if use > OVER_THROTTLE and seconds is not None:
            how += (
                " (over it: the kernel meters a throttle in time slices and lets a slice's bytes through at "
                f"its start, so a {seconds:.2f} s run reads more than the rate; longer runs come closer)"
            )
        if limit_iops and iops is not None and iops / limit_iops > use:
            use = iops / limit_iops
            how = f"device read {iops:.0f} requests/s = {use:.0%} of the tier's {limit_iops:.0f}/s throttle"
        return use, how
    if busy is not None:
        return busy, f"device busy {busy:.0%} of the run"
    return None, "no device counters (network or memory file system)"


def store_use(row: dict) -> str:
    """What an object-store run's requests did, for its reason ('' for other runs): a run whose GETs in
    flight stay below its readers waited on each answer; the embedded server's CPU is on the same
    cores as the reader's."""
    inflight = _num(row.get("requests_in_flight_mean"))
    if inflight is None:
        return ""
    workers, p50 = _num(row.get("workers")), _num(row.get("get_latency_p50_ms"))
    # a DataLoader's readers are its worker processes (0: the training process reads), tf.data's its threads;
    # a run of several tasks has that many in each
    readers = max(1.0, workers) if workers is not None else _num(row.get("threads"))
    tasks = _num(row.get("tasks_per_cell"))
    readers = readers * tasks if readers and tasks else readers
    out = f"; GETs in flight {inflight:.2f}" + (f" of {readers:.0f} readers" if readers else "")
    out += f", median GET {p50:.1f} ms" if p50 is not None else ""
    server, seconds = _num(row.get("server_cpu_s")), _num(row.get("seconds"))
    if server is not None and seconds:
        out += f"; the embedded S3 server kept {server / seconds:.2f} cores busy"
    return out


def label(row: dict, emulate: dict | None = None) -> tuple[str, str]:
    """(bound, one-line reason) of one run (a results.csv row as a dict)."""
    bound, reason = _label(row, emulate)
    return bound, reason + (store_use(row) if bound and bound != "cache" else "")


def _label(row: dict, emulate: dict | None) -> tuple[str, str]:
    state = str(row.get("cache_state") or "")
    if state in FROM_MEMORY:
        ratio = _num(row.get("device_read_ratio"))
        got = f", {ratio:.0%} of consumed bytes from the device" if ratio is not None else ""
        return "cache", f"data from memory: cache_state={state}{got}"
    share, busy, usable = (_num(row.get(k)) for k in ("cpu_share", "cpu_cores_busy", "cpu_cores_usable"))
    if share is None:
        return "", "not known: the record has no CPU and device evidence (written before they were measured)"
    cpu = f"{busy:.2f} of {usable:.0f} usable cores busy"
    machine = _num(row.get("machine_cpu_busy"))
    cpu_full = share >= CPU_SATURATED
    if not cpu_full and machine is not None and machine >= CPU_SATURATED:
        cpu_full, cpu = True, f"{cpu}, the machine's CPUs {machine:.0%} busy (other processes took the rest)"
    use, how = storage_use(row, emulate)
    storage_full = use is not None and use >= STORAGE_SATURATED
    if cpu_full and storage_full:
        return "mixed", f"CPU and storage both saturated: {cpu}; {how}"
    if cpu_full:
        return "cpu", f"CPU-bound: {cpu}; {how}"
    if storage_full:
        return "storage", f"storage-bound: {how}; {cpu}"
    return "latency", f"neither saturated: {how}; {cpu}"


def train_bound(row: dict) -> str:
    """``input`` or ``compute`` for an AlexNet run ('' for other runs)."""
    if row.get("kind") not in ("alexnet", "checkpoint"):
        return ""
    au = _num(row.get("train_au_percentage"))
    if au is not None:
        return "input" if 1 - au / 100 >= INPUT_BOUND else "compute"
    wait, runtime = _num(row.get("data_wait_s")), _num(row.get("runtime_s"))
    if wait is None or not runtime:
        return ""
    return "input" if wait / runtime >= INPUT_BOUND else "compute"


def cell_bound(labels) -> str:
    """The label most of ``labels`` have; ``mixed`` when none has a majority (runs without their
    evidence: use ``cell`` where the runs' rows are at hand)."""
    labels = [x for x in labels if x]
    if not labels:
        return ""
    top = max(set(labels), key=labels.count)
    return top if labels.count(top) * 2 > len(labels) else "mixed"


MARGIN = 0.05  # a cell whose median share is within this of a threshold counts as saturated: one run's noise


def _median(runs, column: str) -> float | None:
    import statistics

    values = [v for v in (_num(x) for x in runs[column]) if v is not None] if column in runs else []
    return statistics.median(values) if values else None


def cell(runs) -> tuple[str, str]:
    """(bound, reason) of a cell from its runs' rows (a results frame): not a vote of the runs' labels,
    which flips when runs straddle a threshold, but the rules applied once to the median of the runs'
    CPU shares and device busy shares, each threshold lowered by MARGIN. Emulated tiers' throttle use is
    not in the rows: that side counts as saturated when most runs' labels say so."""
    labels = [str(x) for x in runs.get("bound", []) if x == x and str(x)]
    if not labels:
        return "", ""
    states = [str(x) for x in runs.get("cache_state", [])]
    if sum(s in FROM_MEMORY for s in states) * 2 > len(states):
        return "cache", _first_reason(runs, "cache")
    share, machine = _median(runs, "cpu_share"), _median(runs, "machine_cpu_busy")
    if share is None:
        top = cell_bound(labels)
        return top, _first_reason(runs, top)
    cpu_full = share >= CPU_SATURATED - MARGIN or (machine is not None and machine >= CPU_SATURATED - MARGIN)
    busy = _median(runs, "device_busy")
    throttled = sum(x in ("storage", "mixed") for x in labels) * 2 > len(labels)
    storage_full = throttled or (busy is not None and busy >= STORAGE_SATURATED - MARGIN)
    top = (
        "mixed"
        if cpu_full and storage_full
        else "cpu"
        if cpu_full
        else "storage"
        if storage_full
        else "latency"
    )
    reason = _first_reason(runs, top)
    if top not in labels or labels.count(top) * 2 <= len(labels):  # the median decided what the runs split on
        nan = float("nan")
        cores = _median(runs, "cpu_cores_busy")
        usable = _median(runs, "cpu_cores_usable")
        dev = f", device busy {busy:.0%}" if busy is not None else ""
        reason = (
            f"median of {len(labels)} runs: {nan if cores is None else cores:.2f} of "
            f"{nan if usable is None else usable:.0f} usable cores busy (CPU share {share:.0%})"
            f"{_machine(share, machine)}{dev}; "
            f"within {MARGIN * 100:.0f} points of saturation ({CPU_SATURATED:.0%} of the cores, "
            f"{STORAGE_SATURATED:.0%} of the device) counts as saturated"
            f"{', though no run alone reached it' if top not in labels else ''} (runs: "
            f"{', '.join(f'{k} {labels.count(k)}' for k in sorted(set(labels)))})"
        )
    return top, reason


def _machine(share: float, machine: float | None) -> str:
    """The machine's CPUs beside a cell's own share: the figure that decided ``cpu`` when other processes
    took the cores the cell's share does not show."""
    if machine is None:
        return ""
    decided = share < CPU_SATURATED - MARGIN <= machine
    return f", the machine's CPUs {machine:.0%} busy" + (
        " (other processes took the rest)" if decided else ""
    )


def _first_reason(runs, label: str) -> str:
    if "bound_reason" not in runs:
        return ""
    match = [r for b, r in zip(runs["bound"], runs["bound_reason"]) if b == label]
    return str(match[0]) if match else ""


def overlap_bound(one) -> str:
    """What threads can add on a drive that serves one read at a time, from the 1-thread runs' own
    records: the drive was busy a share X of the run, so overlapping the rest (decode) with its reads
    can make the run at most 1/X times as fast ('' without the drive's busy time)."""
    busy = one["device_busy"].median() if "device_busy" in one else float("nan")
    rate = one["images_per_s"].median()
    if busy != busy or busy <= 0 or not rate:
        return ""
    per_file = 1000 / rate
    return (
        f"; at 1 thread the drive was already {min(busy, 1):.0%} busy (a read {busy * per_file:.1f} ms vs "
        f"the decode and the rest {max(1 - busy, 0) * per_file:.1f} ms per file), so overlapping them can "
        f"add at most {1 / min(busy, 1):.2f}× if the drive serves one read at a time"
    )
