"""The cluster-wide broker configs (`keys.CLUSTER_CONFIG`): one msgpack value, replaced whole by one
script that checks the version it was computed from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack

from gateway.errors import ErrorCode
from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts


class ClusterConfigStore:
    def __init__(self, redis: RedisClient, scripts: Scripts, key: str = keys.CLUSTER_CONFIG) -> None:
        """`key`: another set of configs kept the same way (a share group's; the client-metrics
        subscriptions, a map of maps)."""
        self.redis = redis
        self.scripts = scripts
        self.key = key

    async def get(self) -> tuple[int, dict[str, Any]]:
        """(version, configs); version 0 when none were ever set."""
        async with storage_errors():
            raw: bytes | None = await self.redis.get(self.key)  # type: ignore[assignment]
        if raw is None:
            return 0, {}
        d = msgpack.unpackb(raw, raw=False)
        return int(d["v"]), dict(d["c"] or {})

    async def alter(self, change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """Set the configs `change` computes (it may raise) from the current ones; computed again
        when another change came first."""
        while True:
            version, current = await self.get()
            new = change(current)
            async with storage_errors():
                reply = await self.scripts.call(
                    "cluster-config-1", [self.key], [version, msgpack.packb(new)],  # version, config
                )
            if reply[0] == ErrorCode.OK:
                return new
