"""Fetch: stored batches go to the socket as chunks, only their base offset patched in.

A fetch may start in the middle of a batch: the whole batch is returned and the client skips the
records before its offset, as with Kafka. Long polls wait on the log's notifier (woken by appends
in this process, and by those of other gateways once armed) until `min_bytes` are there or
`max_wait` passes. No fetch sessions: the
response's session id 0 tells clients to send full fetches. The last stable offset comes from
the log; read_committed fetches stop below it and list the aborted
transactions whose batches they may hold.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway import telemetry
from gateway.domain.security import Operation, ResourceType
from gateway.errors import GatewayError
from gateway.formats.records import with_base_offset
from gateway.kafka.dispatch import ApiKey, Encoded, RequestContext, handles
from gateway.kafka.errors import kafka_error
from gateway.kafka.wire import I16, I32, I64, NO_TAGS, array_len, bytes_len, string

READ_COMMITTED = 1
MAX_ENTRIES = 64  # batches read per partition per round trip; the client asks again for more
MAX_WAIT = 30.0  # seconds a long poll may wait at most: an empty answer sooner is harmless, and a
# connection whose client left is not held for the days a hostile max_wait could ask


@dataclass
class FetchPartition:
    index: int
    error: KafkaError = KafkaError.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start: int = -1
    aborted: list[tuple[int, int]] | None = None
    records: list[bytes | memoryview] = field(default_factory=list)
    size: int = 0


@handles(ApiKey.FETCH, 4, 12)
async def fetch(ctx: RequestContext, req: Any) -> Encoded:
    log = ctx.services.log
    denied = {t.topic for t in req.topics if not await ctx.allowed(ResourceType.TOPIC, t.topic, Operation.READ)}
    wanted = [(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
              for t in req.topics if t.topic not in denied for p in t.partitions]
    max_wait = min(req.max_wait.total_seconds(), MAX_WAIT)
    max_bytes = min(req.max_bytes, ctx.services.config.fetch_max_bytes)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait
    committed = req.isolation_level == READ_COMMITTED
    watched = list(dict.fromkeys((t, p) for t, p, _, _ in wanted))
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
        if not await waiter:
            parts = await _read_all(ctx, wanted, max_bytes, committed)
            break
    topics: list[tuple[str, list[FetchPartition]]] = []
    it = iter(parts)
    for t in req.topics:
        if t.topic in denied:
            topics.append((t.topic, [FetchPartition(p.partition, KafkaError.topic_authorization_failed)
                                     for p in t.partitions]))
        else:
            topics.append((t.topic, [next(it) for _ in t.partitions]))
    codes: set[KafkaError] = set()
    for name, answered in topics:
        if size := sum(p.size for p in answered):
            telemetry.fetched("kafka", name, size)
        codes.update(p.error for p in answered if p.error != KafkaError.none)
    return Encoded(encode_fetch_response(ctx.api_version, topics), codes)


async def _read_all(
    ctx: RequestContext, wanted: list[tuple[str, int, int, int]], max_bytes: int, committed: bool
) -> list[FetchPartition]:
    """One read per partition, all concurrently; then cut to the byte limits in request order."""
    log = ctx.services.log
    slices = await asyncio.gather(
        *(log.read(t, p, offset, MAX_ENTRIES, read_committed=committed, max_bytes=min(part_max, max_bytes))
          for t, p, offset, part_max in wanted),
        return_exceptions=True,
    )
    out: list[FetchPartition] = []
    budget = max_bytes
    for (_, p, offset, part_max), sl in zip(wanted, slices, strict=True):
        if isinstance(sl, BaseException):
            out.append(FetchPartition(p, kafka_error(sl)))
            continue
        fp = FetchPartition(p, high_watermark=sl.high_watermark, last_stable_offset=sl.stable,
                            log_start=sl.log_start, aborted=[] if committed else None)
        if offset < sl.log_start or offset > sl.high_watermark:
            fp.error = KafkaError.offset_out_of_range
            out.append(fp)
            continue
        last = offset
        for entry in sl.entries:
            if committed and entry.base_offset >= sl.stable:
                break  # read_committed readers get nothing past the last stable offset
            n = len(entry.batch)
            # the first batch of the response always goes, however large, so a consumer progresses
            first = not fp.records and budget == max_bytes
            if not first and (fp.size + n > part_max or n > budget):
                break
            fp.records += with_base_offset(entry.batch, entry.base_offset)
            fp.size += n
            budget -= n
            last = entry.next_offset
        if committed and fp.records:
            # the aborted transactions whose batches this response may hold, for the client to drop
            fp.aborted = [(a.producer_id, a.first_offset) for a in sl.aborted if a.first_offset < last]
        out.append(fp)
    return out


def encode_fetch_response(version: int, topics: list[tuple[str, list[FetchPartition]]]) -> list[bytes | memoryview]:
    """FetchResponse v4-v12 body as chunks (record bytes uncopied), equal to kio's encoding."""
    flex = version >= 12
    chunks: list[bytes | memoryview] = []
    out = bytearray(I32.pack(0))  # throttle time
    if version >= 7:
        out += I16.pack(KafkaError.none) + I32.pack(0)  # error code, session id
    out += array_len(len(topics), flex)
    for name, parts in topics:
        out += string(name, flex)
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
