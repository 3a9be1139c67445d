"""KIP-714's client telemetry in Redis: the client-metrics subscriptions every gateway reads (one
versioned msgpack value, replaced as the cluster-wide configs are) and each client instance's push
state, so a client that moves to another gateway is held to the same push interval."""

from __future__ import annotations

from gateway.store import keys
from gateway.store.cluster_config import ClusterConfigStore
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts


class ClientMetricsStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.scripts = scripts
        self.subscriptions = ClusterConfigStore(redis, scripts, key=keys.CLIENT_METRICS)

    async def get(self, client: str, now: int, version: int, sid: int, interval_ms: int, ttl_ms: int) -> str:
        """A GetTelemetrySubscriptions: 'ok' or 'throttled'."""
        async with storage_errors():
            # now, version, sid, interval, ttl
            reply = await self.scripts.call("telemetry-get-1", [keys.telemetry_client(client)],
                                            [now, version, sid, interval_ms, ttl_ms])
        return reply.decode() if isinstance(reply, bytes) else str(reply)

    async def push(self, client: str, now: int, version: int, sid: int, interval_ms: int, ttl_ms: int,
                   pushed_sid: int, terminating: bool, payload: str) -> str:
        """A PushTelemetry: 'ok' or what it was refused for (`lua/telemetry-push-1.lua`)."""
        async with storage_errors():
            # now, version, sid, interval, ttl, pushed_sid, terminating, payload
            reply = await self.scripts.call("telemetry-push-1", [keys.telemetry_client(client)],
                                            [now, version, sid, interval_ms, ttl_ms, pushed_sid,
                                             1 if terminating else 0, payload])
        return reply.decode() if isinstance(reply, bytes) else str(reply)
