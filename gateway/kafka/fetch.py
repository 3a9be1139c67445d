"""Fetch: stored batches go to the socket as chunks, only their base offset patched in.

A fetch may start in the middle of a batch: the whole batch is returned and the client skips the
records before its offset, as with Kafka. Long polls wait on the log's notifier (woken by appends
in this process, and by those of other gateways once armed) until `min_bytes` are there or
`max_wait` passes. No fetch sessions: the
response's session id 0 tells clients to send full fetches. The last stable offset comes from
the log; read_committed fetches stop below it and list the aborted
transactions whose batches they may hold.

From v13 (KIP-516) topics are named by id, as Kafka 4.2's `KafkaApis.handleFetchRequest` does it:
an id no topic has is answered UNKNOWN_TOPIC_ID for each of its partitions (before authorization),
and a partition whose log is not the incarnation the id named (`ReplicaManager.readFromLog`'s
`hasConsistentTopicId` check) INCONSISTENT_TOPIC_ID. Here the id's incarnation is checked against
the mark each read returns (`Slice.generation`): a topic deleted, or deleted and created again
under its name, is looked up afresh, and its old id answered UNKNOWN_TOPIC_ID, so a client
refreshes its metadata and never reads the new topic's data as the old one's. v14-v18 change
nothing a consumer sends or is sent here: follower fields (replica state, directory id, high
watermark) are ignored, and the leader hints of v16 (node endpoints) are for NOT_LEADER errors,
which a gateway serving every partition never answers.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode as KafkaError

from gateway import telemetry
from gateway.domain.security import Operation, ResourceType
from gateway.errors import GatewayError
from gateway.formats.records import with_base_offset
from gateway.kafka.client_quotas import fetch_max_bytes, fetch_throttle
from gateway.kafka.dispatch import ApiKey, Encoded, RequestContext, handles
from gateway.kafka.errors import kafka_error
from gateway.kafka.offsets import leader_epoch_error
from gateway.kafka.wire import I16, I32, I64, NO_TAGS, array_len, bytes_len, topic_key

READ_COMMITTED = 1
ZERO_ID = uuid.UUID(int=0)  # kio reads it as None
MAX_ENTRIES = 64  # batches read per partition per round trip; the client asks again for more
MAX_WAIT = 30.0  # seconds a long poll may wait at most: an empty answer sooner is harmless, and a
# connection whose client left is not held for the days a hostile max_wait could ask


@dataclass
class FetchPartition:
    """One partition of the answer. A partition in error carries nothing else: -1 offsets and, for
    a partition the request named wrongly, an empty aborted list (Kafka's
    `FetchResponse.partitionResponse(partition, error)` leaves the schema's defaults). A read's
    aborted list is a list for every read_committed read, empty or not, and null otherwise, as
    Kafka's `KafkaApis` sets `abortedTransactions.orElse(null)` from the log read, an offset out of
    range included (`ReplicaManager.readFromLog`: `FetchDataInfo.empty`, offsets -1)."""

    index: int
    error: KafkaError = KafkaError.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start: int = -1
    aborted: list[tuple[int, int]] | None = field(default_factory=list)
    records: list[bytes | memoryview] = field(default_factory=list)
    size: int = 0


class FetchTopic(NamedTuple):
    """A topic of the request: as named (a name, or from v13 an id), the name it resolved to, the
    incarnation an id named (None when named by name), and the error of all its partitions."""

    key: str | uuid.UUID | None
    name: str
    generation: int | None
    error: KafkaError


async def _topics(ctx: RequestContext, req: Any) -> list[FetchTopic]:
    out = []
    for t in req.topics:
        generation = None
        if ctx.api_version < 13:
            key, name = t.topic, t.topic
        else:
            key = t.topic_id
            info = None if key is None else await ctx.services.log.topic_by_id(key.hex)
            if info is None:
                out.append(FetchTopic(key, "", None, KafkaError.unknown_topic_id))
                continue
            name, generation = info.name, info.generation
        allowed = await ctx.allowed(ResourceType.TOPIC, name, Operation.READ)
        out.append(FetchTopic(key, name, generation, KafkaError.none if allowed else KafkaError.topic_authorization_failed))
    return out


@handles(ApiKey.FETCH, 4, 18)
async def fetch(ctx: RequestContext, req: Any) -> Encoded:
    log = ctx.services.log
    named = await _topics(ctx, req)
    if ctx.api_version >= 13 and _fails_in_kafka(named, req.topics):
        return Encoded(encode_fetch_response(ctx.api_version, [], KafkaError.unknown_server_error),
                       {KafkaError.unknown_server_error})
    wanted = [Wanted(n.name, p.partition, p.fetch_offset, p.partition_max_bytes, n.generation,
                     getattr(p, "current_leader_epoch", -1))
              for n, t in zip(named, req.topics, strict=True) if n.error == KafkaError.none for p in t.partitions]
    max_wait = min(req.max_wait.total_seconds(), MAX_WAIT)
    max_bytes = fetch_max_bytes(ctx, req.max_bytes)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait
    committed = req.isolation_level == READ_COMMITTED
    watched = list(dict.fromkeys((w.topic, w.partition) for w in wanted))
    armed = False
    while True:
        remaining = deadline - loop.time()
        waiter = None
        if remaining > 0 and req.min_bytes > 0 and wanted:
            # registered before the read, so an append landing after it still wakes us
            waiter = asyncio.ensure_future(log.notifier.wait(watched, remaining))
        parts = await _read_all(ctx, wanted, max_bytes, committed)
        total = sum(p.size for p in parts)
        errors = any(p.error != KafkaError.none for p in parts)
        if waiter is None or total >= req.min_bytes or errors:
            if waiter is not None:
                waiter.cancel()
            break
        if not armed:
            armed = True
            try:
                rearmed = await log.arm_wakeups(watched)  # appends on other gateways wake us too
            except GatewayError:
                rearmed = False  # Redis away: the wait ends at its own timeout
            if rearmed:
                waiter.cancel()
                continue  # an append just before the flags woke nobody: look again
        waited = time.perf_counter()
        woke = await waiter
        ctx.remote += time.perf_counter() - waited  # Kafka's purgatory time, no request time
        if not woke:
            parts = await _read_all(ctx, wanted, max_bytes, committed)
            break
    topics: list[tuple[str | uuid.UUID | None, list[FetchPartition]]] = []
    kept: list[FetchTopic] = []
    it = iter(parts)
    for n, t in zip(named, req.topics, strict=True):
        if not t.partitions:
            continue  # answered by partition, as Kafka groups them: a topic without any gets no entry
        kept.append(n)
        if n.error != KafkaError.none:
            topics.append((n.key, [FetchPartition(p.partition, n.error) for p in t.partitions]))
        else:
            answered = [next(it) for _ in t.partitions]
            if n.generation is not None:
                await _check_incarnation(ctx, n, answered)
            topics.append((n.key, answered))
    chunks = encode_fetch_response(ctx.api_version, topics)
    size = sum(len(c) for c in chunks)
    if throttle_ms := await fetch_throttle(ctx, size):
        return Encoded(encode_fetch_response(ctx.api_version, [], throttle_ms=throttle_ms))
    codes: set[KafkaError] = set()
    for n, (_, answered) in zip(kept, topics, strict=True):
        if size := sum(p.size for p in answered):
            telemetry.fetched("kafka", n.name, size)
        codes.update(p.error for p in answered if p.error != KafkaError.none)
    return Encoded(chunks, codes)


def _fails_in_kafka(named: list[FetchTopic], topics: Any) -> bool:
    """Whether Kafka 4.4 fails this whole request with UNKNOWN_SERVER_ERROR, as the wire comparison
    found: when a partition named by the zero topic id is followed by another partition of an
    unknown id. Kafka answers those partitions, nameless, first and in request order, and builds the
    response grouping a partition with the previous one's topic, which fails (an exception, so no
    partitions at all) after a nameless one of the zero id, the id that means "by name"."""
    unknown = [t.topic_id in (None, ZERO_ID) for n, t in zip(named, topics, strict=True)
               if n.error == KafkaError.unknown_topic_id for _ in t.partitions]
    return any(unknown[:-1])


async def _check_incarnation(ctx: RequestContext, topic: FetchTopic, parts: list[FetchPartition]) -> None:
    """Partitions of a topic named by id that were not of its incarnation, or were gone: the id
    looked up afresh; when it names no topic any more, UNKNOWN_TOPIC_ID (the client's metadata is
    stale), else INCONSISTENT_TOPIC_ID for a log of another incarnation."""
    stale = [p for p in parts if p.error in (KafkaError.inconsistent_topic_id, KafkaError.unknown_topic_or_partition)]
    if not stale:
        return
    assert isinstance(topic.key, uuid.UUID)
    info = await ctx.services.log.topic_by_id(topic.key.hex, fresh=True)
    if info is None or info.generation != topic.generation:
        for p in stale:
            p.error = KafkaError.unknown_topic_id


class Wanted(NamedTuple):
    """A partition of the request to read: its topic's name and incarnation (named by id), where
    to read from, how much, and the leader epoch the client believes in (-1: none)."""

    topic: str
    partition: int
    offset: int
    max_bytes: int
    generation: int | None
    leader_epoch: int


async def _read_all(ctx: RequestContext, wanted: list[Wanted], max_bytes: int, committed: bool) -> list[FetchPartition]:
    """One read per partition, all concurrently; then cut to the byte limits in request order. A
    partition of a topic named by id whose log is of another incarnation gets INCONSISTENT_TOPIC_ID
    and nothing of that log.

    As Kafka 4.4's `ReplicaManager.readFromLog`, partition by partition in request order: a
    partition that exists is checked against the client's leader epoch first
    (`Partition.checkCurrentLeaderEpoch`; a negative one is none, `FetchRequest.optionalEpoch`),
    then its offset against the log; it may take the smaller of its own limit and what the
    request's has left (Kafka's `limitBytes`, never below 0 after the first partition), and a
    negative limit where there are records to read fails it with UNKNOWN_SERVER_ERROR, the
    `IllegalArgumentException` of Kafka's `LogSegment.read` ("Invalid max size")."""
    log = ctx.services.log
    slices = await asyncio.gather(
        *(log.read(w.topic, w.partition, w.offset, MAX_ENTRIES, read_committed=committed,
                   max_bytes=max(0, min(w.max_bytes, max_bytes)))
          for w in wanted),
        return_exceptions=True,
    )
    out: list[FetchPartition] = []
    budget = max_bytes
    sent = False  # any records yet: the first batch of the response always goes (Kafka's minOneMessage)
    for (_, p, offset, part_max, generation, leader_epoch), sl in zip(wanted, slices, strict=True):
        if isinstance(sl, BaseException):  # Kafka answers a partition it lacks before reading any
            out.append(FetchPartition(p, kafka_error(sl)))
            continue
        limit, budget = min(part_max, budget), max(0, budget)
        if generation is not None and sl.generation != generation:
            out.append(FetchPartition(p, KafkaError.inconsistent_topic_id))
            continue
        if leader_epoch >= 0 and (stale := leader_epoch_error(leader_epoch)) is not None:
            out.append(FetchPartition(p, stale, aborted=None))
            continue
        if offset < sl.log_start or offset > sl.high_watermark:
            out.append(FetchPartition(p, KafkaError.offset_out_of_range, aborted=None))
            continue
        if limit < 0 and offset < (sl.stable if committed else sl.high_watermark):
            out.append(FetchPartition(p, KafkaError.unknown_server_error, aborted=None))
            continue
        fp = FetchPartition(p, high_watermark=sl.high_watermark, last_stable_offset=sl.stable,
                            log_start=sl.log_start, aborted=None)
        last = offset
        for entry in sl.entries:
            if committed and entry.base_offset >= sl.stable:
                break  # read_committed readers get nothing past the last stable offset
            n = len(entry.batch)
            # the first batch of the response always goes, however large, so a consumer progresses
            first = not sent
            if not first and (fp.size + n > part_max or n > budget):
                break
            fp.records += with_base_offset(entry.batch, entry.base_offset)
            fp.size += n
            budget -= n
            sent = True
            last = entry.next_offset
        if committed:
            # the aborted transactions whose batches this response may hold, for the client to drop;
            # a list, if empty, for every read_committed read (LocalLog.read's emptyFetchDataInfo too)
            fp.aborted = [(a.producer_id, a.first_offset) for a in sl.aborted if a.first_offset < last]
        out.append(fp)
    return out


def encode_fetch_response(
    version: int, topics: list[tuple[str | uuid.UUID | None, list[FetchPartition]]],
    error: KafkaError = KafkaError.none, throttle_ms: int = 0,
) -> list[bytes | memoryview]:
    """FetchResponse v4-v18 body as chunks (record bytes uncopied), equal to kio's encoding. Topics
    are keyed by name up to v12, by id from v13 (None: the zero id)."""
    flex = version >= 12
    chunks: list[bytes | memoryview] = []
    out = bytearray(I32.pack(throttle_ms))
    if version >= 7:
        out += I16.pack(error) + I32.pack(0)  # error code, session id
    out += array_len(len(topics), flex)
    for key, parts in topics:
        out += topic_key(key, version >= 13, flex)
        out += array_len(len(parts), flex)
        for p in parts:
            out += I32.pack(p.index) + I16.pack(p.error) + I64.pack(p.high_watermark) + I64.pack(p.last_stable_offset)
            if version >= 5:
                out += I64.pack(p.log_start)
            if p.aborted is None:
                out += array_len(None, flex)
            else:
                out += array_len(len(p.aborted), flex)
                for pid, first in p.aborted:
                    out += I64.pack(pid) + I64.pack(first)
                    if flex:
                        out += NO_TAGS
            if version >= 11:
                out += I32.pack(-1)  # preferred read replica
            out += bytes_len(p.size, flex)
            if p.records:
                chunks.append(bytes(out))
                chunks.extend(p.records)
                out = bytearray()
            if flex:
                out += NO_TAGS
        if flex:
            out += NO_TAGS
    if flex:
        out += NO_TAGS
    chunks.append(bytes(out))
    return chunks
