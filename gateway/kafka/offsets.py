"""ListOffsets (by time and every special timestamp of Kafka 4.2) and OffsetForLeaderEpoch (one epoch,
0, ending at the hw).

Special timestamps (KIP-734 max timestamp, KIP-405's earliest-local and latest-tiered, from
ListOffsetsRequest.json): earliest-local is the first offset still in Redis (the log start on a
topic never tiered), latest-tiered the highest offset in tiered storage, -1 when none is, as
Kafka's `UnifiedLog.fetchOffsetByTimestamp` answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.security import Operation, ResourceType
from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey, Encoded, RequestContext, handles
from gateway.kafka.errors import kafka_error
from gateway.kafka.metadata import LEADER_EPOCH
from gateway.kafka.wire import I16, I32, I64, NO_TAGS, array_len, string

READ_COMMITTED = 1
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # the local log start: the earliest offset in Redis
LATEST_TIERED = -5  # the highest offset in tiered storage
# the first version that may ask each special timestamp (ListOffsetsRequest.json: v7 KIP-734, v8 and
# v9 KIP-405/KIP-1005); any other negative one is of a version above ours. Asked below it, Kafka 4.4
# answers UNSUPPORTED_VERSION for that partition, before looking the partition up (as the
# differential corpus's list_offsets_special family shows)
SINCE_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}


@dataclass(frozen=True)
class OffsetResult:
    index: int
    error: KafkaError = KafkaError.none
    timestamp: int = -1
    offset: int = -1


def leader_epoch_error(current_leader_epoch: int) -> KafkaError | None:
    """What Kafka's `Partition.checkCurrentLeaderEpoch` answers a client's idea of the leader epoch
    (-1: none given): an older one is fenced, a newer one unknown."""
    if current_leader_epoch == -1 or current_leader_epoch == LEADER_EPOCH:
        return None
    return KafkaError.fenced_leader_epoch if current_leader_epoch < LEADER_EPOCH else KafkaError.unknown_leader_epoch


async def _lookup(ctx: RequestContext, topic: str, partition: int, ts: int, committed: bool,
                  current_leader_epoch: int = -1) -> OffsetResult:
    """One partition's answer; read_committed readers see "latest" as the last stable offset."""
    log = ctx.services.log
    if not await ctx.allowed(ResourceType.TOPIC, topic, Operation.DESCRIBE):
        return OffsetResult(partition, KafkaError.topic_authorization_failed)
    if ts < EARLIEST and ctx.api_version < SINCE_VERSION.get(ts, ctx.api_version + 1):
        return OffsetResult(partition, KafkaError.unsupported_version)
    try:
        await log.check_partition(topic, partition)
        if (stale := leader_epoch_error(current_leader_epoch)) is not None:
            return OffsetResult(partition, stale)
        start, hw = await log.bounds(topic, partition)
        if ts == EARLIEST:
            return OffsetResult(partition, offset=start)
        if ts == EARLIEST_LOCAL:  # UnifiedLog.fetchOffsetByTimestamp: the local log start offset
            return OffsetResult(partition, offset=(await log.tier_bounds(topic, partition))[0])
        if ts == LATEST:
            if committed:
                hw = (await log.read(topic, partition, hw, 1)).stable
            return OffsetResult(partition, offset=hw)
        if ts == LATEST_TIERED:  # the highest offset in remote storage; -1 when none is
            return OffsetResult(partition, offset=(await log.tier_bounds(topic, partition))[1])
        if ts == MAX_TIMESTAMP:
            top = await log.max_timestamp(topic, partition)
            return OffsetResult(partition) if top is None else OffsetResult(partition, timestamp=top[1], offset=top[0])
        if ts < 0:
            return OffsetResult(partition, KafkaError.invalid_request)
        found = await log.offset_for_time(topic, partition, ts)
        if found is None:
            return OffsetResult(partition)
        return OffsetResult(partition, timestamp=found[1], offset=found[0])
    except Exception as exc:
        return OffsetResult(partition, kafka_error(exc))


@handles(ApiKey.LIST_OFFSETS, 1, 10)
async def list_offsets(ctx: RequestContext, req: Any) -> Encoded:
    committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
    # answered by partition, as Kafka groups them: a topic named without partitions gets no entry
    topics = [
        (t.name, [await _lookup(ctx, t.name, p.partition_index, p.timestamp, committed,
                                getattr(p, "current_leader_epoch", -1)) for p in t.partitions])
        for t in req.topics if t.partitions
    ]
    errors = {r.error for _, parts in topics for r in parts} - {KafkaError.none}
    return Encoded(encode_list_offsets_response(ctx.api_version, topics), errors,
                   0 if ctx.api_version >= 2 else None)


def _epoch(p: OffsetResult) -> int:
    """The leader epoch of an answer: none (-1) for an error and for a time that found no record,
    as Kafka's `TimestampAndOffset` of no record carries no epoch (`UnifiedLog.fetchOffsetByTimestamp`)."""
    return LEADER_EPOCH if p.error == KafkaError.none and p.offset >= 0 else -1


def encode_list_offsets_response(version: int, topics: list[tuple[str, list[OffsetResult]]]) -> list[bytes | memoryview]:
    """ListOffsetsResponse v1-v10 body, equal to kio's encoding of the same values."""
    flex = version >= 6
    out = bytearray(I32.pack(0) if version >= 2 else b"")  # throttle time
    out += array_len(len(topics), flex)
    for name, parts in topics:
        out += string(name, flex)
        out += array_len(len(parts), flex)
        for p in parts:
            out += I32.pack(p.index) + I16.pack(p.error) + I64.pack(p.timestamp) + I64.pack(p.offset)
            if version >= 4:
                out += I32.pack(_epoch(p))
            if flex:
                out += NO_TAGS
        if flex:
            out += NO_TAGS
    if flex:
        out += NO_TAGS
    return [bytes(out)]


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4)
async def offset_for_leader_epoch(ctx: RequestContext, req: Any) -> Any:
    log = ctx.services.log
    topics = []
    for t in req.topics:
        parts = []
        allowed = await ctx.allowed(ResourceType.TOPIC, t.topic, Operation.DESCRIBE)
        for p in t.partitions:
            if not allowed:
                parts.append({"error_code": KafkaError.topic_authorization_failed, "partition": p.partition,
                              "leader_epoch": -1, "end_offset": -1})
                continue
            try:
                await log.check_partition(t.topic, p.partition)
                # a consumer seeks back to an end below its position: read as a Fetch reads
                _, hw = await log.confirmed_bounds(t.topic, p.partition)
                parts.append({"error_code": KafkaError.none, "partition": p.partition,
                              "leader_epoch": LEADER_EPOCH, "end_offset": hw})
            except Exception as exc:
                parts.append({"error_code": kafka_error(exc), "partition": p.partition,
                              "leader_epoch": -1, "end_offset": -1})
        topics.append({"topic": t.topic, "partitions": parts})
    cls = codec.response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, ctx.api_version)
    return codec.build(cls, {"throttle_time": 0, "topics": topics})
