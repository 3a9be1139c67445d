"""DescribeTopicPartitions (KIP-966, API key 75): the admin client's describe of topics, paged by
partitions so a topic of many partitions takes several requests rather than one huge answer.

Follows Kafka 4.4's `DescribeTopicPartitionsRequestHandler` and `KRaftMetadataCache
.describeTopicResponse`:
- no topics asked for: every topic the principal may describe; else the named ones, each once;
  topics before the cursor's are left out, and a cursor naming a topic not asked for, or a negative
  partition, fails the whole request (INVALID_REQUEST in every topic, as `getErrorResponse` answers);
- topics are walked in name order from the cursor's partition of the cursor's topic, at least one
  and at most min(ResponsePartitionLimit, 2000) partitions (Kafka's `max.request.partition.size.limit`
  default); where the budget ends `NextCursor` names the first partition left out (partition 0 of
  the next topic when the budget ran out exactly at a topic's end);
- a named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION
  for a name Kafka refuses) with the zero id; every topic walked, found or not, says what the
  principal may do on it; one the principal may not describe answers TOPIC_AUTHORIZATION_FAILED
  with the zero id, after the others and outside the paging.
Partitions carry the same leader, replicas and ISR as Metadata, and no eligible leader replicas
(ELR belongs to KRaft's replication, which Redis stands in for).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.security import Operation, ResourceType
from gateway.errors import PartitionNotFound, TopicNotFound
from gateway.kafka import codec
from gateway.kafka.authz import authorized_operations
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import topic_name_error
from gateway.kafka.metadata import partition_entries, topic_uuid

MAX_PARTITIONS = 2000
"""Kafka's `max.request.partition.size.limit` default: the most partitions one answer carries."""


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def describe_topic_partitions(ctx: RequestContext, req: Any) -> Any:
    cls = codec.response_class(ApiKey.DESCRIBE_TOPIC_PARTITIONS, ctx.api_version)
    cursor_topic = req.cursor.topic_name if req.cursor is not None else ""
    everything = not req.topics
    if everything:
        names = {t.name for t in await ctx.services.log.list_topics() if t.name >= cursor_topic}
    else:
        names = {t.name for t in req.topics if t.name >= cursor_topic}
    cursor = req.cursor
    if cursor is not None and (cursor.partition_index < 0 or (not everything and cursor.topic_name not in names)):
        return codec.build(cls, {"throttle_time": 0, "topics": [
            {"error_code": KafkaError.invalid_request, "name": t.name, "topic_id": None, "partitions": []}
            for t in req.topics]})
    allowed: list[str] = []
    refused: list[dict[str, Any]] = []
    for name in sorted(names):
        if await ctx.allowed(ResourceType.TOPIC, name, Operation.DESCRIBE):
            allowed.append(name)
        elif not everything:  # the id is not disclosed
            refused.append({"error_code": KafkaError.topic_authorization_failed, "name": name, "topic_id": None,
                            "partitions": []})
    budget = max(1, min(MAX_PARTITIONS, req.response_partition_limit))
    topics, next_cursor = await _walk(ctx, allowed, req.cursor, budget, skip_missing=everything)
    return codec.build(cls, {"throttle_time": 0, "topics": topics + refused, "next_cursor": next_cursor})


async def _walk(
    ctx: RequestContext, names: list[str], cursor: Any, budget: int, *, skip_missing: bool
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The topics' partitions in order from the cursor, within `budget`; and the next cursor."""
    registry = ctx.services.registry
    await registry.reload()  # a reassignment just made elsewhere shows at once
    out: list[dict[str, Any]] = []
    for name in names:
        if budget == 0:
            return out, {"topic_name": name, "partition_index": 0}
        operations = await authorized_operations(ctx, ResourceType.TOPIC, name, True)
        try:
            info = await ctx.services.log.topic(name, create=False)
        except (TopicNotFound, PartitionNotFound):
            if not skip_missing:
                out.append({"error_code": topic_name_error(name) or KafkaError.unknown_topic_or_partition,
                            "name": name, "topic_id": None, "partitions": [],
                            "topic_authorized_operations": operations})
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        upper = min(info.partitions, start + budget)
        entries = partition_entries(registry, name, info.partitions)
        # empty ELR lists, never null: Kafka sends lists, and its Java Admin client fails on a null
        partitions = [{**entries[p], "eligible_leader_replicas": (), "last_known_elr": ()}
                      for p in range(start, upper)]
        out.append({
            "error_code": KafkaError.none, "name": name, "topic_id": topic_uuid(info.topic_id), "is_internal": False,
            "partitions": partitions,
            "topic_authorized_operations": operations,
        })
        if upper < info.partitions:
            return out, {"topic_name": name, "partition_index": upper}
        budget -= len(partitions)
    return out, None
