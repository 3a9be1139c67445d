"""The deployment's one clock in milliseconds, as Kafka timestamps, Redis scripts and deadlines count it.

A deadline one gateway stores (a transaction's timeout, a share-group record lock, a delayed
message's delivery time, a session's expiry) is compared by whichever gateway reads it next, so
every gateway must count on one clock that a step of its own host's wall clock cannot move. That
clock is Redis's `TIME`, which the store reads at start-up and every few seconds
(`Store.sync_clock`), carried forward in between by this process's monotonic clock, which an NTP
step or `date -s` leaves alone. Before the first reading, and in processes that never take one (the
CLI, benchmarks, clients), it is the wall clock.
"""

from __future__ import annotations

import time


class _Reference:
    """Redis's clock less the monotonic clock, in ms, as last read; None until the first reading."""

    offset_ms: float | None = None


def follow(reference_ms: float, at_monotonic: float) -> None:
    """From now on count from `reference_ms`, the reference clock's reading at `at_monotonic` (seconds
    of `time.monotonic()`)."""
    _Reference.offset_ms = reference_ms - at_monotonic * 1000


def now_ms() -> int:
    """Milliseconds since the epoch, on the reference clock once it has been read."""
    offset = _Reference.offset_ms
    if offset is None:
        return int(time.time() * 1000)
    return int(time.monotonic() * 1000 + offset)
