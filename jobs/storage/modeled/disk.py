"""A hard disk served from its physics: seek curve, rotation, media rate, look-ahead and a command
queue served shortest-positioning-time-first (NCQ).

The model keeps the head's position (a byte offset on the disk) and the platter's angle (from the
clock: one revolution every 60/rpm s). A request at byte ``p`` of ``n`` bytes costs

- **seek**: 0 on the same track, else ``track_to_track + (full_stroke - track_to_track) * sqrt(d / capacity)``
  for a distance of ``d`` bytes (the square-root curve of short seeks, Ruemmler & Wilkes, "An
  introduction to disk drive modeling", IEEE Computer 1994). ``full_stroke`` follows from the
  datasheet's average seek: for two uniform positions E[sqrt(d)] = 8/15 of the stroke's, so
  ``average = track_to_track + (full_stroke - track_to_track) * 8/15``.
- **rotation**: the wait, after the seek, until byte ``p`` passes under the head; a track holds
  ``media rate x revolution time`` bytes and ``p``'s angle is its place on its track.
- **transfer**: ``n / media rate``.
- **cache**: the drive keeps what it read in ``cache_segments`` segments of at most
  ``cache_mb / cache_segments`` each (least recently used goes); while it is idle it reads ahead of
  the last request into that request's segment (up to ``lookahead_mb``). A read inside a segment
  pays only the command overhead and the bytes past the segment's end: sequential reads pay no
  positioning, and streams read side by side keep theirs.

Up to ``queue_depth`` outstanding requests are the drive's command queue; the drive serves the one
with the shortest positioning time (seek + rotation) next. Requests beyond that wait in arrival
order, as in the host's queue. One request is served at a time.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class HddGeometry:
    """A drive's datasheet figures (defaults: a 4 TB 7,200 rpm enterprise SATA/SAS drive; docs/storage.md,
    "Modelled tiers", gives the sources)."""

    capacity_gb: float = 4000.0  # bytes over which the seek curve runs (1 GB = 1e9 B)
    rpm: float = 7200.0
    average_seek_ms: float = 8.2  # datasheet, read, typical
    track_to_track_ms: float = 0.5  # single-track seek, read
    media_mb_s: float = 171.0  # sustained transfer rate, outer zone (1 MB = 1e6 B)
    command_overhead_ms: float = 0.1  # controller time per command
    lookahead_mb: float = 2.0  # what the drive reads ahead into its buffer after a request
    cache_mb: float = 64.0  # the drive's buffer (1 MB = 1e6 B)
    cache_segments: int = 16  # streams the buffer holds at once (each at most cache_mb / cache_segments)
    queue_depth: int = 32  # NCQ: commands the drive may reorder (1: served in arrival order)

    @property
    def revolution_s(self) -> float:
        return 60.0 / self.rpm

    @property
    def track_bytes(self) -> float:
        return self.media_mb_s * 1e6 * self.revolution_s

    @property
    def full_stroke_ms(self) -> float:
        return self.track_to_track_ms + (self.average_seek_ms - self.track_to_track_ms) * 15.0 / 8.0

    def seek_s(self, distance: float) -> float:
        if abs(distance) < self.track_bytes:
            return 0.0
        frac = min(1.0, abs(distance) / (self.capacity_gb * 1e9))
        return (
            self.track_to_track_ms + (self.full_stroke_ms - self.track_to_track_ms) * math.sqrt(frac)
        ) / 1e3

    def angle(self, position: float) -> float:
        """Where byte ``position`` sits on its track, as a fraction of a revolution."""
        return (position % self.track_bytes) / self.track_bytes

    def positioning_s(self, head: float, position: float, now: float) -> float:
        """Seek plus rotational wait to reach ``position`` from ``head`` starting at time ``now``."""
        seek = self.seek_s(position - head)
        under = ((now + seek) / self.revolution_s) % 1.0  # angle under the head when the seek ends
        return seek + ((self.angle(position) - under) % 1.0) * self.revolution_s

    def transfer_s(self, size: int) -> float:
        return size / (self.media_mb_s * 1e6)

    def summary(self) -> str:
        """The figures a reader of the log checks first, as this cell's ``storage.model`` set them."""
        return (
            f"{self.capacity_gb:g} GB {self.rpm:g} rpm HDD: {self.average_seek_ms:g} ms average seek, "
            f"{self.track_to_track_ms:g} ms track-to-track, {self.media_mb_s:g} MB/s media rate, "
            f"queue depth {self.queue_depth}"
        )

    def check(self) -> str | None:
        """Why these figures cannot describe a drive (None when they can)."""
        for name in ("capacity_gb", "rpm", "average_seek_ms", "media_mb_s"):
            if not getattr(self, name) > 0:
                return f"{name}={getattr(self, name)} must be positive"
        if not 0 <= self.track_to_track_ms <= self.average_seek_ms:
            return f"track_to_track_ms={self.track_to_track_ms} must lie between 0 and average_seek_ms"
        if self.command_overhead_ms < 0 or self.lookahead_mb < 0:
            return "command_overhead_ms and lookahead_mb must not be negative"
        if self.cache_segments < 1 or self.cache_mb <= 0:
            return f"cache_segments={self.cache_segments} and cache_mb={self.cache_mb} must be positive"
        if not 1 <= self.queue_depth <= 256:
            return f"queue_depth={self.queue_depth} must be 1..256"
        return None


@dataclass
class Counters:
    """What the drive served, in /proc/diskstats's terms (reads, sectors, busy ms, weighted ms)."""

    reads: int = 0
    read_bytes: int = 0
    writes: int = 0
    write_bytes: int = 0
    busy_s: float = 0.0  # time the drive was serving a request
    weighted_s: float = 0.0  # sum over requests of submit-to-completion time (mean queue depth x time)
    max_queue: int = 0
    # sum over requests of the requests in flight when each was submitted, itself included: divided by the
    # requests, how many the drive had at once as it saw them, whatever the CPUs' load did to wall time
    in_flight_at_submit: int = 0
    late: int = 0  # requests whose bytes reached the layer after their modelled completion
    late_s: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _Request:
    position: float
    size: int
    write: bool
    submitted: float
    done: threading.Event = field(default_factory=threading.Event)
    finished: float = 0.0


class Disk:
    """The drive: ``serve(position, size, write)`` blocks for as long as the drive would take."""

    def __init__(self, geometry: HddGeometry, clock=time.monotonic, sleep=time.sleep):
        self.g = geometry
        self.clock, self.sleep = clock, sleep
        self.counters = Counters()
        self._pending: list[_Request] = []
        self._in_flight = 0  # submitted and not yet finished (the one being served included)
        self._cv = threading.Condition()
        self._head = 0.0
        self._segments: list[list[float]] = []  # cached [start, end) byte ranges, least recently used first
        self._last_done = 0.0
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="disk", daemon=True)
        self._thread.start()

    def submit(self, position: float, size: int, write: bool = False) -> _Request:
        """Queue a request; ``wait`` for it. The caller may do the real I/O in between."""
        r = _Request(float(position), int(size), write, self.clock())
        with self._cv:
            self._pending.append(r)
            self._in_flight += 1
            self.counters.max_queue = max(self.counters.max_queue, len(self._pending))
            self.counters.in_flight_at_submit += self._in_flight
            self._cv.notify()
        return r

    def wait(self, r: _Request, ready: float | None = None) -> None:
        """Block until the drive has served ``r``; ``ready``: when the layer had the bytes (a later
        time than the drive's completion counts the request as late)."""
        r.done.wait()
        if ready is not None and ready > r.finished:
            with self._cv:
                self.counters.late += 1
                self.counters.late_s += ready - r.finished

    def serve(self, position: float, size: int, write: bool = False) -> _Request:
        r = self.submit(position, size, write)
        self.wait(r)
        return r

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()
        self._thread.join(timeout=5)

    def _segments_at(self, now: float) -> list[list[float]]:
        """The drive's cached byte ranges at ``now``: the segment that ends where the head stopped grown by
        what the drive read ahead while idle since."""
        ahead = min(self.g.lookahead_mb * 1e6, max(0.0, now - self._last_done) * self.g.media_mb_s * 1e6)
        return [[a, b + ahead] if ahead and b == self._head else [a, b] for a, b in self._segments]

    def service_s(self, r: _Request, now: float) -> float:
        """How long request ``r`` takes if the drive starts it at ``now`` (head where it is)."""
        g = self.g
        overhead = g.command_overhead_ms / 1e3
        if not r.write:
            for start, end in self._segments_at(now):
                # in the drive's cache: only the bytes past the segment are read
                if start <= r.position <= end:
                    return overhead + g.transfer_s(max(0.0, r.position + r.size - end))
        elif r.position == self._head:  # an appending write continues on the same track
            return overhead + g.transfer_s(r.size)
        return overhead + g.positioning_s(self._head, r.position, now) + g.transfer_s(r.size)

    def _next(self, now: float) -> _Request:
        window = self._pending[: self.g.queue_depth]  # the drive's command queue; the rest waits in order
        best = min(window, key=lambda r: self.service_s(r, now))
        self._pending.remove(best)
        return best

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._pending and not self._stopped:
                    self._cv.wait()
                if self._stopped:
                    for r in self._pending:
                        r.done.set()
                    return
                start = max(self.clock(), self._last_done)
                r = self._next(start)
            cost = self.service_s(r, start)
            end = start + cost
            delay = end - self.clock()
            if delay > 0:
                self.sleep(delay)
            self._finish(r, start, end)

    def _cache(self, lo: float, hi: float, start: float) -> None:
        """Keep ``[lo, hi)`` in the drive's cache as its most recent segment (merged with the segment it
        continues); a segment holds at most ``cache_mb / cache_segments``, its latest bytes."""
        segs = self._segments_at(start)  # the idle read-ahead happened before this request
        for s in segs:
            if s[0] <= lo <= s[1]:
                segs.remove(s)
                lo, hi = s[0], max(hi, s[1])
                break
        lo = max(lo, hi - self.g.cache_mb * 1e6 / self.g.cache_segments)
        segs.append([lo, hi])
        self._segments = segs[-self.g.cache_segments :]

    def _finish(self, r: _Request, start: float, end: float) -> None:
        c = self.counters
        with self._cv:
            if not r.write:
                self._cache(r.position, r.position + r.size, start)
            self._head = r.position + r.size
            self._last_done = end
            r.finished = end
            self._in_flight -= 1
            c.busy_s += end - start
            c.weighted_s += end - r.submitted
            if r.write:
                c.writes += 1
                c.write_bytes += r.size
            else:
                c.reads += 1
                c.read_bytes += r.size
        r.done.set()
