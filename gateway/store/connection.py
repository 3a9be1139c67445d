"""The Redis connection, chosen by URL, and the one place Redis's exceptions become ours.

`redis://` and `rediss://` name one Redis; `redis+cluster://host:port` (or `rediss+cluster://`)
names any node of a Redis Cluster, whose other nodes are discovered from it. Every key of a
partition (and of a group, of the transaction coordinator) shares one hash tag, so each script
runs in one slot and the rest of the store does not care which of the two it talks to.

Outside the store, this module is the one door to a raw client, for what must look beneath the
store on purpose: the benchmarks' raw-Redis baselines and tests reading keys. A `Store` never
hands its own client out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

from redis import exceptions as rexc
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.connection import AbstractConnection, Connection
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from gateway.errors import StorageUnavailable
from gateway.telemetry import redis_round_trip

log = logging.getLogger(__name__)

UNAVAILABLE = (rexc.ConnectionError, rexc.TimeoutError, rexc.BusyLoadingError, rexc.ClusterDownError, OSError)
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

RedisClient = Redis | RedisCluster
"""Either client: both take the same commands; pipelines differ (see `Scripts.call_many`)."""


def is_cluster_url(url: str) -> bool:
    return url.partition("://")[0] in CLUSTER_SCHEMES


def connect(url: str, *, max_connections: int = 64) -> RedisClient:
    """A client that retries a dropped connection briefly, then lets the caller see the outage."""
    options: dict[str, Any] = {
        "decode_responses": False,
        "max_connections": max_connections,  # per node on a cluster
        "socket_connect_timeout": 2,
        "health_check_interval": 10,
        "socket_read_size": 1 << 20,  # a fetch reads megabyte batches: 16 reads of 64 KB cost more
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.02), 3),
        "retry_on_error": [rexc.ConnectionError, rexc.TimeoutError, rexc.BusyLoadingError],
    }
    scheme, _, rest = url.partition("://")
    client: RedisClient
    if scheme in CLUSTER_SCHEMES:
        client = RedisCluster.from_url(f"{CLUSTER_SCHEMES[scheme]}://{rest}", **options)
        nodes = client.nodes_manager
        nodes.connection_kwargs["connection_class"] = _counted(nodes.connection_kwargs.get("connection_class", Connection))
        for node in nodes.startup_nodes.values():
            node.connection_class = _counted(node.connection_class)
    else:
        client = Redis.from_url(url, **options)
        client.connection_pool.connection_class = _counted(client.connection_pool.connection_class)
    return client


_COUNTED: dict[type[Any], type[Any]] = {}


def _counted(base: type[Any]) -> type[Any]:
    """`base` (a connection class) whose writes count as round trips of the request being handled
    (`telemetry`): the one hook that sees every command and pipeline sent, on one Redis or a cluster."""
    if base in _COUNTED:
        return _COUNTED[base]
    send = base.send_packed_command

    async def send_packed_command(
        self: AbstractConnection, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        if check_health:  # a connection's own handshake and health checks are not the caller's
            redis_round_trip()
        await send(self, command, check_health)

    counted = _COUNTED[base] = type(f"Counted{base.__name__}", (base,), {"send_packed_command": send_packed_command})
    return counted


@asynccontextmanager
async def storage_errors() -> AsyncIterator[None]:
    """Turn Redis being away into the retriable `StorageUnavailable`."""
    try:
        yield
    except UNAVAILABLE as exc:
        raise StorageUnavailable(f"redis unavailable: {exc}") from exc


async def wait_reachable(redis: RedisClient, url: str, timeout: float) -> None:
    """PING until Redis answers, quietly: for `timeout` seconds, and for as long as it answers that it
    is still loading its data (a slow start, not an absent server). Then `StorageUnavailable` saying
    why, in one line."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    problem = "no answer"
    while (left := deadline - loop.time()) > 0:
        try:
            async with asyncio.timeout(left):
                await redis.ping()
            return
        except TimeoutError:
            break
        except rexc.BusyLoadingError:
            if problem != "loading":
                log.info("Redis at %s is loading its data; waiting for it", url)
            problem, deadline = "loading", loop.time() + timeout
        except (rexc.RedisError, rexc.RedisClusterException, OSError) as exc:  # the latter is no RedisError
            problem = " ".join(str(exc).split()).rstrip(".") or type(exc).__name__
        await asyncio.sleep(min(0.2, max(0.0, deadline - loop.time())))
    raise StorageUnavailable(f"cannot reach Redis at {url}: {problem}")
