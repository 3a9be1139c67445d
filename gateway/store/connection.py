"""The Redis connection, chosen by URL, and the one place Redis's exceptions become ours."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis import exceptions as rexc
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from gateway.errors import StorageUnavailable

UNAVAILABLE = (rexc.ConnectionError, rexc.TimeoutError, rexc.BusyLoadingError, OSError)


def connect(url: str, *, max_connections: int = 64) -> Redis:
    """A client that retries a dropped connection briefly, then lets the caller see the outage."""
    return Redis.from_url(
        url,
        decode_responses=False,
        max_connections=max_connections,
        socket_connect_timeout=2,
        health_check_interval=10,
        socket_read_size=1 << 20,  # a fetch reads megabyte batches: 16 reads of 64 KB cost more
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.02), 3),
        retry_on_error=[rexc.ConnectionError, rexc.TimeoutError, rexc.BusyLoadingError],
    )


@asynccontextmanager
async def storage_errors() -> AsyncIterator[None]:
    """Turn Redis being away into the retriable `StorageUnavailable`."""
    try:
        yield
    except UNAVAILABLE as exc:
        raise StorageUnavailable(f"redis unavailable: {exc}") from exc
