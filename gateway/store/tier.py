"""A partition's tiered-storage side in Redis: its manifest of segments and its local log start.

A tiered partition's log runs from its log start `start` (Kafka's logStartOffset, as before) through
segments in the object store, listed in the manifest (`keys.tier_manifest`) in offset order and
contiguous, up to `te` (the next offset to copy), then through the stream from the local log start
`ls` (Kafka's localLogStartOffset). A segment is listed (`tier-add-2`) only after its objects are
written, and the stream's entries go (`tier-trim-3`) only once a listed segment holds them, so a
stop anywhere loses nothing; retention and DeleteRecords (`trim-4`) unlist segments before their
objects are deleted. Every write is fenced by the tiering role's lease epoch.

Object names follow Kafka's RemoteStorageManager layout: `<topic>-<topic id>/<partition>/<base
offset, 20 digits>-<segment id>.log` (and `.index`), so orphans are found by listing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import ErrorCode, error_for
from gateway.store import keys
from gateway.store.compaction import StoredBatch, _batch
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.log import AbortedRange, _aborted, _pairs, last_stable_offset
from gateway.store.scripts import Scripts

READ_ENTRIES = 256  # stream entries per XRANGE of a copy at most
FIRST_READ_ENTRIES = 8  # the first XRANGE's: batches may be a megabyte each, and a segment a few of them


@dataclass(frozen=True)
class Segment:
    """One listed segment."""

    base_offset: int
    next_offset: int
    max_timestamp: int  # the log's running maximum timestamp at its last batch
    appended_before: int  # bytes appended to the partition before its first batch (the entry's `c`)
    size: int  # its data object's size: the batches' bytes
    segment_id: str

    @property
    def member(self) -> str:
        return (f"{self.base_offset}:{self.next_offset}:{self.max_timestamp}:{self.appended_before}:"
                f"{self.size}:{self.segment_id}")

    @classmethod
    def parse(cls, member: bytes | str) -> Segment:
        raw = member.decode() if isinstance(member, bytes) else member
        base, nxt, ts, before, size, seg_id = raw.split(":")
        return cls(int(base), int(nxt), int(ts), int(before), int(size), seg_id)


@dataclass(frozen=True)
class TierState:
    """A partition's bounds as the copier needs them."""

    log_start: int
    high_watermark: int
    last_stable_offset: int
    local_start: int  # the first offset held in the stream (Kafka's local log start offset)
    tiered_end: int  # the offset after the last listed segment; -1: none ever listed
    appended_bytes: int  # every byte ever appended (the meta's `bytes`)


@dataclass(frozen=True)
class BatchHead:
    """A stored batch's place in the log, its bytes left in Redis."""

    base_offset: int
    span: int
    appended_before: int  # the log's bytes before it (`c`), -1 if not recorded
    max_ts: int  # the log's running max timestamp at it (`t`)


def partition_prefix(topic: str, topic_id: str, partition: int) -> str:
    return f"{topic}-{topic_id}/{partition}/"


def data_key(topic: str, topic_id: str, partition: int, seg: Segment) -> str:
    return f"{partition_prefix(topic, topic_id, partition)}{seg.base_offset:020d}-{seg.segment_id}.log"


def index_key(topic: str, topic_id: str, partition: int, seg: Segment) -> str:
    return f"{partition_prefix(topic, topic_id, partition)}{seg.base_offset:020d}-{seg.segment_id}.index"


def object_owner(key: str) -> tuple[str, str, int, str] | None:
    """(topic, topic id, partition, segment id) an object name belongs to; None for a name of no segment."""
    try:
        top, partition, name = key.split("/")
        topic, topic_id = top.rsplit("-", 1)
        stem = name.rsplit(".", 1)[0]
        return topic, topic_id, int(partition), stem.split("-", 1)[1]
    except (ValueError, IndexError):
        return None


class TierStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts

    async def state(self, topic: str, partition: int) -> TierState | None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(keys.meta(topic, partition), "hw", "start", "ls", "te", "bytes")
        pipe.hvals(keys.open_txns(topic, partition))
        async with storage_errors():
            (hw, start, ls, te, appended), open_txns = await pipe.execute()
        if hw is None:
            return None
        return TierState(int(start), int(hw), last_stable_offset(int(hw), open_txns),
                         max(int(start), int(ls or 0)), int(te or -1), int(appended or 0))

    async def segments(self, topic: str, partition: int) -> list[Segment]:
        async with storage_errors():
            members: Any = await self.redis.zrange(keys.tier_manifest(topic, partition), 0, -1)
        return [Segment.parse(m) for m in members]

    async def segment_at(self, topic: str, partition: int, offset: int) -> Segment | None:
        """The listed segment holding `offset`, None when none does."""
        async with storage_errors():
            found: Any = await self.redis.zrevrangebyscore(
                keys.tier_manifest(topic, partition), offset, "-inf", start=0, num=1)
        seg = Segment.parse(found[0]) if found else None
        return seg if seg is not None and seg.next_offset > offset else None

    async def batches(self, topic: str, partition: int, offset: int, end: int, max_bytes: int,
                      holding: BatchHead | None = None) -> tuple[list[StoredBatch], bool]:
        """Whole stored batches from the one holding `offset` on, each ending at or below `end`, as
        many as fit in `max_bytes` (the first always); and whether one more was there that did not
        fit (as a Kafka segment rolls when the next batch would not fit). `holding`, that batch as
        `head` found it, spares reading its bytes twice."""
        log = keys.log(topic, partition)
        if holding is not None:
            low = f"{holding.base_offset}-1"
        else:
            async with storage_errors():
                found: Any = await self.redis.xrevrange(log, f"{offset}-1", "-", count=1)
            low = found[0][0].decode() if found and _batch(found[0]).next_offset > offset else f"{offset}-1"
        out: list[StoredBatch] = []
        size, count = 0, FIRST_READ_ENTRIES if max_bytes > 0 else 1
        while True:
            async with storage_errors():
                entries: Any = await self.redis.xrange(log, low, "+", count=count)
            for raw in entries:
                b = _batch(raw)
                if b.next_offset > end:
                    return out, False
                if out and size + b.size > max_bytes:
                    return out, True
                out.append(b)
                size += b.size
            if len(entries) < count:
                return out, False
            low = "(" + entries[-1][0].decode()
            count = min(count * 2, READ_ENTRIES)  # as many as the ones read suggest fit, at most READ_ENTRIES
            if out:
                count = max(1, min(count, (max_bytes - size) // max(1, size // len(out)) + 1))

    async def head(self, topic: str, partition: int, offset: int) -> BatchHead | None:
        """The batch holding `offset` (or the first after it) without its bytes; None when none."""
        reply = await self._call("tier-head-1", [keys.log(topic, partition)], [offset], f"{topic}-{partition}")
        return BatchHead(int(reply[1]), int(reply[2]), int(reply[3]), int(reply[4])) if len(reply) > 1 else None

    async def aborted(self, topic: str, partition: int, base: int, end: int) -> list[AbortedRange]:
        """Aborted transactions whose ranges meet [base, end)."""
        async with storage_errors():
            raw: Any = await self.redis.zrangebyscore(keys.aborted_txns(topic, partition), base, "+inf",
                                                      withscores=True)
        return [a for a in (_aborted(m, int(float(s))) for m, s in _pairs(raw)) if a.first_offset < end]

    async def add(self, topic: str, partition: int, epoch: int, seg: Segment) -> bool:
        """List `seg`; False when a segment from its base on is listed already."""
        reply = await self._call("tier-add-2", [keys.meta(topic, partition), keys.tier_manifest(topic, partition)],
                                 [epoch, seg.base_offset, seg.next_offset, seg.member],  # epoch, base, next, member
                                 f"{topic}-{partition}")
        return bool(reply[0] == ErrorCode.OK)

    async def trim_local(self, topic: str, partition: int, epoch: int, now: int, local_ms: int,
                         local_bytes: int) -> tuple[int, int]:
        """Drop listed entries beyond local retention: (local log start, entries removed)."""
        reply = await self._call(
            "tier-trim-3",
            [keys.log(topic, partition), keys.meta(topic, partition), keys.tier_manifest(topic, partition)],
            [epoch, now, local_ms, local_bytes],  # epoch, now_ms, local_ms, local_bytes
            f"{topic}-{partition}")
        return int(reply[1]), int(reply[2])

    async def drop_all(self, topic: str, partition: int, epoch: int) -> list[str]:
        """Unlist every segment, the log start moving to the local one; returns the members unlisted."""
        reply = await self._call(
            "tier-drop-3",
            [keys.meta(topic, partition), keys.tier_manifest(topic, partition), keys.aborted_txns(topic, partition)],
            [epoch], f"{topic}-{partition}")  # epoch
        return [m.decode() for m in reply[2:]]

    async def _call(self, name: str, call_keys: list[str], args: list[Any], what: str) -> list[Any]:
        async with storage_errors():
            reply: list[Any] = await self.scripts.call(name, call_keys, args)
        if reply[0] not in (ErrorCode.OK, ErrorCode.DUPLICATE_SEQUENCE):
            raise error_for(reply[0], what)
        return reply
