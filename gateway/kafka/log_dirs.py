"""DescribeLogDirs: where the log lives and how big it is, so `kafka-log-dirs` and UIs show sizes.

Answered as Kafka 4.4's KafkaApis.handleDescribeLogDirsRequest and ReplicaManager.describeLogDirs
do: DESCRIBE on the cluster or CLUSTER_AUTHORIZATION_FAILED (the top-level error from v3, with no
results); null topics ask for every partition; a partition not hosted is left out. Each gateway has
one log dir: its Redis (the embedded one's data dir, else the Redis URL without credentials), whose
partitions are every topic's (every gateway serves every partition). A partition's size is Redis's
MEMORY USAGE of its keys (on a tiered topic the local part alone, as Kafka's `UnifiedLog.size` counts
local segments only; the admin API shows the tiered part); total bytes are the primaries' maxmemory summed and usable bytes what is
left of it (-1 without maxmemory, Kafka's unknown), from the gateway's last memory sample. Offset
lag is 0 and no log is a future one: there is no replica movement between dirs. Versions 1-4: v0 is
gone since Kafka 4.0 (KIP-896); v5 adds cordoned dirs (KIP-1066), which the gateway has none of.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.security import CLUSTER_NAME, Operation, ResourceType
from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, RequestContext, handles


def log_dir_name(redis_url: str, data_dir: str) -> str:
    """The embedded Redis's data dir, else the Redis URL with its user and password left out."""
    if not redis_url:
        return data_dir
    parts = urlsplit(redis_url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


@handles(ApiKey.DESCRIBE_LOG_DIRS, 1, 4)
async def describe_log_dirs(ctx: RequestContext, req: Any) -> Any:
    cls = codec.response_class(ApiKey.DESCRIBE_LOG_DIRS, ctx.api_version)
    if not await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE):
        return codec.build(cls, {"throttle_time": 0, "error_code": KafkaError.cluster_authorization_failed,
                                 "results": []})
    log, memory = ctx.services.log, ctx.services.memory
    hosted = {t.name: t.partitions for t in await log.list_topics()}
    if req.topics is None:
        wanted = {name: list(range(n)) for name, n in hosted.items()}
    else:
        wanted = {}
        for t in req.topics:
            if t.topic in hosted:
                wanted.setdefault(t.topic, [])
                wanted[t.topic] += [p for p in t.partitions if 0 <= p < hosted[t.topic] and p not in wanted[t.topic]]
    topics = []
    for name, partitions in sorted(wanted.items()):
        if not partitions:
            continue
        sizes = await memory.partition_bytes(name, hosted[name])
        topics.append({"name": name, "partitions": [
            {"partition_index": p, "partition_size": sizes[p], "offset_lag": 0, "is_future_key": False}
            for p in sorted(partitions)]})
    limited = [p for p in memory.primaries if p.maxmemory]
    total = sum(p.maxmemory for p in limited) if limited else -1
    usable = sum(max(0, p.maxmemory - p.used) for p in limited) if limited else -1
    cfg = ctx.services.config
    result = {"error_code": KafkaError.none, "log_dir": log_dir_name(cfg.redis_url, str(cfg.data_dir.resolve())),
              "topics": topics, "total_bytes": total, "usable_bytes": usable}
    return codec.build(cls, {"throttle_time": 0, "error_code": KafkaError.none, "results": [result]})
