"""Each group's lag over time: a capped stream beside the group's own keys (`keys.group_lag`),
appended by the lag sampler role and deleted with the group (`group-delete-5`, `cgroup-delete-4`)."""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts

PartitionLags = dict[str, list[tuple[int, int]]]
"""topic -> [(partition, lag), ...]"""


@dataclass(frozen=True)
class LagSample:
    group_id: str
    timestamp: int  # ms, Redis's clock when it was appended (the entry id)
    total: int
    partitions: PartitionLags
    share: bool = False  # a share group's: it commits no offsets to guard the append by


class LagHistoryStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    async def append(self, samples: list[LagSample], max_age_ms: int, max_points: int) -> int:
        """One sample per group in one round trip; a group deleted meanwhile (no committed offsets
        left; a share group's expires a max age after) gets none. Returns how many were appended."""
        if not samples:
            return 0
        async with storage_errors():
            replies = await self.scripts.call_many([
                ("lag-append-2",
                 [keys.group_lag(s.group_id), keys.group_lag(s.group_id) if s.share else keys.group_offsets(s.group_id)],
                 # total, partitions, max_age_ms, max_points, guarded
                 [s.total, msgpack.packb({t: [list(pl) for pl in ps] for t, ps in s.partitions.items()}),
                  max_age_ms, max_points, 0 if s.share else 1])
                for s in samples
            ])
        for r in replies:
            if isinstance(r, Exception):
                raise r
        return sum(1 for r in replies if r is not None)

    async def forget(self, group_id: str) -> None:
        """A deleted share group's history (the other protocols' go in their delete scripts)."""
        async with storage_errors():
            await self.redis.delete(keys.group_lag(group_id))

    async def read(self, group_id: str, since_ms: int = 0) -> list[LagSample]:
        """The group's samples from `since_ms` on, oldest first."""
        async with storage_errors():
            entries: list[tuple[bytes, dict[bytes, bytes]]] = await self.redis.xrange(  # type: ignore[assignment]
                keys.group_lag(group_id), min=f"{since_ms}-0")
        out = []
        for entry_id, fields in entries:
            ms = int(entry_id.split(b"-")[0])
            parts = msgpack.unpackb(fields[b"p"], strict_map_key=False)
            out.append(LagSample(group_id, ms, int(fields[b"t"]),
                                 {t: [(int(p), int(lag)) for p, lag in ps] for t, ps in parts.items()}))
        return out
