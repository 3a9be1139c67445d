"""Client quotas in Redis: their configuration (`keys.QUOTAS`, changed by one script per
AlterClientQuotas) and each entity's sampled usage (`keys.quota_rate`, one script per recording)."""

from __future__ import annotations

from collections.abc import Sequence

import msgpack

from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts

Entity = tuple[tuple[str, str | None], ...]
"""(entity type, name or None for <default>) pairs, sorted by type."""


class QuotaStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    async def all(self) -> dict[Entity, dict[str, float]]:
        """Every entity with a quota, and its quotas."""
        async with storage_errors():
            raw = await self.redis.hgetall(keys.QUOTAS)
        out: dict[Entity, dict[str, float]] = {}
        for field, value in raw.items():
            entity = tuple((str(t), None if n is None else str(n)) for t, n in msgpack.unpackb(field, raw=False))
            out[entity] = {str(k): float(v) for k, v in msgpack.unpackb(value, raw=False).items()}
        return out

    async def alter(self, changes: Sequence[tuple[Entity, dict[str, float | None]]]) -> None:
        """Set (a value) or remove (None) quota keys of entities, all in one script."""
        packed = [[msgpack.packb([list(p) for p in entity]),
                   [[k, "" if v is None else repr(float(v))] for k, v in ops.items()]]
                  for entity, ops in changes]
        async with storage_errors():
            await self.scripts.call("quota-alter-1", [keys.QUOTAS], [msgpack.packb(packed, use_bin_type=False)])

    async def take(self, user: str, client_id: str, now_ms: int, permits: int, rate: float, burst: float,
                   strict: bool) -> tuple[bool, float]:
        """Take controller mutations from the entity's token bucket: (taken, the tokens left)."""
        async with storage_errors():
            taken, tokens = await self.scripts.call(
                "quota-bucket-1", [keys.quota_rate("controller_mutation_rate", user, client_id)],
                [now_ms, permits, repr(float(rate)), repr(float(burst)), int(strict)],  # now, permits, rate, burst, strict
            )
        return bool(taken), float(tokens)

    async def record(self, kind: str, user: str, client_id: str, now_ms: int, amount: float,
                     window_ms: int, samples: int) -> tuple[float, int]:
        """Add `amount` to the entity's current sample; (the total over its live samples, the oldest
        live sample's start in ms)."""
        async with storage_errors():
            total, oldest = await self.scripts.call(
                "quota-record-1", [keys.quota_rate(kind, user, client_id)],
                [now_ms, repr(float(amount)), window_ms, samples],  # now, amount, window, samples
            )
        return float(total), int(oldest)
