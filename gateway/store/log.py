"""Partition logs and the topic registry in Redis.

A partition is a stream whose entry IDs are `<base offset>-1`, one entry per record batch with
fields `b` (the batch as received), `n` (records), `t` (running maximum timestamp) and `c` (bytes
in the log before it). Its meta hash holds `hw` (the next offset), `start` (the log start offset),
`maxts`, `bytes` and `gen` (the incarnation of the topic it belongs to), and on a tiered partition
`ls` (the local log start: the stream starts there) and `te` (where its tiered segments end; see
`tier.py`).

Topics. The registry (`keys.TOPICS`, one slot) is the one source of truth: a topic exists when it
has a record there, and every change of a record is one script (create, config, grow, delete). A
partition's keys live in a slot of their own, so they follow the record without a shared step:
- Each creation of a name is a new incarnation: a number `g` from a counter (which orders them)
  and a random topic id (KIP-516's); a record stored before ids existed gets one on first read
  (`topic-id-2`: the first writer's id stays), so every gateway names a topic by the same id. A
  partition's meta hash is marked with its incarnation, and reads return the mark, so a reader
  naming a topic by id can check the data is of the incarnation the id names.
  `partition-init-1` makes a partition only where none or an older one is, so a gateway that lost a race
  (or woke late) never touches the winner's partitions, and an older incarnation's leftovers are
  dropped, never reused.
- Partitions are made after the record that counts them, and shown when all are made: the record
  holds `p` (partitions shown) and, while some are being made, `n` (the count they are made for;
  `p` is 0 for a topic being created). Any gateway that reads a record with `n` makes them (made
  once, so it may race the creator) and settles it; a creator stopped half-way leaves a topic
  that is either not shown yet or whole.
- A delete removes the record and lists the incarnation in `keys.TOPICS_DROPPING`; then each
  partition is frozen (`hw` goes: no script writes to it any more, readers see no partition), its
  keys found by a scan and deleted with its meta hash. Each step is safe to repeat; deletions a
  gateway stopped half-way are finished by `finish_deletes`.
"""

from __future__ import annotations

import asyncio
import json
import struct
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import msgpack

from gateway.clock import now_ms
from gateway.errors import (
    ErrorCode,
    GatewayError,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    ReplicationTimedOut,
    ReplyLost,
    StorageFull,
    StorageUnavailable,
    TopicExists,
    TopicNotFound,
    error_for,
)
from gateway.formats.records import parse_header
from gateway.store import keys, predicted
from gateway.store.connection import RedisClient, storage_errors
from gateway.store.producer_ids import ProducerIds
from gateway.store.read_batch import ReadBatches
from gateway.store.replication import READ_CONFIRM_MS, READ_MARK, Replication, by, check_read
from gateway.store.resp import DirectConnections, RespConnection
from gateway.store.scripts import Scripts

APPEND = "append-5"
_STORED = (ErrorCode.OK, ErrorCode.DUPLICATE_SEQUENCE)
# an append's wait for Redis ends this far past its WAIT's timeout (the caller's share of the client's
# request timeout): Redis's own answer comes first unless Redis is stopped or cut off
_GIVE_UP = 9 / 8
_GIVE_UP_FLOOR_MS = 900  # for a produce whose timeout_ms asks for less (acks=0 and 1 send any)
_HELD = 4096  # refusals remembered for the batches pipelined behind them (`LogStore._behind_refused`)
_SEQ_MOD = 1 << 31  # sequences wrap here, as includes/producer.lua wraps them


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    created_ms: int = 0
    topic_id: str = ""  # random, 16 bytes in hex, new with each incarnation; "" for older topics
    generation: int = 0  # numbers the incarnations of a name, in the order they were created


@dataclass(frozen=True)
class _Record:
    """A topic's registry record: its description, the partition count being made (None when
    none is), and the record's version, which every change replaces."""

    info: TopicInfo
    pending: int | None
    version: int

    @classmethod
    def unpack(cls, name: str, raw: bytes) -> _Record:
        d = msgpack.unpackb(raw, raw=False)
        info = TopicInfo(name, d["p"], dict(d["c"] or {}), d["t"], d.get("id", ""), d.get("g", 0))
        return cls(info, d.get("n"), d.get("v", 0))


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
    generation: int = 0  # the incarnation of the topic the partition belongs to
    # the first offset the stream holds (Kafka's local log start); below it, from `log_start` on,
    # the batches are in tiered storage and `entries` is empty for the tier to fill
    local_start: int = -1

    @property
    def stable(self) -> int:
        return self.high_watermark if self.last_stable_offset < 0 else self.last_stable_offset

    def following(self, read_committed: bool) -> int | None:
        """Where a sequential reader reads on after these entries; None when nothing is there yet."""
        if not self.entries:
            return None
        offset = self.entries[-1].next_offset
        return offset if offset < (self.stable if read_committed else self.high_watermark) else None


class Trimmed(NamedTuple):
    """What a trim did: the new log start, the stream entries removed, and the tiered segments
    unlisted (manifest members: see `gateway.store.tier.Segment`), whose objects are to delete."""

    log_start: int
    removed: int
    segments: list[str]


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


def _dropping(gen: int, name: str) -> str:
    """A deleted incarnation's field in `keys.TOPICS_DROPPING` (as topic-delete-2 writes it)."""
    return f"{gen}:{name}"


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
class PartitionProducer:
    """What a partition remembers of one idempotent producer (Kafka's DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int  # -1: none since its epoch began
    last_timestamp: int  # the max timestamp of its last batch still in the log; -1: none
    txn_start_offset: int  # the first offset of its open transaction here; -1: none


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
    replicas: int = 0  # replicas that must hold the batch (Redis's WAIT) before it is acknowledged
    verify_txn: bool = False  # a transactional batch may only open a transaction its coordinator expects


class LogStore:
    def __init__(self, redis: RedisClient, scripts: Scripts, replication: Replication) -> None:
        self.redis = redis
        self.scripts = scripts
        # a Cluster's reads that wait for replicas go here alone, their mark script loaded (`_pipeline`)
        self.direct = DirectConnections(redis, name="gateway-direct-read", preload=(scripts.specs[READ_MARK].source,))
        self.reads = ReadBatches(redis)
        self.ordered = DirectConnections(redis, name="gateway-append", preload=(
            scripts.specs[APPEND].source, scripts.specs[predicted.CHECK].source))
        # appends that wait for replicas have connections of their own, shared with the state changes
        # that wait (`replication`): their WAITs never hold up the others (a producer's acks is
        # fixed, so its requests stay on one connection, in order)
        self.replication = replication
        self.producer_ids = ProducerIds(scripts)
        self.predicted = predicted.PredictedAppender(self)
        # (log, producer id) -> (epoch, base sequence, the answer for a batch behind it) of its last batch
        # refused unwritten, or answered maybe stored and unconfirmed
        self._refused: OrderedDict[tuple[str, int], tuple[int, int, type[GatewayError]]] = OrderedDict()

    # -- topics ---------------------------------------------------------------------------------

    async def create_topic(self, info: TopicInfo) -> TopicInfo:
        """Register the topic (the step racing creates decide), then make and show its partitions;
        returns it with its topic id and incarnation."""
        reply = await self._call(
            "topic-create-2", [keys.TOPICS, keys.TOPIC_SEQ],
            # name, partitions, config, created, id
            [info.name, info.partitions, msgpack.packb(info.config), info.created_ms, uuid.uuid4().hex],
        )
        if reply[0] == ErrorCode.TOPIC_EXISTS:
            raise TopicExists(f"topic {info.name!r} exists")
        created = _Record.unpack(info.name, reply[1])
        settled = await self._settled(created)  # None: shown (by a gateway that settled it) and deleted
        return settled.info if settled is not None else replace(created.info, partitions=info.partitions)

    async def get_topic(self, name: str) -> TopicInfo | None:
        rec = await self._current(name)
        return rec.info if rec is not None else None

    async def list_topics(self) -> list[TopicInfo]:
        async with storage_errors():
            raw: dict[bytes, bytes] = await self.redis.hgetall(keys.TOPICS)  # type: ignore[assignment]
        out = []
        for k, v in raw.items():
            rec = _Record.unpack(k.decode(), v)
            try:
                settled = rec if rec.pending is None and rec.info.topic_id else await self._current(rec.info.name)
            except GatewayError as exc:
                # partitions being made that cannot be now (their replicas away): the creation or
                # growth was not answered as done, so the topic is listed as it stands (a new one not
                # at all) and the listing, not the settling, is what the caller asked for
                if not exc.retriable or rec.pending is None:
                    raise
                settled = rec if rec.info.partitions and rec.info.topic_id else None
            if settled is not None:
                out.append(settled.info)
        return sorted(out, key=lambda t: t.name)

    async def alter_config(self, name: str, change: Callable[[TopicInfo], dict[str, str]]) -> TopicInfo:
        """Set the configs `change` computes (it may raise) from the topic as it is; computed
        again when the topic changed before they were written."""
        while True:
            rec = await self._current(name)
            if rec is None:
                raise TopicNotFound(f"topic {name!r} does not exist")
            config = change(rec.info)
            reply = await self._call(
                "topic-config-2", [keys.TOPICS, keys.TOPIC_SEQ],
                [name, rec.version, msgpack.packb(config)],  # name, version, config
            )
            if reply[0] == ErrorCode.OK:
                return _Record.unpack(name, reply[1]).info
            if reply[0] == ErrorCode.TOPIC_NOT_FOUND:
                raise TopicNotFound(f"topic {name!r} does not exist")

    async def add_partitions(self, name: str, total: Callable[[TopicInfo], int]) -> TopicInfo:
        """Grow the topic to the partition count `total` gives (it may raise) for the topic as it
        is; asked again when the topic changed before it grew."""
        while True:
            rec = await self._current(name)
            if rec is None:
                raise TopicNotFound(f"topic {name!r} does not exist")
            reply = await self._call(
                "topic-grow-2", [keys.TOPICS, keys.TOPIC_SEQ],
                [name, rec.version, total(rec.info)],  # name, version, total
            )
            if reply[0] == ErrorCode.TOPIC_NOT_FOUND:
                raise TopicNotFound(f"topic {name!r} does not exist")
            if reply[0] == ErrorCode.OK:
                grown = await self._settled(_Record.unpack(name, reply[1]))
                if grown is None:
                    raise TopicNotFound(f"topic {name!r} was deleted")
                return grown.info

    async def topic_by_id(self, topic_id: str) -> TopicInfo | None:
        """The topic whose current incarnation has this id, or None (a look through the whole
        registry: callers keep what they found, an id never names another topic)."""
        for info in await self.list_topics():
            if info.topic_id == topic_id:
                return info
        return None

    async def delete_topic(self, name: str, topic_id: str = "") -> None:
        """The record goes first, in one step: readers see the topic whole, or not at all. A
        creation left half-way is finished first, so that it can be deleted. With `topic_id`, only
        the incarnation of that id is deleted, never one created under the name since."""
        if await self._current(name) is None:
            raise TopicNotFound(f"topic {name!r} does not exist")
        reply = await self._call(
            "topic-delete-2", [keys.TOPICS, keys.TOPICS_DROPPING], [name, topic_id]  # name, id
        )
        if reply[0] != ErrorCode.OK:
            raise TopicNotFound(f"topic {name!r} does not exist")
        gen, partitions = int(reply[1]), int(reply[2])
        await self._drop(name, gen, range(partitions))
        await self._call("topic-dropped-1", [keys.TOPICS_DROPPING], [_dropping(gen, name)])  # field

    async def finish_deletes(self) -> int:
        """Drop the partitions of deleted topics whose gateway stopped before it was done; returns
        how many deletions were finished."""
        async with storage_errors():
            listed: dict[bytes, bytes] = await self.redis.hgetall(keys.TOPICS_DROPPING)  # type: ignore[assignment]
        for field_, partitions in listed.items():
            gen, name = field_.decode().split(":", 1)
            await self._drop(name, int(gen), range(int(partitions)))
            await self._call("topic-dropped-1", [keys.TOPICS_DROPPING], [field_])  # field
        return len(listed)

    async def _current(self, name: str) -> _Record | None:
        """The topic's record with no partitions pending (made and shown here if need be)."""
        while True:
            async with storage_errors():
                raw: bytes | None = await self.redis.hget(keys.TOPICS, name)  # type: ignore[assignment]
            if raw is None:
                return None
            rec = await self._settled(_Record.unpack(name, raw))
            if rec is not None and not rec.info.topic_id:
                # stored before topic ids: the first gateway to ask gives it one, then read it again
                await self._call("topic-id-2", [keys.TOPICS, keys.TOPIC_SEQ], [name, uuid.uuid4().hex])  # name, id
                continue
            if rec is not None:
                return rec

    async def _settled(self, rec: _Record) -> _Record | None:
        """`rec` once its pending partitions are made and shown; None when its incarnation is gone."""
        name = rec.info.name
        while rec.pending is not None:
            gen, target = rec.info.generation, rec.pending
            made = range(rec.info.partitions, target)
            await self._make_partitions(name, gen, made)
            reply = await self._call(
                "topic-settle-2", [keys.TOPICS, keys.TOPIC_SEQ], [name, gen, target]  # name, gen, target
            )
            if reply[0] != ErrorCode.OK:
                # deleted meanwhile: what was made here may have come after its partitions were dropped
                await self._drop(name, gen, made)
                return None
            rec = _Record.unpack(name, reply[1])
        return rec

    async def _make_partitions(self, name: str, gen: int, partitions: range | list[int]) -> None:
        """Make the partitions of incarnation `gen`; an older incarnation's are dropped first."""
        replies = await self._call_all(
            [("partition-init-1", [keys.meta(name, p)], [gen]) for p in partitions]  # gen
        )
        stale = [p for p, made in zip(partitions, replies, strict=True) if made == -1]
        if stale:
            await self._purge(name, gen - 1, stale)
            await self._make_partitions(name, gen, stale)

    async def _drop(self, name: str, gen: int, partitions: range) -> None:
        """Drop the partitions of incarnation `gen` (and of older ones); a newer one's stay."""
        replies = await self._call_all(
            [("partition-drop-1", [keys.meta(name, p)], [gen]) for p in partitions]  # gen
        )
        frozen = [p for p, f in zip(partitions, replies, strict=True) if f == 1]
        if frozen:
            await self._purge(name, gen, frozen)

    async def _purge(self, name: str, gen: int, partitions: list[int]) -> None:
        """Delete frozen partitions with every key a scan finds of theirs (none is written once frozen)."""
        found: dict[bytes, list[bytes]] = {keys.partition_tag(name, p).encode(): [] for p in partitions}
        async with storage_errors():
            async for key in self.redis.scan_iter(match=keys.topic_keys_pattern(name), count=1000):
                found.get(key[: key.index(b"}") + 1], []).append(key)
        await self._call_all([  # listed as msgpack strings: Redis's cmsgpack reads no bin type
            ("partition-purge-1", [keys.meta(name, p)],
             [gen, msgpack.packb(found[keys.partition_tag(name, p).encode()], use_bin_type=False)])  # gen, keys
            for p in partitions
        ])

    async def _call(self, name: str, call_keys: list[str], args: list[Any]) -> Any:
        async with storage_errors():
            return await self.scripts.call(name, call_keys, args)

    async def _call_all(self, calls: list[tuple[str, list[str], list[Any]]]) -> list[Any]:
        """Several scripts in one round trip; the first error raised."""
        if not calls:
            return []
        async with storage_errors():
            replies = await self.scripts.call_many(calls)
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        return replies

    # -- appends --------------------------------------------------------------------------------

    async def append(
        self, requests: list[AppendRequest], *, sent: Callable[[], None] | None = None, timeout_ms: int = 30_000
    ) -> list[Append | Exception]:
        """Append batches, one script call each, all in one round trip. With `sent`, the calls go
        on the nodes' ordered connections when they can, and `sent()` is called once they are on
        their way: appends sent later run after them, so the caller may start its next append
        before this one's replies are in (a producer's pipelined requests, kept in order).

        A request with `replicas` is refused (NotEnoughReplicas, nothing written) while its node
        has fewer replicas in its in-sync set (`Replication.in_sync`), and so is the batch its
        producer pipelined behind one refused so (`_behind_refused`), and is answered once Redis's
        WAIT on the connection that appended it says every replica in that set holds it
        (`Replication.confirmed`), within `timeout_ms`; else ReplicationTimedOut, with the
        offsets it took (Kafka's DelayedProduce expiring: REQUEST_TIMED_OUT). Nothing here waits
        much past `timeout_ms` (`_GIVE_UP`): a Redis stopped or cut off leaves an append sent
        unanswered ReplyLost (maybe stored) and a replica count unread StorageUnavailable (nothing
        sent), so the client hears within its own request timeout and retries in order.
        WAIT counts the writes of its own connection, so these go only on the ordered ones. A WAIT
        whose connection is lost after the append ran is NotEnoughReplicasAfterAppend too, never the
        StorageUnavailable (KAFKA_STORAGE_ERROR) of a write that did not happen: librdkafka takes
        KAFKA_STORAGE_ERROR as "not persisted" and NOT_ENOUGH_REPLICAS_AFTER_APPEND as "possibly
        persisted" (rdkafka_request.c, rd_kafka_handle_Produce_error), and Kafka's leader never answers
        a batch it appended with KAFKA_STORAGE_ERROR (Partition.appendRecordsToLeader, DelayedProduce)."""
        out: list[Append | Exception | None] = [None] * len(requests)
        needed = [i for i, r in enumerate(requests) if r.replicas]
        in_sync = [0] * len(requests)
        if needed:
            until = give_up_at(timeout_ms)
            for i in needed:
                try:
                    in_sync[i] = await self.replication.in_sync(
                        keys.log(requests[i].topic, requests[i].partition), until)
                except TimeoutError:  # nothing sent yet: Redis away, as the produce face answers that
                    raise StorageUnavailable(f"redis: the replicas of {requests[i].topic}-{requests[i].partition} "
                                             f"unread within {timeout_ms} ms") from None
                if in_sync[i] < requests[i].replicas:  # Kafka: the ISR smaller than min.insync.replicas
                    out[i] = short = NotEnoughReplicas(
                        f"{requests[i].topic}-{requests[i].partition}: {in_sync[i]} Redis replicas in sync, "
                        f"{requests[i].replicas} needed (min.insync.replicas {requests[i].replicas + 1})")
                    self.hold(requests[i], short)
            if sent is None:  # WAIT needs the appending connection: only the ordered path has one
                for i in needed:
                    out[i] = out[i] or StorageUnavailable("replicated appends need an ordered connection")
        todo = [i for i, o in enumerate(out) if o is None]
        ahead: list[int] = []  # batches of a kilobyte and more keep out of Lua (gateway/store/predicted.py)
        task = None
        if sent is not None:
            ahead = [i for i in todo if self.predicted.takes(requests[i])]
            task = await self.predicted.send([requests[i] for i in ahead], [in_sync[i] for i in ahead],
                                             timeout_ms) if ahead else None
            if task is None:
                ahead = []
            todo = [i for i in todo if i not in ahead]
        replies = await self.scripted([requests[i] for i in todo], [in_sync[i] for i in todo], sent, timeout_ms)
        for i, reply in zip(todo, replies, strict=True):
            out[i] = await self._answered(requests[i], reply)
        if task is not None:
            for i, reply in zip(ahead, await asyncio.shield(task), strict=True):
                out[i] = await self._answered(requests[i], reply)
        return [o for o in out if o is not None]

    async def _answered(self, r: AppendRequest, reply: Any) -> Append | Exception:
        """`answer`, but a batch refused out of order behind its producer's batch refused here
        unwritten, or answered maybe stored without its replicas' confirmation, is refused as
        `_behind_refused` says, and a stored one ends that memory; so does that batch answered a
        refusal its producer does not send it again after (INVALID_TXN_STATE, a fenced epoch, ...):
        the batches behind it, refused NOT_ENOUGH_REPLICAS to be retried after it, were retried
        until their delivery timeout, the transaction left unable to abort before then, and
        librdkafka's abort then bumped its epoch into a fatal fencing (the soak's cluster:395738052)."""
        out = answer(r, reply)
        if r.producer_id < 0:
            return out
        key = (keys.log(r.topic, r.partition), r.producer_id)
        if isinstance(out, Append):
            self._refused.pop(key, None)
        elif isinstance(out, (StorageFull, NotEnoughReplicasAfterAppend, ReplicationTimedOut)):
            self.hold(r, out)  # Redis's own refusal past maxmemory; an append its replicas did not confirm
        elif not isinstance(reply, Exception) and reply[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE:
            return await self._behind_refused(r) or out
        elif isinstance(out, GatewayError) and not out.retriable and \
                self._refused.get(key, (None, None))[:2] == (r.producer_epoch, r.base_sequence):
            del self._refused[key]  # the batch held for is not coming again
        return out

    async def scripted(self, requests: list[AppendRequest], in_sync: list[int], sent: Callable[[], None] | None,
                       timeout_ms: int) -> list[Any]:
        """append-5's replies (raw, or the errors they stand for) to `requests`, whose in-sync sets
        `append` has read: on the ordered connections with `sent`, through redis-py without it."""
        calls = [
            (
                APPEND,
                [keys.log(r.topic, r.partition), keys.meta(r.topic, r.partition),
                 keys.producers(r.topic, r.partition), keys.open_txns(r.topic, r.partition),
                 keys.expected_txns(r.topic, r.partition)],
                # batch, count, max_ts, pid, epoch, seq, txn, verify
                [r.batch, r.count, r.max_timestamp, r.producer_id, r.producer_epoch, r.base_sequence,
                 1 if r.transactional else 0, 1 if r.verify_txn else 0],
            )
            for r in requests
        ]
        replicas = [r.replicas for r in requests]
        replies = await self._append_ordered(calls, sent, replicas, in_sync, timeout_ms) \
            if sent is not None else None
        if replies is None and not any(replicas):
            async with storage_errors():
                replies = await self.scripts.call_many(calls) if calls else []
        elif replies is None:
            replies = [StorageUnavailable("redis: no connection for a replicated append; retry")] * len(calls)
        return replies

    def hold(self, r: AppendRequest, refusal: GatewayError) -> None:
        """Remember an idempotent batch refused with nothing written (too few replicas in sync, Redis
        full or evicting: `refusal`), or appended and answered without its replicas' confirmation
        (NotEnoughReplicasAfterAppend, ReplicationTimedOut: maybe stored), for the batches its
        producer pipelined behind it (`_behind_refused`); the oldest of `_HELD` are forgotten."""
        if r.producer_id < 0:
            return
        key = (keys.log(r.topic, r.partition), r.producer_id)
        # a batch behind one maybe stored was written no more than one behind a refusal was
        behind = NotEnoughReplicas if isinstance(refusal, (NotEnoughReplicasAfterAppend, ReplicationTimedOut)) \
            else type(refusal)
        self._refused[key] = (r.producer_epoch, r.base_sequence, behind)
        self._refused.move_to_end(key)
        while len(self._refused) > _HELD:
            self._refused.popitem(last=False)

    async def _behind_refused(self, r: AppendRequest) -> GatewayError | None:
        """The refusal of the batch before `r` (`hold`) for `r`, refused out of order, when what its
        partition lacks is exactly that batch, else None.

        A producer's next request, pipelined behind one refused for too few replicas in sync, met the
        set read again with the replica back, and was refused OUT_OF_ORDER_SEQUENCE_NUMBER: librdkafka
        answers that, for a batch behind an unacknowledged one, by bumping its epoch once its requests
        drain and renumbering every record it holds unacknowledged (rdkafka_request.c,
        rd_kafka_handle_idempotent_Produce_error: "skipped sequence numbers"), records an answer of
        REQUEST_TIMED_OUT left maybe stored on other partitions among them: stored twice (the soak's
        cluster:341120687). Kafka's leader answers NOT_ENOUGH_REPLICAS to every batch while its ISR
        is below min.insync.replicas (Partition.appendRecordsToLeader, before the producer's sequence
        is checked), and its ISR grows only once the controller commits it, so the batches pipelined
        behind a refused one are refused alike; here the set is read again within a second. Answered
        as the one before it, the batch is retried after it, in order (librdkafka drains and resends:
        "drain before retrying"). The producer's state is read again, so a batch whose gap is
        anything else (the refused one stored since, through another gateway) keeps its answer. A
        Redis full (or evicting) between two such requests is the same race: Kafka's log directory,
        once failed, refuses every batch after (KAFKA_STORAGE_ERROR), here memory is sampled again.

        So is a batch behind one appended on a primary whose replicas did not confirm it (answered
        NOT_ENOUGH_REPLICAS_AFTER_APPEND or REQUEST_TIMED_OUT, maybe stored) when that primary is
        then replaced by a replica that lacks it: the batch behind reaches the new primary and is
        refused out of order, and librdkafka's epoch bump renumbers, among what it holds
        unacknowledged, batches that a closed connection left stored on other partitions (the
        soak's cluster:688065516, a Cluster primary isolated: three records stored twice). Kafka's
        deposed leader answers every request of the connection itself (NOT_LEADER_OR_FOLLOWER), never
        from its successor's log; here the batch behind is refused NOT_ENOUGH_REPLICAS (nothing
        written), and librdkafka resends both in order."""
        key = (keys.log(r.topic, r.partition), r.producer_id)
        held = self._refused.get(key)
        if held is None or held[0] != r.producer_epoch:  # `_answered` asks for idempotent batches alone
            return None
        async with storage_errors():
            raw: bytes | None = await self.redis.hget(keys.producers(r.topic, r.partition), str(r.producer_id))  # type: ignore[assignment]
        epoch, batches = _producer_state(raw) if raw is not None else (r.producer_epoch, [])
        expected = (batches[-1][1] + 1) % _SEQ_MOD if epoch == r.producer_epoch and batches else 0
        if expected != held[1] or (r.base_sequence - held[1]) % _SEQ_MOD >= _SEQ_MOD // 2:
            return None
        return held[2](f"{r.topic}-{r.partition}: behind a batch of its producer this partition lacks (sequence "
                       f"{held[1]}), which is to be sent again first")

    async def replicas_online(self, topic: str, partition: int) -> int:
        """The replicas online of the Redis primary holding the partition (read again after a second)."""
        return await self.replication.online(keys.log(topic, partition))

    async def _append_ordered(
        self, calls: list[tuple[str, list[str], list[Any]]], sent: Callable[[], None], replicas: list[int],
        in_sync: list[int], timeout_ms: int,
    ) -> list[Any] | None:
        """The replies of `calls` sent on the ordered connections, or None (nothing sent) when a
        node's connection cannot be had: the caller then goes through redis-py, and is done when
        its replies are in. Calls with `replicas` (the floor) go on the replicated connections, each
        node's followed by a WAIT for its in-sync set (`in_sync`, as read before; `Replication.confirmed`)."""
        conns: list[RespConnection] = []
        for (_, call_keys, _), needs in zip(calls, replicas, strict=True):
            conn = await (self.replication.connections if needs else self.ordered).connection(call_keys[0])
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
        waits = {
            conn: self.replication.wait(conn, max(in_sync[i] for i in idx), timeout_ms)
            for conn, idx in pending.items() if replicas[idx[0]]
        }
        end = asyncio.get_running_loop().time() + timeout_ms / 1000
        sent()
        give_up = give_up_at(timeout_ms)
        replies: list[Any] = [None] * len(calls)
        async with storage_errors():
            for conn, fut in futures.items():
                try:
                    got = await by(fut, give_up)
                except TimeoutError:  # Redis stopped or cut off, not (yet) replaced: maybe stored, as below
                    for i in pending[conn]:
                        replies[i] = ReplyLost(f"{calls[i][1][0]}: no reply from Redis within {timeout_ms} ms of the "
                                               f"append being sent; it may be stored: retry")
                    continue
                except ConnectionError as exc:
                    # written, the reply lost (the connection dropped: a primary replaced under it):
                    # maybe stored. Kafka answers such an append REQUEST_TIMED_OUT, which a client's
                    # idempotent retry resends under the same sequence; KAFKA_STORAGE_ERROR would tell
                    # it nothing was stored, and librdkafka then bumps its epoch and sends the records
                    # again as new ones: duplicates (tests/jepsen's primary-paused)
                    for i in pending[conn]:
                        replies[i] = ReplyLost(f"{calls[i][1][0]}: the connection to Redis dropped after the append "
                                             f"was sent ({exc}); it may be stored: retry")
                    continue
                for i, reply in zip(pending[conn], got, strict=True):
                    replies[i] = self.replication.reply(conn, reply)
            for conn, wait in waits.items():
                idx = pending[conn]
                await self.confirm(conn, wait, idx, [c[1][0] for c in calls], replies,
                                   max(in_sync[i] for i in idx), replicas, end, give_up, timeout_ms)
        return replies

    async def confirm(self, conn: RespConnection, wait: asyncio.Future[int], idx: list[int], logs: list[str],
                      replies: list[Any], in_sync: int, replicas: list[int], end: float, give_up: float,
                      timeout_ms: int) -> None:
        """`replies[i]` for each of `idx` (appends of the partitions `logs[i]`, sent on `conn` before
        `wait`, the first WAIT after them: `Replication.wait` for `in_sync` replicas) as the replicas
        confirm them (`Replication.confirmed`): kept when every replica in the in-sync set and at least
        `replicas[i]` hold it, replaced by the error that says what is known of it else."""
        try:
            (acked, needed), lost = await self.replication.confirmed(
                conn, logs[idx[0]], wait, in_sync, max(replicas[i] for i in idx), end, give_up), None
        except (StorageUnavailable, NotEnoughReplicasAfterAppend) as exc:
            (acked, needed), lost = (-1, 0), exc
        except TimeoutError:  # Redis never answered the WAIT: as unconfirmed as one that timed out
            (acked, needed), lost = (-1, 0), None
        for i in idx:
            reply = replies[i]
            if acked >= max(needed, replicas[i]) or not isinstance(reply, list):
                continue
            self.replication.forget(logs[i])  # read its replicas again
            if reply[0] not in _STORED:
                # a refusal (out of order, a stale epoch, ...) from the producer state of a
                # primary its replicas did not confirm: one cut off or paused while the
                # Sentinels promote another, whose state is ahead of it. Nothing was written:
                # retriable, as Kafka's deposed leader answers NOT_LEADER_OR_FOLLOWER, never
                # a fatal OUT_OF_ORDER_SEQUENCE_NUMBER from its own log (tests/jepsen
                # primary-isolated: a producer's batch sent to the gateway on the isolated
                # primary after its earlier ones were stored on the new one)
                replies[i] = StorageUnavailable(
                    f"{logs[i]}: refused (code {reply[0]}) by a primary whose replicas "
                    f"did not confirm it ({lost or f'{max(acked, 0)} of {needed}'}); retry")
                continue
            if isinstance(lost, StorageUnavailable):
                # the WAIT's connection lost, or its primary maybe being replaced: where the
                # batch will be is unknown, and the producer's next batch, pipelined behind
                # it, may reach the next primary without it and be refused out of order, which
                # librdkafka answers by bumping its epoch and sending this one again as new (a
                # duplicate: soak sentinel:729702984). As from a leader gone mid-request, the
                # connection closes (kafka/produce.py), and the producer resends in order
                replies[i] = ReplyLost(
                    f"{logs[i]}: appended; how many Redis replicas hold it is unknown ({lost}), "
                    f"{replicas[i]} needed")
            elif lost:  # the in-sync set shrank below min.insync.replicas: Kafka's answer
                replies[i] = NotEnoughReplicasAfterAppend(f"{logs[i]}: {lost}")
            else:
                replies[i] = ReplicationTimedOut(
                    f"{logs[i]}: on {max(acked, 0)} Redis replicas within {timeout_ms} ms, "
                    f"{max(needed, replicas[i])} in sync needed (min.insync.replicas {replicas[i] + 1})",
                    int(reply[1]), int(reply[2]))

    # -- reads ----------------------------------------------------------------------------------

    async def read(
        self, topic: str, partition: int, offset: int, max_entries: int, *, with_aborted: bool = False,
        direct: bool = False, below_local: bool = False,
    ) -> Slice:
        """Up to `max_entries` entries from the one holding `offset` on, with the bounds read after
        them, and for read-committed readers the aborted transactions whose markers are at or after
        `offset`. With `max_entries` 1 only the entry holding `offset` is read: a megabyte batch
        that fills a fetch alone is not read twice; a second round trip covers the rare case where
        no entry holds it (before the log start). `direct` (for large batches) receives them
        without copies (`resp`), through redis-py when that path cannot serve. `below_local` (the
        caller expects `offset` in tiered storage) reads the bounds alone, the stream only when it
        was wrong."""
        log = keys.log(topic, partition)
        stream = not below_local
        commands: list[tuple[Any, ...]] = [
            ("HMGET", keys.meta(topic, partition), "hw", "start", "gen", "cb", "cg", "ls"),
            ("HVALS", keys.open_txns(topic, partition)),
        ]
        if stream:
            commands.insert(0, ("XREVRANGE", log, f"{offset}-1", "-", "COUNT", 1))
        if with_aborted:
            commands.append(("ZRANGEBYSCORE", keys.aborted_txns(topic, partition), offset, "+inf", "WITHSCORES"))
        if stream and max_entries > 1:
            commands.append(("XRANGE", log, f"({offset}-1", "+", "COUNT", max_entries - 1))
        streams = (0, len(commands) - 1 if max_entries > 1 else 0) if stream else ()
        replies = await self._pipeline(log, keys.read_mark(topic, partition), commands, direct, streams=streams)
        if not stream:
            replies.insert(0, [])
        before, (hw, start, gen, cb, cg, ls), open_txns, *rest = replies
        if hw is None:
            raise TopicNotFound(f"{topic}-{partition} does not exist")
        if offset > int(hw):
            await self._end_confirmed(topic, partition, offset, direct)
        if ls is not None and int(start) <= offset < int(ls):  # tiered: the tier reads these
            ranges = [_aborted(m, int(float(score))) for m, score in _pairs(rest[0] if with_aborted else [])]
            return Slice([], int(hw), int(start), last_stable_offset(int(hw), open_txns), ranges, int(gen or 0),
                         int(ls))
        if not stream:
            return await self.read(topic, partition, offset, max_entries, with_aborted=with_aborted, direct=direct)
        if cb is not None and offset < int(cb):
            return await self._read_cleaned(topic, partition, offset, max_entries, with_aborted, direct, int(cg))
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
        return Slice(entries, int(hw), int(start), last_stable_offset(int(hw), open_txns), ranges, int(gen or 0),
                     max(int(start), int(ls or 0)))

    async def _pipeline(self, log: str, mark_key: str, commands: list[tuple[Any, ...]], direct: bool,
                        streams: tuple[int, ...], mark: int | None = None) -> list[Any]:
        """The replies of `commands` (all in `log`'s slot) in one round trip; `direct` receives them
        without copies (`resp`), through redis-py when that path cannot serve. Stream replies (at
        `streams`) come in redis-py's shape either way.

        A read is answered only once the replicas hold everything it read (`Replication.read_replicas`),
        else StorageUnavailable, retriable: Kafka gives nothing above its high watermark, and a deposed
        leader answers NOT_LEADER_OR_FOLLOWER, never its own log's bounds (a consumer told OFFSET_OUT_OF_RANGE
        by a resumed old primary, whose log ends below where it read, resets its position). On a
        Cluster such a read goes on the direct connection alone (`_cluster_marked`). `mark` asks for
        that many replicas instead."""
        if mark is None:
            mark = await self.replication.read_replicas(log)
            if not mark:
                replies = await self._pipeline(log, mark_key, commands, direct, streams, mark=0)
                if why := await self.replication.unconfirmed(log):  # asked after the read, as `replaced` is
                    raise StorageUnavailable(f"{log}: what was read may be gone with its primary ({why}); retry")
                return replies
        if mark and self.replication.cluster:
            replies = await self._cluster_marked(log, mark_key, commands, mark)
        elif mark and direct and (conn := await self.direct.connection(log)) is not None:
            replies = await self._marked_on(conn, log, mark_key, commands, mark)
        else:
            # a WAIT after the read on its connection, one for the reads of a loop turn through redis-py
            # (`ReadBatches`), and behind Sentinel a ROLE after it (`Replication.replaced`)
            role = [("ROLE",)] if mark and self.replication.vouching else []
            confirm = [self.replication.read_mark(mark_key), ("WAIT", mark, READ_CONFIRM_MS), *role] if mark else []
            got = await self.direct.pipeline(log, [*commands, *confirm]) if direct else None
            if got is None:  # through redis-py, sharing a pipeline: its replies are in its own shape already
                shaped, confirmed = await self.reads.run(commands, confirm)
                async with storage_errors():
                    for reply in shaped:
                        if isinstance(reply, Exception):
                            raise reply
                if mark:
                    await self.replication.check_confirmation(log, confirmed, mark)
                return shaped
            replies = got
            if mark:
                await self.replication.check_confirmation(log, replies[len(commands):], mark)
        for i in set(streams):
            replies[i] = _direct_entries(replies[i])
        return replies[:len(commands)]

    async def _end_confirmed(self, topic: str, partition: int, offset: int, direct: bool) -> None:
        """StorageUnavailable (retriable) unless the replicas a state change waits for, all of them and
        not just those online, hold a log that ends below `offset`: a reader is told its offset is past
        the end (OFFSET_OUT_OF_RANGE, and a consumer resets) only by the primary.

        Kafka's leader drops a follower from the ISR only once the controller agrees
        (`Partition.prepareIsrShrink`, AlterPartition), so one cut off keeps waiting for it, and a new
        leader holds everything below the old high watermark. A Redis primary drops its replicas by
        itself: one cut off with a minority and back, or resumed from a pause, before the Sentinels
        demote it, has none online, confirms its reads with none, and its log ends below offsets that
        a consumer read from the new primary (soak sentinel:1026397558, a consumer sent back to its
        input's start)."""
        log = keys.log(topic, partition)
        needed, _ = await self.replication.state_replicas(log)
        if needed <= 0:
            return
        (hw,) = await self._pipeline(log, keys.read_mark(topic, partition), [("HGET", keys.meta(topic, partition), "hw")],
                                     direct, streams=(), mark=needed)
        if hw is not None and int(hw) >= offset:  # appended meanwhile: the next read holds it
            raise StorageUnavailable(f"{log}: offset {offset} reached while its log end was confirmed; retry")

    async def _cluster_marked(self, log: str, mark_key: str, commands: list[tuple[Any, ...]], mark: int) -> list[Any]:
        """`commands` and their mark on `log`'s node's one direct connection, and a WAIT shared with the
        reads sent meanwhile (`Waits`: one WAIT in flight blocks its connection in Redis, so one each
        would queue every read of the node behind the one before). Not through redis-py: its cluster
        pipeline follows a MOVED by sending that command again elsewhere, apart from the WAIT that was
        to cover it. Error replies are raised as redis-py's would be (a node that moved the slot on,
        or was demoted: StorageUnavailable)."""
        conn = await self.direct.connection(log)
        if conn is None:
            raise StorageUnavailable(f"{log}: no connection to its Redis node; retry")
        return await self._marked_on(conn, log, mark_key, commands, mark)

    async def _marked_on(self, conn: RespConnection, log: str, mark_key: str, commands: list[tuple[Any, ...]],
                         mark: int) -> list[Any]:
        """`_cluster_marked` on `conn`; also a large read's behind Sentinel or on one Redis, which a
        WAIT of its own on the one direct connection queued behind the read before (issue 35)."""
        sent = conn.pipeline([*commands, self.replication.read_mark(mark_key)])
        acked = self.replication.waits.after(conn, mark, READ_CONFIRM_MS)  # sent after the mark
        try:
            replies = await sent
        except OSError as exc:
            raise StorageUnavailable(f"{log}: {exc}; retry") from exc
        for i, reply in enumerate(replies):
            mapped = self.replication.reply(conn, reply)
            if isinstance(mapped, Exception):
                raise mapped
            replies[i] = mapped
        check_read(log, await acked, mark)
        return replies[:len(commands)]

    async def _read_cleaned(
        self, topic: str, partition: int, offset: int, max_entries: int, with_aborted: bool, direct: bool, cg: int
    ) -> Slice:
        """A read below a compacted partition's clean boundary: the cleaned stream of the current
        generation from the batch holding `offset` (or the first after it: cleaning leaves gaps), then
        the main stream's first batches, which start at the boundary. The meta hash is read after the
        streams: when a cleaner pass switched generations meanwhile (`cg` moved), it is read again."""
        log, meta = keys.log(topic, partition), keys.meta(topic, partition)
        while True:
            clean = keys.clean_log(topic, partition, cg)
            commands: list[tuple[Any, ...]] = [
                ("XREVRANGE", clean, f"{offset}-1", "-", "COUNT", 1),
                ("XRANGE", clean, f"({offset}-1", "+", "COUNT", max_entries),
                ("XRANGE", log, "-", "+", "COUNT", max_entries),
                ("HMGET", meta, "hw", "start", "gen", "cb", "cg"),
                ("HVALS", keys.open_txns(topic, partition)),
            ]
            if with_aborted:
                commands.append(("ZRANGEBYSCORE", keys.aborted_txns(topic, partition), offset, "+inf", "WITHSCORES"))
            before, after, dirty, (hw, start, gen, cb, now_cg), open_txns, *rest = await self._pipeline(
                log, keys.read_mark(topic, partition), commands, direct, streams=(0, 1, 2))
            if hw is None:
                raise TopicNotFound(f"{topic}-{partition} does not exist")
            if int(now_cg or 0) == cg:
                break
            cg = int(now_cg or 0)
        boundary = int(cb or 0)
        entries = [_entry(e) for e in before if _entry(e).next_offset > offset]
        entries += [_entry(e) for e in after if int(e[0].split(b"-", 1)[0]) < boundary]
        entries += [_entry(e) for e in dirty if int(e[0].split(b"-", 1)[0]) >= boundary]
        ranges = [_aborted(m, int(float(score))) for m, score in _pairs(rest[0] if with_aborted else [])]
        return Slice(entries[:max_entries], int(hw), int(start), last_stable_offset(int(hw), open_txns), ranges,
                     int(gen or 0))

    async def confirmed_bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """`bounds` as a read is answered: once the replicas hold what was read (`_pipeline`), else
        StorageUnavailable, retriable. For the end offset a consumer validates its position against
        (OffsetForLeaderEpoch, KIP-320): librdkafka seeks back to an end below its position, as to a
        truncated log, and an end read from a primary cut off or paused through its failover is one
        its successor may have moved past (as OFFSET_OUT_OF_RANGE is confirmed, `_end_confirmed`).
        Kafka answers it from the leader alone (`Partition.lastOffsetForLeaderEpoch`)."""
        (reply,) = await self._pipeline(keys.log(topic, partition), keys.read_mark(topic, partition),
                                        [("HMGET", keys.meta(topic, partition), "hw", "start")], True, streams=())
        hw, start = reply
        if hw is None:
            raise TopicNotFound(f"{topic}-{partition} does not exist")
        return int(start), int(hw)

    async def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark)."""
        async with storage_errors():
            hw, start = await self.redis.hmget(keys.meta(topic, partition), "hw", "start")
        if hw is None:
            raise TopicNotFound(f"{topic}-{partition} does not exist")
        assert start is not None  # a partition's meta holds both from its creation
        return int(start), int(hw)

    async def producer_states(self, topic: str, partition: int) -> list[PartitionProducer]:
        """The producers whose sequences the partition keeps (`pids`, written by append-5.lua), with
        their open transactions; each one's last batch is read for its timestamp."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(keys.meta(topic, partition), "hw")
        pipe.hgetall(keys.producers(topic, partition))
        pipe.hgetall(keys.open_txns(topic, partition))
        async with storage_errors():
            hw, pids, txns = await pipe.execute()
        if hw is None:
            raise TopicNotFound(f"{topic}-{partition} does not exist")
        opened = {int(pid): int(value.split(b":", 1)[0]) for pid, value in txns.items()}
        states = {int(pid): _producer_state(raw) for pid, raw in pids.items()}
        last = {pid: batches[-1] for pid, (_, batches) in states.items() if batches}
        log = keys.log(topic, partition)
        pipe = self.redis.pipeline(transaction=False)
        for batch in last.values():
            pipe.xrange(log, f"{batch[2]}-1", f"{batch[2]}-1")
        async with storage_errors():
            entries = dict(zip(last, await pipe.execute(), strict=True))
        out = []
        for pid, s in sorted(states.items()):
            found = entries.get(pid)
            ts = parse_header(found[0][1][b"b"], verify_crc=False).max_timestamp if found else -1
            out.append(PartitionProducer(pid, s[0], last[pid][1] if pid in last else -1, ts, opened.get(pid, -1)))
        return out

    async def max_timestamp(self, topic: str, partition: int) -> int:
        """The largest timestamp of a data batch ever appended to the partition (`maxts`); -1: none."""
        async with storage_errors():
            hw, maxts = await self.redis.hmget(keys.meta(topic, partition), "hw", "maxts")
        if hw is None:
            raise TopicNotFound(f"{topic}-{partition} does not exist")
        return -1 if maxts is None else int(maxts)

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
        found_cleaned, after = await self._cleaned_for_time(topic, partition, ts, after)
        if found_cleaned is not None:
            return found_cleaned
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

    async def _cleaned_for_time(
        self, topic: str, partition: int, ts: int, after: int
    ) -> tuple[tuple[int, Entry] | None, int]:
        """`entry_for_time` below a compacted partition's clean boundary, where the cleaned stream has
        gaps the script's bisection does not expect: its batches in order, a few at a time, until one
        reaches `ts` ((log start, entry), after); else (None, where the main stream's search starts)."""
        async with storage_errors():
            start, cb, cg = await self.redis.hmget(keys.meta(topic, partition), "start", "cb", "cg")
        if cb is None or max(after, int(start or 0)) >= int(cb):
            return None, after
        clean, low = keys.clean_log(topic, partition, int(cg or 0)), max(after, int(start or 0))
        async with storage_errors():
            holding: Any = await self.redis.xrevrange(clean, f"{low}-1", "-", count=1)
        lower = f"{holding[0][0].decode()}" if holding else "-"
        while True:
            async with storage_errors():
                entries: Any = await self.redis.xrange(clean, lower, "+", count=64)
            for raw in entries:
                e = _entry(raw)
                h = parse_header(e.batch, verify_crc=False)
                if not h.control and h.max_timestamp >= ts:
                    return (int(start or 0), e), after
            if len(entries) < 64:
                return None, max(after, int(cb))
            lower = "(" + entries[-1][0].decode()

    async def trim(
        self,
        topic: str,
        partition: int,
        *,
        retention_ms: int = -1,
        retention_bytes: int = -1,
        min_start: int = -1,
        role_epoch: int = -1,
    ) -> Trimmed:
        """Apply retention or an explicit new start. The retention role passes its lease epoch:
        NotAllowed when the partition has seen a newer one. Tiered segments below the new start
        are unlisted in the same step; their objects are the caller's to delete."""
        async with storage_errors():
            reply: list[Any] = await self.scripts.call(
                "trim-4",
                [keys.log(topic, partition), keys.meta(topic, partition), keys.aborted_txns(topic, partition),
                 keys.tier_manifest(topic, partition)],
                # now_ms, retention_ms, retention_bytes, min_start, epoch
                [now_ms(), retention_ms, retention_bytes, min_start, role_epoch],
            )
        if reply[0] != ErrorCode.OK:
            raise error_for(reply[0], f"{topic}-{partition}")
        return Trimmed(int(reply[1]), int(reply[2]), [m.decode() for m in reply[3:]])

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before, from the counter both faces share, in blocks
        (`ProducerIds`)."""
        async with storage_errors():
            return await self.producer_ids.allocate()


def _producer_state(raw: bytes) -> tuple[int, list[tuple[int, int, int]]]:
    """A producer's epoch and kept batches (base sequence, last sequence, base offset), from the
    fixed-width form includes/producer.lua writes, or the JSON form stored before it."""
    if raw[:1] == b"{":
        old = json.loads(raw)
        # a Lua table left empty is encoded as {}: a producer with no batch since its epoch began
        return old["e"], [tuple(b) for b in old["b"]] if isinstance(old["b"], list) else []
    (epoch,) = struct.unpack_from(">i", raw)
    return epoch, list(struct.iter_unpack(">iiq", raw[4:]))


def answer(r: AppendRequest, reply: Any) -> Append | Exception:
    """An append script's reply (raw, or the error it stands for) as the caller is answered."""
    if isinstance(reply, Exception):
        return reply
    if reply[0] in _STORED:
        return Append(int(reply[1]), int(reply[2]), duplicate=reply[0] == ErrorCode.DUPLICATE_SEQUENCE)
    return error_for(reply[0], f"{r.topic}-{r.partition}")


def give_up_at(timeout_ms: int) -> float:
    """When (the loop's clock) an append whose WAIT is given `timeout_ms` stops waiting for Redis."""
    return asyncio.get_running_loop().time() + max(timeout_ms * _GIVE_UP, _GIVE_UP_FLOOR_MS) / 1000
