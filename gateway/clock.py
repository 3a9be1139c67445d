"""The wall clock in milliseconds, as Kafka timestamps, Redis scripts and deadlines count it."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the epoch."""
    return int(time.time() * 1000)
