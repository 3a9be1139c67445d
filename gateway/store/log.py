"""Partition logs and the topic registry in Redis.

A partition is a stream whose entry IDs are `<base offset>-1`, one entry per record batch with
fields `b` (the batch as received), `n` (records), `t` (running maximum timestamp) and `c` (bytes
in the log before it). Its meta hash holds `hw` (the next offset), `start` (the log start offset),
`maxts` and `bytes`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
from redis.exceptions import ResponseError

from gateway.errors import ErrorCode, StorageUnavailable, TopicExists, TopicNotFound, error_for
from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.resp import DirectConnections, RespConnection, RespError
from gateway.store.scripts import Scripts

APPEND = "append-4"
# error replies of a node busy, loading, failing over or handing a slot on: the script did not run
_PASSING = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "BUSY", "MASTERDOWN", "READONLY")


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    created_ms: int = 0

    def pack(self) -> bytes:
        return msgpack.packb(
            {"p": self.partitions, "c": self.config, "t": self.created_ms}, use_bin_type=True
        )

    @classmethod
    def unpack(cls, name: str, raw: bytes) -> TopicInfo:
        d = msgpack.unpackb(raw, raw=False)
        return cls(name, d["p"], dict(d["c"]), d["t"])


@dataclass(frozen=True)
class Append:
    """Where one batch went. `duplicate` marks an idempotent retry of a batch stored before."""

    base_offset: int
    log_start: int
    duplicate: bool = False


@dataclass(frozen=True)
class Entry:
    base_offset: int
    count: int
    batch: bytes

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.count


@dataclass(frozen=True)
class AbortedRange:
    """An aborted transaction's batches on a partition: from `first_offset` up to its marker."""

    producer_id: int
    first_offset: int
    marker_offset: int


@dataclass(frozen=True)
class Slice:
    """Entries read from a partition together with its bounds at the time of the read."""

    entries: list[Entry]
    high_watermark: int
    log_start: int
    last_stable_offset: int = -1  # below the first open transaction's first offset; -1: not read
    aborted: list[AbortedRange] = field(default_factory=list)  # read only for read-committed readers

    @property
    def stable(self) -> int:
        return self.high_watermark if self.last_stable_offset < 0 else self.last_stable_offset

    def following(self, read_committed: bool) -> int | None:
        """Where a sequential reader reads on after these entries; None when nothing is there yet."""
        if not self.entries:
            return None
        offset = self.entries[-1].next_offset
        return offset if offset < (self.stable if read_committed else self.high_watermark) else None


@dataclass(frozen=True)
class PartitionBounds:
    partition: int
    log_start: int
    high_watermark: int
    last_stable_offset: int


def last_stable_offset(high_watermark: int, open_txns: list[bytes]) -> int:
    """The first offset of the oldest open transaction, or the high watermark when none is open."""
    firsts = [int(v.split(b":", 1)[0]) for v in open_txns]
    return min(firsts, default=high_watermark)


def _aborted(member: bytes, score: int) -> AbortedRange:
    pid, first = member.split(b":")
    return AbortedRange(int(pid), int(first), int(score))


def _entry(raw: tuple[bytes, dict[bytes, bytes]]) -> Entry:
    eid, fields = raw
    return Entry(int(eid.split(b"-", 1)[0]), int(fields[b"n"]), fields[b"b"])


def _direct_entries(raw: list[list[Any]]) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """Stream entries as RESP gives them ([id, [field, value, ...]]), in redis-py's shape."""
    return [(eid, dict(zip(flat[::2], flat[1::2], strict=True))) for eid, flat in raw]


def _pairs(reply: list[Any]) -> list[tuple[bytes, Any]]:
    """Members with their scores, from RESP3's nested pairs or RESP2's flat list."""
    if reply and isinstance(reply[0], list | tuple):
        return [(m, score) for m, score in reply]
    return list(zip(reply[::2], reply[1::2], strict=True))


@dataclass(frozen=True)
class AppendRequest:
    topic: str
    partition: int
    batch: bytes | memoryview
    count: int
    max_timestamp: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    transactional: bool = False


class LogStore:
    def __init__(self, redis: RedisClient, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts
        self.direct = DirectConnections(redis, name="gateway-direct-read")
        self.ordered = DirectConnections(redis, name="gateway-append", preload=(scripts.specs[APPEND].source,))

    # -- topics ---------------------------------------------------------------------------------

    async def create_topic(self, info: TopicInfo) -> None:
        """Partition metas first, the registry entry last: the entry is what makes the topic exist."""
        async with storage_errors():
            if await self.redis.hexists(keys.TOPICS, info.name):
                raise TopicExists(f"topic {info.name!r} exists")
            await self._create_partitions(info.name, range(info.partitions))
            if not await self.redis.hsetnx(keys.TOPICS, info.name, info.pack()):
                raise TopicExists(f"topic {info.name!r} exists")

    async def _create_partitions(self, topic: str, partitions: range) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for p in partitions:
            pipe.delete(keys.log(topic, p), keys.producers(topic, p))
            pipe.hset(keys.meta(topic, p), mapping={"hw": 0, "start": 0, "maxts": -1, "bytes": 0})
        await pipe.execute()

    async def get_topic(self, name: str) -> TopicInfo | None:
        async with storage_errors():
            raw = await self.redis.hget(keys.TOPICS, name)
        return TopicInfo.unpack(name, raw) if raw is not None else None

    async def list_topics(self) -> list[TopicInfo]:
        async with storage_errors():
            raw = await self.redis.hgetall(keys.TOPICS)
        return sorted((TopicInfo.unpack(k.decode(), v) for k, v in raw.items()), key=lambda t: t.name)

    async def update_topic(self, info: TopicInfo) -> None:
        async with storage_errors():
            if not await self.redis.hexists(keys.TOPICS, info.name):
                raise TopicNotFound(f"topic {info.name!r} does not exist")
            await self.redis.hset(keys.TOPICS, info.name, info.pack())

    async def add_partitions(self, info: TopicInfo, new_total: int) -> TopicInfo:
        async with storage_errors():
            await self._create_partitions(info.name, range(info.partitions, new_total))
            grown = TopicInfo(info.name, new_total, info.config, info.created_ms)
            await self.redis.hset(keys.TOPICS, info.name, grown.pack())
        return grown

    async def delete_topic(self, name: str) -> None:
        """The registry entry goes first, so a half-finished delete leaves no visible topic."""
        async with storage_errors():
            raw = await self.redis.hget(keys.TOPICS, name)
            if raw is None:
                raise TopicNotFound(f"topic {name!r} does not exist")
            info = TopicInfo.unpack(name, raw)
            await self.redis.hdel(keys.TOPICS, name)
            for p in range(info.partitions):
                doomed = [k async for k in self.redis.scan_iter(match=keys.partition_keys_pattern(name, p))]
                if doomed:
                    await self.redis.delete(*doomed)

    # -- appends --------------------------------------------------------------------------------

    async def append(
        self, requests: list[AppendRequest], *, sent: Callable[[], None] | None = None
    ) -> list[Append | Exception]:
        """Append batches, one script call each, all in one round trip. With `sent`, the calls go
        on the nodes' ordered connections when they can, and `sent()` is called once they are on
        their way: appends sent later run after them, so the caller may start its next append
        before this one's replies are in (a producer's pipelined requests, kept in order)."""
        calls = [
            (
                APPEND,
                [keys.log(r.topic, r.partition), keys.meta(r.topic, r.partition),
                 keys.producers(r.topic, r.partition), keys.open_txns(r.topic, r.partition)],
                # batch, count, max_ts, pid, epoch, seq, txn
                [r.batch, r.count, r.max_timestamp, r.producer_id, r.producer_epoch, r.base_sequence,
                 1 if r.transactional else 0],
            )
            for r in requests
        ]
        replies = await self._append_ordered(calls, sent) if sent is not None else None
        if replies is None:
            async with storage_errors():
                replies = await self.scripts.call_many(calls)
        out: list[Append | Exception] = []
        for r, reply in zip(requests, replies, strict=True):
            if isinstance(reply, Exception):
                out.append(reply)
            elif reply[0] == ErrorCode.OK:
                out.append(Append(int(reply[1]), int(reply[2])))
            elif reply[0] == ErrorCode.DUPLICATE_SEQUENCE:
                out.append(Append(int(reply[1]), int(reply[2]), duplicate=True))
            else:
                out.append(error_for(reply[0], f"{r.topic}-{r.partition}"))
        return out

    async def _append_ordered(
        self, calls: list[tuple[str, list[str], list[Any]]], sent: Callable[[], None]
    ) -> list[Any] | None:
        """The replies of `calls` sent on the ordered connections, or None (nothing sent) when a
        node's connection cannot be had: the caller then goes through redis-py, and is done when
        its replies are in."""
        conns: list[RespConnection] = []
        for _, call_keys, _ in calls:
            conn = await self.ordered.connection(call_keys[0])
            if conn is None:
                return None
            conns.append(conn)
        sha = self.scripts.sha(APPEND)
        pending: dict[RespConnection, list[int]] = {}
        for i, conn in enumerate(conns):
            pending.setdefault(conn, []).append(i)
        futures = {
            conn: conn.pipeline([("EVALSHA", sha, len(calls[i][1]), *calls[i][1], *calls[i][2]) for i in idx])
            for conn, idx in pending.items()
        }  # all written before the first await: nothing sent after us can overtake
        sent()
        replies: list[Any] = [None] * len(calls)
        async with storage_errors():
            for conn, fut in futures.items():
                for i, reply in zip(pending[conn], await fut, strict=True):
                    if isinstance(reply, RespError) and str(reply).startswith("NOSCRIPT"):
                        conn.close()  # its scripts were flushed: the next connection loads them again
                        reply = StorageUnavailable("redis lost the gateway's scripts; retry")
                    elif isinstance(reply, RespError) and str(reply).startswith(_PASSING):
                        if str(reply).startswith(("MOVED", "ASK")):
                            self.ordered.relocate()
                        reply = StorageUnavailable(f"redis: {reply}; retry")
                    elif isinstance(reply, RespError):
                        reply = ResponseError(str(reply))
                    replies[i] = reply
        return replies

    # -- reads ----------------------------------------------------------------------------------

    async def read(
        self, topic: str, partition: int, offset: int, max_entries: int, *, with_aborted: bool = False,
        direct: bool = False,
    ) -> Slice:
        """Up to `max_entries` entries from the one holding `offset` on, with the bounds read after
        them, and for read-committed readers the aborted transactions whose markers are at or after
        `offset`. With `max_entries` 1 only the entry holding `offset` is read: a megabyte batch
        that fills a fetch alone is not read twice; a second round trip covers the rare case where
        no entry holds it (before the log start). `direct` (for large batches) receives them
        without copies (`resp`), through redis-py when that path cannot serve."""
        log = keys.log(topic, partition)
        commands: list[tuple[Any, ...]] = [
            ("XREVRANGE", log, f"{offset}-1", "-", "COUNT", 1),
            ("HMGET", keys.meta(topic, partition), "hw", "start"),
            ("HVALS", keys.open_txns(topic, partition)),
        ]
        if with_aborted:
            commands.append(("ZRANGEBYSCORE", keys.aborted_txns(topic, partition), offset, "+inf", "WITHSCORES"))
        if max_entries > 1:
            commands.append(("XRANGE", log, f"({offset}-1", "+", "COUNT", max_entries - 1))
        replies = await self.direct.pipeline(log, commands) if direct else None
        if replies is None:
            pipe = self.redis.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            async with storage_errors():
                replies = await pipe.execute()
        else:
            replies[0] = _direct_entries(replies[0])
            if max_entries > 1:
                replies[-1] = _direct_entries(replies[-1])
        before, (hw, start), open_txns, *rest = replies
        if hw is None:
            raise TopicNotFound(f"{topic}-{partition} does not exist")
        aborted = rest.pop(0) if with_aborted else []
        first = _entry(before[0]) if before else None
        holds = first is not None and first.next_offset > offset
        if max_entries > 1:
            after = rest[0]
        elif not holds and offset < int(hw):
            async with storage_errors():
                after = await self.redis.xrange(log, f"({offset}-1", "+", count=1)
        else:
            after = []
        entries = [_entry(e) for e in after]
        if holds:
            assert first is not None
            entries.insert(0, first)
        ranges = [_aborted(m, int(float(score))) for m, score in _pairs(aborted)]
        return Slice(entries, int(hw), int(start), last_stable_offset(int(hw), open_txns), ranges)

    async def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark)."""
        async with storage_errors():
            hw, start = await self.redis.hmget(keys.meta(topic, partition), "hw", "start")
        if hw is None:
            raise TopicNotFound(f"{topic}-{partition} does not exist")
        return int(start), int(hw)

    async def stable_bounds(self, topic: str, partitions: int) -> list[PartitionBounds]:
        """Every partition's offsets, the last stable one included, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for p in range(partitions):
            pipe.hmget(keys.meta(topic, p), "hw", "start")
            pipe.hvals(keys.open_txns(topic, p))
        async with storage_errors():
            replies = await pipe.execute()
        out = []
        for p in range(partitions):
            (hw, start), open_txns = replies[2 * p], replies[2 * p + 1]
            if hw is None:
                raise TopicNotFound(f"{topic}-{p} does not exist")
            out.append(PartitionBounds(p, int(start), int(hw), last_stable_offset(int(hw), open_txns)))
        return out

    async def bounds_many(self, parts: list[tuple[str, int]]) -> list[tuple[int, int] | None]:
        pipe = self.redis.pipeline(transaction=False)
        for t, p in parts:
            pipe.hmget(keys.meta(t, p), "hw", "start")
        async with storage_errors():
            replies = await pipe.execute()
        return [None if hw is None else (int(start), int(hw)) for hw, start in replies]

    async def entry_for_time(self, topic: str, partition: int, ts: int, after: int = -1) -> tuple[int, Entry | None]:
        """The log start, and the first data batch (never a control one) from the one holding
        `after` (-1: the log start) on whose records reach `ts`, or None when none does."""
        while True:
            async with storage_errors():
                reply: list[Any] = await self.scripts.call(
                    "offset-for-time-2", [keys.log(topic, partition), keys.meta(topic, partition)],
                    [ts, after],  # ts, from
                )
            if reply[0] != ErrorCode.OK:
                raise error_for(reply[0], f"{topic}-{partition}")
            start, found = int(reply[1]), int(reply[2])
            if found == -2:  # a long stretch of batches below `ts`: on from where the script stopped
                after = int(reply[3])
                continue
            return start, None if found < 0 else Entry(found, int(reply[3]), reply[4])

    async def trim(
        self,
        topic: str,
        partition: int,
        *,
        retention_ms: int = -1,
        retention_bytes: int = -1,
        min_start: int = -1,
        role_epoch: int = -1,
    ) -> tuple[int, int]:
        """Apply retention or an explicit new start; returns (log start, entries removed). The
        retention role passes its lease epoch: NotAllowed when the partition has seen a newer one."""
        async with storage_errors():
            reply: list[Any] = await self.scripts.call(
                "trim-3",
                [keys.log(topic, partition), keys.meta(topic, partition), keys.aborted_txns(topic, partition)],
                # now_ms, retention_ms, retention_bytes, min_start, epoch
                [int(time.time() * 1000), retention_ms, retention_bytes, min_start, role_epoch],
            )
        if reply[0] != ErrorCode.OK:
            raise error_for(reply[0], f"{topic}-{partition}")
        return int(reply[1]), int(reply[2])

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before, from the counter both faces share."""
        async with storage_errors():
            return int(await self.redis.incr(keys.PRODUCER_IDS))
