"""Redis's memory, read per primary: the log's disk, its size and its policy.

Every primary is asked (a Cluster's each, Sentinel's current primary): `INFO memory` gives the
bytes Redis counts against `maxmemory`, the limit and the `maxmemory-policy`, in one command cheap
enough to sample several times a second. At start-up `CONFIG GET` is asked first, as the
authoritative source, and `INFO memory` stands in where a managed Redis renames or forbids CONFIG.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.replication import Replication

NOEVICTION = "noeviction"


@dataclass(frozen=True)
class PrimaryMemory:
    address: str  # host:port of the primary
    used: int  # bytes Redis counts against maxmemory (used_memory less what it does not count for eviction)
    maxmemory: int  # 0: no limit
    policy: str  # maxmemory-policy

    @property
    def evicting(self) -> bool:
        """Whether Redis would delete keys to make room: any policy but noeviction."""
        return self.policy != NOEVICTION


def _from_info(address: str, info: dict[str, Any]) -> PrimaryMemory:
    used = int(info.get("used_memory", 0)) - int(info.get("mem_not_counted_for_evict", 0))
    return PrimaryMemory(address, used, int(info.get("maxmemory", 0)), str(info.get("maxmemory_policy", NOEVICTION)))


async def _configured(redis: RedisClient, node: dict[str, Any]) -> dict[str, Any]:
    """maxmemory and its policy as CONFIG GET says, else as INFO memory says (CONFIG disabled)."""
    info: dict[str, Any] = await redis.info("memory", **node)
    try:
        conf: dict[Any, Any] = await redis.config_get("maxmemory*", **node)
    except ResponseError:  # renamed or forbidden by a managed service: INFO memory says the same
        return info
    conf = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in conf.items()}
    if "maxmemory-policy" in conf:
        info = {**info, "maxmemory_policy": conf["maxmemory-policy"], "maxmemory": conf.get("maxmemory", 0)}
    return info


class MemoryStore:
    def __init__(self, redis: RedisClient, replication: Replication) -> None:
        self._redis = redis
        self._replication = replication

    async def primaries(self, *, configured: bool = False) -> list[PrimaryMemory]:
        """Each primary's memory, read now; `configured` asks CONFIG GET for the limit and policy
        (start-up), else INFO memory alone (the periodic sample)."""
        if configured:
            found = await self._replication.on_primaries(_configured)
        else:
            found = await self._replication.on_primaries(lambda redis, node: redis.info("memory", **node))
        return [_from_info(addr, info) for addr, info in sorted(found)]

    def primary_of(self, topic: str, partition: int) -> str:
        """"host:port" of the primary holding the partition."""
        return self._replication.address(keys.log(topic, partition))

    async def partition_bytes(self, topic: str, partitions: int) -> list[int]:
        """Bytes each partition's keys take in Redis (MEMORY USAGE, which samples a stream's nodes
        rather than walking it: an estimate for sizes, never read on a request's path)."""
        per = [_partition_keys(topic, p) for p in range(partitions)]
        async with storage_errors():
            pipe = self._redis.pipeline(transaction=False)
            for names in per:
                for name in names:
                    pipe.execute_command("MEMORY", "USAGE", name)
            sizes = await pipe.execute()
        out, i = [], 0
        for names in per:
            out.append(sum(int(s or 0) for s in sizes[i:i + len(names)]))
            i += len(names)
        return out


def _partition_keys(topic: str, partition: int) -> list[str]:
    """The keys that make a partition's log: its streams (a compacted one's cleaned generations too),
    its offsets, producers and transaction indexes."""
    return [keys.log(topic, partition), keys.clean_log(topic, partition, 0), keys.clean_log(topic, partition, 1),
            keys.meta(topic, partition), keys.producers(topic, partition), keys.open_txns(topic, partition),
            keys.aborted_txns(topic, partition), keys.expected_txns(topic, partition)]
