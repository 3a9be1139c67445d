"""The delayed-message index of each partition (PIP-195 buckets) and the scheduler's due index.

Per partition (see `keys.delay_*` and `lua/includes/delay.lua`): the held batches in a stream, the
open bucket as a sorted set, sealed buckets as 16-byte-per-message segment strings. Across
partitions, `keys.DELAY_DUE` scores each partition by its next delivery time, so a scheduler sleeps
on one key; hints there may be early (harmless: a move step finds nothing) but are never late.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import msgpack

from gateway.errors import ErrorCode, NotAllowed, error_for
from gateway.store import keys
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.scripts import Scripts

Part = tuple[str, int]


@dataclass(frozen=True)
class DelayConfig:
    """The shape of every partition's index. A bucket is sealed at `bucket_max` messages or
    `bucket_span_ms` after its first arrival; past `max_buckets` the two smallest adjacent merge."""

    bucket_max: int = 20_000
    bucket_span_ms: int = 300_000
    segment_entries: int = 4096
    max_buckets: int = 64
    move_limit: int = 1000

    def argv(self) -> list[int]:
        return [self.bucket_max, self.bucket_span_ms, self.segment_entries, self.max_buckets]


@dataclass(frozen=True)
class DelayItem:
    """One delayed message: a batch (RecordBatch v2, stored and later appended unchanged)."""

    deliver_at_ms: int
    batch: bytes
    count: int
    max_timestamp: int

    def pack(self) -> list[Any]:
        return [self.deliver_at_ms, bytes(self.batch), self.count, self.max_timestamp]


@dataclass(frozen=True)
class Scheduled:
    """What a schedule call did on one partition: messages held, the rest appended at once."""

    held: int
    first_due_ms: int  # -1 when nothing was held


@dataclass(frozen=True)
class Moved:
    moved: int
    next_due_ms: int  # -1 when nothing waits
    first_offset: int  # of the first batch written, -1 when none


@dataclass(frozen=True)
class DelayStats:
    """One partition's index. Bytes are Redis's MEMORY USAGE of the keys, index and payload apart."""

    topic: str
    partition: int
    messages: int
    open_messages: int
    buckets: int
    pending_transactions: int
    next_due_ms: int
    index_bytes: int
    payload_bytes: int

    @property
    def total_buckets(self) -> int:
        """Sealed buckets plus the open one when it holds anything."""
        return self.buckets + (1 if self.open_messages else 0)

    @property
    def index_bytes_per_message(self) -> float:
        return self.index_bytes / self.messages if self.messages else 0.0

    @property
    def payload_bytes_per_message(self) -> float:
        return self.payload_bytes / self.messages if self.messages else 0.0


def member(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def parse_member(raw: bytes | str) -> Part:
    text = raw.decode() if isinstance(raw, bytes) else raw
    topic, p = text.rsplit(":", 1)
    return topic, int(p)


def _index_keys(topic: str, partition: int) -> list[str]:
    return [
        keys.log(topic, partition),
        keys.meta(topic, partition),
        keys.delay_meta(topic, partition),
        keys.delay_held(topic, partition),
        keys.delay_open(topic, partition),
        keys.delay_buckets(topic, partition),
    ]


def _txn_keys(topic: str, partition: int, txn_id: str) -> list[str]:
    return [keys.delay_pending(topic, partition, txn_id), keys.delay_txns(topic, partition)]


_HINT_KEYS = [keys.DELAY_DUE, keys.DELAY_VERSIONS, keys.DELAY_PARTS]


def _hint(part: Part, at: int, version: int = -1) -> tuple[str, list[str], list[Any]]:
    # member, at, version
    return "delay-hint-3", _HINT_KEYS, [member(*part), at, version]


def _checked(reply: Any, part: Part) -> list[Any]:
    if isinstance(reply, Exception):
        raise reply
    if reply[0] != ErrorCode.OK:
        raise error_for(reply[0], f"{part[0]}-{part[1]}")
    return list(reply)


class DelayStore:
    def __init__(self, redis: RedisClient, scripts: Scripts, config: DelayConfig | None = None) -> None:
        self.redis = redis
        self.scripts = scripts
        self.config = config or DelayConfig()

    def shaped(self, config: DelayConfig) -> DelayStore:
        """The same index, written in another shape: the shape is the delay service's setting, the
        connection and scripts stay the store's."""
        return DelayStore(self.redis, self.scripts, config)

    async def schedule(self, now_ms: int, batches: list[tuple[str, int, list[DelayItem]]]) -> list[Scheduled]:
        """Hold each partition's messages (those due by `now_ms` go to the log at once), and lower
        the partition's due hint, all in one round trip."""
        calls: list[tuple[str, list[str], list[Any]]] = []
        for topic, partition, items in batches:
            packed = msgpack.packb([i.pack() for i in items], use_bin_type=False)  # Redis's cmsgpack reads no bin type
            # now, bucket_max, span, seg, max_buckets, items
            calls.append(("delay-add-6", _index_keys(topic, partition), [now_ms, *self.config.argv(), packed]))
            held = [i.deliver_at_ms for i in items if i.deliver_at_ms > now_ms]
            calls.append(_hint((topic, partition), min(held, default=-1)))
        async with storage_errors():
            replies = await self.scripts.call_many(calls)
        out = []
        for (topic, partition, _), reply in zip(batches, replies[::2], strict=True):
            r = _checked(reply, (topic, partition))
            out.append(Scheduled(int(r[1]), int(r[2])))
        return out

    async def hold_in_txn(self, topic: str, partition: int, txn_id: str, items: list[DelayItem]) -> None:
        """Keep messages under a transaction until `commit_txn` or `abort_txn` for it."""
        packed = msgpack.packb([i.pack() for i in items], use_bin_type=False)  # Redis's cmsgpack reads no bin type
        async with storage_errors():
            # txn, items
            await self.scripts.call("delay-hold-2", _txn_keys(topic, partition, txn_id), [txn_id, packed])

    async def commit_txn(self, now_ms: int, topic: str, partition: int, txn_id: str) -> Scheduled:
        """Schedule what the transaction held here; the hint wakes a scheduler to look at once."""
        ks = [*_index_keys(topic, partition), *_txn_keys(topic, partition, txn_id)]
        # now, bucket_max, span, seg, max_buckets, txn
        calls = [("delay-commit-8", ks, [now_ms, *self.config.argv(), txn_id]), _hint((topic, partition), now_ms)]
        async with storage_errors():
            reply, _ = await self.scripts.call_many(calls)
        r = _checked(reply, (topic, partition))
        return Scheduled(int(r[1]), int(r[2]))

    async def abort_txn(self, topic: str, partition: int, txn_id: str) -> None:
        async with storage_errors():
            # txn
            await self.scripts.call("delay-drop-2", _txn_keys(topic, partition, txn_id), [txn_id])

    # -- the scheduler's side --------------------------------------------------------------------

    async def due_partitions(self, now_ms: int, limit: int = 256) -> list[Part]:
        async with storage_errors():
            raw = await self.redis.zrangebyscore(keys.DELAY_DUE, "-inf", now_ms, start=0, num=limit)
        return [parse_member(m) for m in cast("list[bytes]", raw)]

    async def earliest_due(self) -> int | None:
        """The next delivery time over every partition (possibly early), or None."""
        async with storage_errors():
            head = await self.redis.zrange(keys.DELAY_DUE, 0, 0, withscores=True)
        return int(head[0][1]) if head else None

    async def move(
        self, now_ms: int, parts: list[Part], limit: int | None = None, role_epoch: int = -1
    ) -> list[Moved | Exception]:
        """One move step on each partition (at most `limit` messages each), then its due hint set
        from what is left. Safe beside other schedulers: each step is one script. The scheduler
        role passes its lease epoch: NotAllowed where a partition has seen a newer one."""
        n = limit or self.config.move_limit
        async with storage_errors():
            versions = await self.redis.hmget(keys.DELAY_VERSIONS, [member(*p) for p in parts])
            replies = await self.scripts.call_many(
                # now, limit, epoch
                [("delay-move-6", _index_keys(t, p), [now_ms, n, role_epoch]) for t, p in parts]
            )
            out: list[Moved | Exception] = []
            hints = []
            for part, version, reply in zip(parts, versions, replies, strict=True):
                try:
                    r = _checked(reply, part)
                except NotAllowed as exc:  # fenced: the newer scheduler keeps the hint
                    out.append(exc)
                    continue
                except Exception as exc:
                    out.append(exc)
                    hints.append(_hint(part, -1, int(version or 0)))  # a deleted partition drops out
                    continue
                out.append(Moved(int(r[1]), int(r[2]), int(r[3])))
                hints.append(_hint(part, int(r[2]), int(version or 0)))
            if hints:
                await self.scripts.call_many(hints)
        return out

    async def resync(self) -> int:
        """Lower every known partition's hint to its true next delivery time: repairs a hint lost
        to a crash between a schedule and its hint. Costs one read per partition, not per message."""
        async with storage_errors():
            parts = [parse_member(m) for m in await self.redis.smembers(keys.DELAY_PARTS)]
            if not parts:
                return 0
            pipe = self.redis.pipeline(transaction=False)
            for t, p in parts:
                pipe.zrange(keys.delay_open(t, p), 0, 0, withscores=True)
                pipe.zrange(keys.delay_buckets(t, p), 0, 0, withscores=True)
            heads = await pipe.execute()
            hints = []
            for i, part in enumerate(parts):
                times = [int(h[0][1]) for h in heads[2 * i : 2 * i + 2] if h]
                if times:
                    hints.append(_hint(part, min(times)))
            if hints:
                await self.scripts.call_many(hints)
        return len(hints)

    # -- stats -----------------------------------------------------------------------------------

    async def stats(self, topic: str, partition: int) -> DelayStats:
        """Exact memory (MEMORY USAGE ... SAMPLES 0) of every key of the index: O(buckets) calls."""
        dmeta, held, open_, buckets = _index_keys(topic, partition)[2:]
        async with storage_errors():
            pipe = self.redis.pipeline(transaction=False)
            pipe.hget(dmeta, "n")
            pipe.zcard(open_)
            pipe.zrange(buckets, 0, -1, withscores=True)
            pipe.scard(keys.delay_txns(topic, partition))
            for k in (dmeta, open_, buckets, held):
                pipe.memory_usage(k, samples=0)
            n, n_open, bucket_list, n_txns, *mem = await pipe.execute()
            pipe = self.redis.pipeline(transaction=False)
            for bid, _ in bucket_list:
                pipe.hmget(f"{buckets}:{bid.decode()}", "seg", "nseg")
            ranges = await pipe.execute()
            pipe = self.redis.pipeline(transaction=False)
            for (bid, _), (seg, nseg) in zip(bucket_list, ranges, strict=True):
                bucket = f"{buckets}:{bid.decode()}"
                pipe.memory_usage(bucket, samples=0)
                for segment in range(int(seg or 0), int(nseg or 0)):
                    pipe.memory_usage(f"{bucket}:{segment}", samples=0)
            bucket_mem = await pipe.execute()
        index = sum(m or 0 for m in mem[:3]) + sum(m or 0 for m in bucket_mem)
        heads = [int(bucket_list[0][1])] if bucket_list else []
        async with storage_errors():
            first_open = await self.redis.zrange(open_, 0, 0, withscores=True)
        heads += [int(first_open[0][1])] if first_open else []
        return DelayStats(
            topic,
            partition,
            int(n or 0),
            int(n_open),
            len(bucket_list),
            int(n_txns),
            min(heads, default=-1),
            index,
            mem[3] or 0,
        )
