"""What the faces count as they work: requests, errors and latency per API, bytes per topic,
connections per listener.

The counters are plain integers bumped on the event loop's thread, so the hot paths pay a dict
lookup and a few additions per request (never per record), with no lock and no label resolution;
`gateway.admin.metrics` turns them into Prometheus families when it is scraped. They belong to the
process: gateways sharing one process (tests) share them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
"""Upper bounds (seconds) of the request latency histogram, +Inf after them."""


class ApiStats:
    """Requests of one API on one face: how many, which error codes they answered, how long they took."""

    __slots__ = ("requests", "errors", "buckets", "seconds")

    def __init__(self) -> None:
        self.requests = 0
        self.errors: dict[str, int] = {}
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # per bucket, not cumulative; the last is +Inf
        self.seconds = 0.0

    def done(self, seconds: float) -> None:
        """One request answered (or failed) after `seconds`."""
        self.requests += 1
        self.seconds += seconds
        self.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1

    def failed(self, code: str) -> None:
        """One request answered with error `code` (counted once per code it carried)."""
        self.errors[code] = self.errors.get(code, 0) + 1


class ListenerStats:
    """Connections of one listener: open now, accepted since start, refused over the limit."""

    __slots__ = ("open", "accepted", "refused")

    def __init__(self) -> None:
        self.open = 0
        self.accepted = 0
        self.refused = 0


APIS: dict[tuple[str, str], ApiStats] = {}
"""(face, api) -> its stats."""
PRODUCED: dict[tuple[str, str], int] = {}
"""(face, topic) -> record batch bytes appended to the log."""
FETCHED: dict[tuple[str, str], int] = {}
"""(face, topic) -> record batch bytes sent to consumers."""
LISTENERS: dict[str, ListenerStats] = {}
CLEANED: dict[str, tuple[int, int, int]] = {}
"""topic -> (log cleaner passes, bytes they read, bytes they removed) on this process."""


class TierStats:
    """Tiered storage on this process: what the copier wrote, what remote reads fetched."""

    def __init__(self) -> None:
        self.bytes_copied = 0
        self.segments_copied = 0
        self.copy_lag_bytes: dict[str, int] = {}  # topic -> bytes of its log not copied yet, at the last pass
        self.remote_fetches = 0
        self.remote_fetch_bytes = 0
        self.remote_fetch_seconds = 0.0
        self.remote_fetch_buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # as ApiStats.buckets: per bucket, +Inf last
        self.remote_errors = 0
        self.cache_hits = 0
        self.cache_misses = 0
        self.read_ahead_hits = 0

    def fetched(self, size: int, seconds: float) -> None:
        self.remote_fetches += 1
        self.remote_fetch_bytes += size
        self.remote_fetch_seconds += seconds
        self.remote_fetch_buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1


TIER = TierStats()


def api(face: str, name: str) -> ApiStats:
    """The stats of `name` on `face`; callers on hot paths keep the object rather than look it up."""
    stats = APIS.get((face, name))
    if stats is None:
        stats = APIS[(face, name)] = ApiStats()
    return stats


def produced(face: str, topic: str, size: int) -> None:
    key = (face, topic)
    PRODUCED[key] = PRODUCED.get(key, 0) + size


def fetched(face: str, topic: str, size: int) -> None:
    key = (face, topic)
    FETCHED[key] = FETCHED.get(key, 0) + size


def cleaned(topic: str, read: int, removed: int) -> None:
    """One cleaner pass over a partition of `topic`."""
    passes, was_read, was_removed = CLEANED.get(topic, (0, 0, 0))
    CLEANED[topic] = (passes + 1, was_read + read, was_removed + removed)


def listener(name: str) -> ListenerStats:
    stats = LISTENERS.get(name)
    if stats is None:
        stats = LISTENERS[name] = ListenerStats()
    return stats


_ROUND_TRIPS: ContextVar[list[int] | None] = ContextVar("gateway_redis_round_trips", default=None)


def redis_round_trip() -> None:
    """One write of commands to Redis (a command, or a pipeline to one node): counted for the request
    being handled, if it counts (`counting_round_trips`); tasks it starts count with it."""
    counter = _ROUND_TRIPS.get()
    if counter is not None:
        counter[0] += 1


def uncounted_round_trips() -> None:
    """The rest of the current task's round trips are no longer its request's: the request does not
    wait for them (the task runs on after answering)."""
    _ROUND_TRIPS.set(None)


@contextmanager
def counting_round_trips() -> Iterator[list[int]]:
    """Count the Redis round trips of the block (and of the tasks it starts) in the list's one item:
    what a request costs in Redis, whatever the machine's load."""
    counter = [0]
    token = _ROUND_TRIPS.set(counter)
    try:
        yield counter
    finally:
        _ROUND_TRIPS.reset(token)
