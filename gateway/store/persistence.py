"""Whether a Redis primary restarted in place keeps what it acknowledged, read at start-up.

A primary killed and started again before its replica is promoted (a supervisor restarting it within
a Cluster's node timeout, or before the Sentinels' down-after) comes back with what its AOF holds,
still a primary; its replicas, finding a new replication id, resync from it in full and drop
whatever they held beyond that, acks=all writes that Redis's WAIT saw on them included. Kafka never
loses those (a broker back from an unclean shutdown is not elected leader: KIP-966's eligible leader
replicas). With `appendfsync everysec` Redis answers writes whose AOF write it postponed behind a
background fsync still running (up to two seconds, `flushAppendOnlyFile`), so the restarted AOF can
lack them; `always` writes and fsyncs before answering; `appendonly no` restarts empty. Soak
cluster:270253204 lost two acknowledged batches so: the replica that held them resynced from its
primary, restarted 2.3 s after its kill, and was then promoted, and the idempotent producers of that
primary's partitions met their own next sequence as out of order.
"""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import ResponseError

from gateway.errors import StorageUnavailable
from gateway.store.connection import RedisClient
from gateway.store.replication import Replication

log = logging.getLogger(__name__)


async def _settings(redis: RedisClient, node: dict[str, Any]) -> tuple[str, str, int] | None:
    """(appendonly, appendfsync, replicas connected) of one primary; None where CONFIG is refused
    (a managed Redis, whose persistence is its operator's)."""
    try:
        conf: dict[Any, Any] = await redis.config_get("append*", **node)
    except ResponseError:
        return None
    text = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in conf.items()}
    info: dict[str, Any] = await redis.info("replication", **node)
    return str(text.get("appendonly", "")), str(text.get("appendfsync", "")), int(info.get("connected_slaves", 0))


async def warn_restart_loss(replication: Replication) -> list[str]:
    """Log a warning for each primary with replicas whose restart in place can take acknowledged
    writes from them (AOF off, or fsynced other than `always`); returns their "host:port"s."""
    unsafe: list[str] = []
    try:
        found_all = await replication.on_primaries(_settings)
    except StorageUnavailable as exc:  # Redis being away is no reason to warn
        log.info("could not read the Redis primaries' persistence: %s", exc)
        return unsafe
    for address, found in found_all:
        if found is None:
            continue
        appendonly, fsync, replicas = found
        if replicas and (appendonly != "yes" or fsync != "always"):
            unsafe.append(address)
            log.warning("Redis at %s (appendonly %s, appendfsync %s) resyncs its %d replica(s) from what its AOF "
                        "holds if restarted before one is promoted, and that AOF can lack acknowledged writes: "
                        "use appendonly yes and appendfsync always, or restart a failed primary only after "
                        "its failover", address, appendonly, fsync, replicas)
    return unsafe
