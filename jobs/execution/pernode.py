"""A multi-node run's figures per node, and its cache state judged node by node.

Each task of a run reads its own node's counters over its timed interval (its process's device and
syscall bytes, the data device's sectors and busy time in /proc/diskstats, the node's CPU ticks). Nodes
on one kernel (containers, or the namespaced test cluster) share its block-device counters: they are
taken once, on the first such node, and the others name it (``device_counted_on``)."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def figures(results: list[dict]) -> list[dict]:
    """The run's figures per node, in node order: its tasks' images, bytes consumed and read (each task's
    own process counters, summed), and its data device's counters over the node's timed window (from its
    first task's start to its last task's end, ``/proc/diskstats``) with the node's CPU busy share. Nodes
    on one kernel share its counters: they are taken once, on the first such node, and the others say
    which node holds them (``device_counted_on``)."""
    from jobs.observe.usage import SECTOR

    hosts: dict[str, list[dict]] = {}
    for r in results:
        hosts.setdefault(r.get("host") or "?", []).append(r)
    kernels: dict[str, list[dict]] = {}
    for r in results:
        kernels.setdefault(r.get("kernel") or r.get("host") or "?", []).append(r)
    counted_on = {k: min(r.get("host") or "?" for r in rs) for k, rs in kernels.items()}

    def span(rs: list[dict], key: str, i: int) -> int | None:
        starts = [r.get(f"{key}_start") for r in rs]
        ends = [r.get(f"{key}_end") for r in rs]
        if any(v is None for v in starts + ends):
            return None
        return max(e[i] for e in ends) - min(s_[i] for s_ in starts)

    out = []
    for host in sorted(hosts):
        rs = hosts[host]
        kernel = rs[0].get("kernel") or host
        own = max(max(r["t_end"] for r in rs) - min(r["t_start"] for r in rs), 1e-9)
        mine = counted_on[kernel] == host
        krs = kernels[kernel]
        window = max(max(r["t_end"] for r in krs) - min(r["t_start"] for r in krs), 1e-9)
        sectors, busy_ms = span(krs, "node_disk", 1), span(krs, "node_disk", 2)
        busy_ticks, all_ticks = span(krs, "node_cpu", 0), span(krs, "node_cpu", 1)

        def total(key, rs=rs):
            vals = [r.get(key) for r in rs]
            return None if any(v is None for v in vals) else sum(vals)

        out.append(
            {
                "host": host,
                "tasks": len(rs),
                "ranks": sorted(r["rank"] for r in rs),
                "images": sum(r["images"] for r in rs),
                # the node's own rate: its images over its own window (its first task's start to its
                # last one's end)
                "images_per_s": sum(r["images"] for r in rs) / own,
                "seconds": own,
                "bytes_consumed": sum(r["bytes_consumed"] for r in rs),
                "bytes_read_device": total("bytes_read_device"),
                "bytes_read_syscall": total("bytes_read_syscall"),
                "disk": rs[0].get("node_disk"),
                "device_read_bytes": sectors * SECTOR if mine and sectors is not None else None,
                "device_busy": min(1.0, busy_ms / 1000 / window) if mine and busy_ms is not None else None,
                "machine_cpu_busy": busy_ticks / all_ticks
                if mine and busy_ticks is not None and all_ticks
                else None,
                "device_counted_on": counted_on[kernel],
            }
        )
    return out


def cache_state(
    per_node: list[dict] | None, state: str, requested: str, backend, fs_type: str, key: str = "storage"
) -> str:
    """A multi-node run's cache state: each node judged by its own tasks' device bytes against what they
    consumed (kept in ``per_node``); a run is cold only where every node was, else it takes the state of
    the first node that was not (a node served from its page cache makes the run's numbers memory's). On
    an object store every node's task reads from every node's server: the run's servers' reads against
    all it consumed judge it, and each node takes that state. ``key``: where the tier sits in the config
    (storage, stage), named if its kind answers what is no cache state."""
    from jobs.storage import cache

    if not per_node or len(per_node) < 2:
        return state
    if backend.requests:  # a node's GETs are served by every node's volumes: the run is judged whole
        for node in per_node:
            node["cache_state"] = state
        return state
    for node in per_node:
        node["cache_state"] = backend.judged(
            requested, fs_type, node["bytes_read_device"], node["bytes_consumed"], key
        )
    off = [n for n in per_node if n["cache_state"] != state]
    if off and state in (cache.COLD, cache.WARM):
        log.warning(
            "node %s's share was %s where the run as a whole was %s: the run counts as %s",
            off[0]["host"],
            off[0]["cache_state"],
            state,
            off[0]["cache_state"],
        )
        return off[0]["cache_state"]
    return state
