"""A Lustre file system seen from one client: object storage targets (OSTs), files striped over them,
every request a bulk RPC that pays a network round trip.

- **Layout**: each new file gets its first OST round-robin (Lustre's allocator when the OSTs are
  balanced) and ``stripe_count`` OSTs from there; byte ``o`` of a file lies on stripe
  ``o // stripe_size``, which goes round the file's OSTs. Files already in the backing folder are
  laid out in path order, as if created in that order.
- **RPCs**: a request is split at stripe and ``rpc_mib`` boundaries; each piece is one RPC to its OST.
- **An OST** is a queue served in arrival order, one RPC at a time: ``ost_latency_ms`` (a request that
  misses the server's cache waits for a disk of its RAID) plus the bytes at ``ost_mb_s``. An RPC that
  continues the file where its last one ended streams (the server's read-ahead, the disks' sequential
  transfer): it pays the bytes only.
- **The client's link** carries every RPC's bytes at ``client_mb_s``, one RPC at a time, each in the
  first free time after its OST has served it (an RPC ready early is not held behind one that was
  submitted before it but is ready later).
- **The round trip**: half of ``rpc_rtt_ms`` before an RPC reaches its OST, half after its bytes
  crossed the link. Opening or creating a file costs one round trip (to the metadata server).
- **The client's read-ahead**: a read that continues the file where its last read ended was asked for
  by the client's read-ahead when that last read was submitted (Lustre's llite read-ahead, with RPCs
  in flight to the OSTs while the application works), so its RPCs leave then, not now: a sequential
  reader's RPCs follow each other on the OST without a gap, the link and the round trip of one
  overlapping the service of the next. One request ahead is modelled (Lustre reads further ahead,
  which changes the rate of a stream no more: the OST, or the link, is then busy without a gap).
  Writes are not read ahead, nor written behind: a write waits for its RPCs.

Rates are multiplied by ``rate_scale`` so that the machine running the model can carry them (latencies
are kept): what does not scale is what the machine cannot serve. The queues are virtual: an RPC's
completion time is computed when it is submitted (arrival order), and the caller sleeps until then.

Counters are /proc/diskstats's for the whole file system, plus the OSTs': ``busy_s`` is the busiest
resource's (one OST, or the link) busy time, so a client whose requests sit on different OSTs at once
is never called saturated; ``peak_osts`` is the most OSTs that served this client's requests at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from jobs.storage.modeled.disk import Counters

MIB = 1 << 20


@dataclass(frozen=True)
class LustreGeometry:
    """A Lustre configuration's figures (defaults: NERSC's Cori scratch, docs/storage.md, "Modelled
    tiers", gives the sources)."""

    osts: int = 248  # object storage targets
    ost_mb_s: float = 2822.6  # one OST's streaming rate, MB/s: 700 GB/s over 248 OSTs
    ost_latency_ms: float = 12.4  # a cache miss on an OST: one access of a 7,200 rpm disk of its RAID
    stripe_count: int = 1  # Lustre's default layout: a file on one OST
    stripe_size_mib: float = 1.0  # Lustre's default stripe size (1 MiB, the default RPC size)
    rpc_mib: float = 1.0  # the largest bulk RPC
    rpc_rtt_ms: float = 0.1  # round trip of one RPC: network and the servers' RPC handling
    client_mb_s: float = 6000.0  # the client node's network link, MB/s
    rate_scale: float = 1.0  # every rate times this

    def summary(self) -> str:
        """The figures a reader of the log checks first, as this cell's ``storage.model`` set them."""
        return (
            f"Lustre: {self.osts} OSTs at {self.ost_mb_s * self.rate_scale:g} MB/s each "
            f"(rates x{self.rate_scale:g}), {self.ost_latency_ms:g} ms per OST request, "
            f"{self.stripe_count} x {self.stripe_size_mib:g} MiB stripes, {self.rpc_mib:g} MiB RPCs, "
            f"{self.rpc_rtt_ms:g} ms RPC round trip"
        )

    def check(self) -> str | None:
        """Why these figures cannot describe a Lustre file system (None when they can)."""
        if not 1 <= self.osts <= 100_000:
            return f"osts={self.osts} must be 1..100000"
        if not 1 <= self.stripe_count <= self.osts:
            return f"stripe_count={self.stripe_count} must be 1..osts ({self.osts})"
        for name in ("ost_mb_s", "client_mb_s", "rate_scale", "stripe_size_mib", "rpc_mib"):
            if not getattr(self, name) > 0:
                return f"{name}={getattr(self, name)} must be positive"
        if self.ost_latency_ms < 0 or self.rpc_rtt_ms < 0:
            return "ost_latency_ms and rpc_rtt_ms must not be negative"
        if (self.stripe_size_mib * MIB) % 65536:
            return f"stripe_size_mib={self.stripe_size_mib} must be a multiple of 64 KiB, as Lustre's is"
        return None

    def ost_s(self, size: int, streaming: bool = False) -> float:
        return (0.0 if streaming else self.ost_latency_ms / 1e3) + size / (
            self.ost_mb_s * self.rate_scale * 1e6
        )

    def link_s(self, size: int) -> float:
        return size / (self.client_mb_s * self.rate_scale * 1e6)


@dataclass
class LustreCounters(Counters):
    """The HDD's counters (/proc/diskstats's terms) for the whole file system, plus the OSTs'. ``busy_s``:
    the busiest resource's busy time (one OST, or the client's link)."""

    rpcs: int = 0
    link_busy_s: float = 0.0
    osts_used: int = 0  # OSTs that served at least one RPC
    peak_osts: int = 0  # OSTs serving this client at once, at most


@dataclass(frozen=True)
class _Request:
    submitted: float
    finished: float  # its modelled completion, computed when it was submitted


class Lustre:
    """The file system: ``submit(path, offset, size, write)`` then ``wait``; the same calls as the HDD's."""

    def __init__(self, geometry: LustreGeometry, clock=time.monotonic, sleep=time.sleep):
        self.g = geometry
        self.clock, self.sleep = clock, sleep
        self.counters = LustreCounters()
        self._lock = threading.Lock()
        self._first: dict[str, int] = {}  # path -> its first OST
        # path -> (where its last request ended: the next one there streams; when that request was submitted:
        # the time the client's read-ahead asked for the next one)
        self._last: dict[str, tuple[int, float]] = {}
        self._next_ost = 0
        self._ost_free: dict[int, float] = {}  # OST -> when it ends what it was given
        self._ost_busy: dict[int, float] = {}
        self._ost_spans: list[tuple[float, float]] = []  # recent (start, end) of OST service, for peak_osts
        self._link: list[tuple[float, float]] = []  # the link's booked (start, end), in time order
        self._outstanding = 0

    # layout
    def adopt(self, files: list[tuple[str, int]]) -> None:
        """Lay out files already there ((path, size) in path order), as if created in that order."""
        for rel, _ in files:
            self._layout(rel)

    def _layout(self, path: str) -> int:
        with self._lock:
            if path not in self._first:
                self._first[path] = self._next_ost
                self._next_ost = (self._next_ost + 1) % self.g.osts
            return self._first[path]

    def ost_of(self, path: str, offset: int) -> int:
        stripe = int(offset // (self.g.stripe_size_mib * MIB))
        return (self._layout(path) + stripe % self.g.stripe_count) % self.g.osts

    def rename(self, old: str, new: str) -> None:
        with self._lock:
            for key in [k for k in self._first if k == old or k.startswith(old + "/")]:
                self._first[new + key[len(old) :]] = self._first.pop(key)
                self._last.pop(key, None)

    def alias(self, new: str, old: str) -> None:
        with self._lock:
            if old in self._first:
                self._first[new] = self._first[old]

    def forget(self, path: str) -> None:
        with self._lock:
            self._first.pop(path, None)
            self._last.pop(path, None)

    def pieces(self, path: str, offset: int, size: int) -> list[tuple[int, int]]:
        """(OST, bytes) of each RPC of a request: split at stripe and RPC boundaries."""
        out, stripe, rpc = [], int(self.g.stripe_size_mib * MIB), int(self.g.rpc_mib * MIB)
        pos, end = offset, offset + size
        while pos < end:
            cut = min(end, (pos // stripe + 1) * stripe, pos + rpc)
            out.append((self.ost_of(path, pos), cut - pos))
            pos = cut
        return out

    # service
    def opened(self, path: str) -> None:
        """An open or create: one round trip to the metadata server."""
        self._layout(path)
        if self.g.rpc_rtt_ms:
            self.sleep(self.g.rpc_rtt_ms / 1e3)

    def submit(self, path: str, offset: int, size: int, write: bool = False) -> _Request:
        g, c = self.g, self.counters
        half = g.rpc_rtt_ms / 2e3
        pieces = self.pieces(path, offset, size)
        with self._lock:
            now = self.clock()
            finished = now
            end, then = self._last.get(path, (None, now))
            streaming = end == offset
            self._last[path] = (offset + size, now)
            # a read that continues the file left with the read-ahead, when the file's last read was submitted
            sent = then if streaming and not write else now
            for ost, n in pieces:
                start = max(sent + half, self._ost_free.get(ost, 0.0))
                served = start + g.ost_s(n, streaming)
                streaming = True  # the request's next RPCs continue it
                if ost not in self._ost_busy:
                    c.osts_used += 1
                self._ost_busy[ost] = self._ost_busy.get(ost, 0.0) + (served - start)
                self._ost_free[ost] = served
                self._note_span(start, served)
                crossed = self._book_link(served, g.link_s(n), now)
                c.link_busy_s += g.link_s(n)
                finished = max(finished, crossed + half)
                c.rpcs += 1
            c.busy_s = max(c.link_busy_s, max(self._ost_busy.values(), default=0.0))
            self._outstanding += 1
            c.max_queue = max(c.max_queue, self._outstanding)
            c.in_flight_at_submit += self._outstanding
            if write:
                c.writes += 1
                c.write_bytes += size
            else:
                c.reads += 1
                c.read_bytes += size
            c.weighted_s += finished - now
        return _Request(now, finished)

    def _book_link(self, ready: float, length: float, now: float) -> float:
        """Book the link for ``length`` s in its first free time from ``ready``; returns when it ends."""
        self._link = [b for b in self._link if b[1] > now]
        start, at = ready, 0
        for i, (a, b) in enumerate(self._link):
            if b <= start:
                at = i + 1
                continue
            if start + length <= a:
                break
            start, at = max(start, b), i + 1
        self._link.insert(at, (start, start + length))
        return start + length

    def _note_span(self, start: float, end: float) -> None:
        """Keep the OST spans that may overlap later ones; count how many overlap this one's start."""
        self._ost_spans = [s for s in self._ost_spans if s[1] > start - 1.0][-4096:]
        self._ost_spans.append((start, end))
        at_once = sum(1 for a, b in self._ost_spans if a <= start < b)
        self.counters.peak_osts = max(self.counters.peak_osts, at_once)

    def wait(self, r: _Request, ready: float | None = None) -> None:
        """Sleep until ``r``'s modelled completion; ``ready``: when the layer had the bytes (later counts as
        late)."""
        delay = r.finished - self.clock()
        if delay > 0:
            self.sleep(delay)
        with self._lock:
            self._outstanding -= 1
            if ready is not None and ready > r.finished:
                self.counters.late += 1
                self.counters.late_s += ready - r.finished
