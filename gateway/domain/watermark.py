"""Broker watermarks: producers assert event time, consumers receive the minimum.

A producer's W_SET(T) says no later message of it has an event time below T; W_IDLE takes it out
of the set it joined with its first W_SET. Producers are named by their producer name. Each
marker is a control entry in every partition of the topic (it takes an offset, and Kafka clients
skip it like a commit marker), indexed beside the log by offset.

The watermark of a partition at an offset is the minimum over the producers in the set, each at
its latest mark below the offset, read-committed: an offset past the last stable offset counts as
that offset, and a mark written in a transaction counts once it commits (aborted ones never). A
subscription's watermark is the minimum over its partitions at its acknowledged positions, so it
never runs ahead of a message not yet acknowledged.

A producer gone without its W_IDLE (a crash) would hold the watermark back for good: an operator, or
the background pass once the topic's `watermark.idle.timeout.ms` has passed since its latest mark
was written, takes it out with W_IDLE markers on its behalf, which every reader meets in the log.

W_SNAPSHOTs keep a lookup bounded: the set for every mark below an offset, with the marks of
transactions then open, so the watermark at any offset is the latest snapshot at or below it plus
the marks after that. A partition is snapshotted once `snapshot_marks` markers have gathered since
its latest snapshot, and a periodic pass snapshots those with a quarter of that.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from gateway.clock import now_ms
from gateway.domain.log import LogService, aborted, effective_config
from gateway.errors import CorruptMessage, InvalidRequest, PartitionNotFound
from gateway.formats.records import (
    CONTROL_WATERMARK_IDLE,
    CONTROL_WATERMARK_SET,
    build_watermark_batch,
    control_record,
    parse_header,
)
from gateway.pb import watermark_pb2 as wpb
from gateway.store import Store
from gateway.store.log import Entry, Slice, TopicInfo
from gateway.store.watermark import (
    COUNTS,
    OPEN,
    IndexedMark,
    IndexRead,
    MarkAppend,
    SnapshotWrite,
)

log = logging.getLogger(__name__)

AHEAD = 256  # marks read past a position an ack jumped to, so the acks after it need not ask again
IDLE_TIMEOUT = "watermark.idle.timeout.ms"  # the topic config; see `WatermarkService.idle_pass`


@dataclass(frozen=True)
class Mark:
    """One W_SET (event_time given) or W_IDLE (None) of a producer, at its offset; `written`: when the
    gateway wrote it (epoch ms; None in marks from before it was recorded)."""

    offset: int
    producer: str
    event_time: int | None
    written: int | None = None

    def encode(self) -> bytes:
        """The marker's bytes; they start with `owner(producer)`."""
        m = wpb.WatermarkMark(producer=self.producer)
        if self.event_time is not None:
            m.event_time_ms = self.event_time
        if self.written is not None:
            m.written_ms = self.written
        return m.SerializeToString()

    @classmethod
    def decode(cls, offset: int, body: bytes) -> Mark:
        m = wpb.WatermarkMark()
        try:
            m.ParseFromString(body)
        except Exception as exc:  # protobuf's DecodeError
            raise CorruptMessage(f"undecodable watermark marker at {offset}: {exc}") from exc
        return cls(offset, m.producer, m.event_time_ms if m.HasField("event_time_ms") else None,
                   m.written_ms if m.HasField("written_ms") else None)

    def proto(self) -> wpb.ProducerWatermark:
        p = wpb.ProducerWatermark(producer=self.producer, offset=self.offset)
        if self.event_time is not None:
            p.event_time_ms = self.event_time
        if self.written is not None:
            p.written_ms = self.written
        return p

    @classmethod
    def from_proto(cls, p: wpb.ProducerWatermark) -> Mark:
        return cls(p.offset, p.producer, p.event_time_ms if p.HasField("event_time_ms") else None,
                   p.written_ms if p.HasField("written_ms") else None)


def owner(producer: str) -> bytes:
    """The first bytes of every marker of `producer` (protobuf writes its name field first)."""
    return wpb.WatermarkMark(producer=producer).SerializeToString()


class WatermarkSet:
    """Producers and their latest marks at some offset. A mark replaces a producer's only when it is
    later in the log, so a transaction's marks counted at its commit fall into place."""

    def __init__(self, marks: Iterable[Mark] = ()) -> None:
        self.latest: dict[str, Mark] = {}
        for m in marks:
            self.apply(m)

    def apply(self, mark: Mark) -> None:
        cur = self.latest.get(mark.producer)
        if cur is None or cur.offset < mark.offset:
            self.latest[mark.producer] = mark

    @property
    def active(self) -> dict[str, int]:
        """Producer -> its watermark, for the producers in the set (not idle)."""
        return {p: m.event_time for p, m in self.latest.items() if m.event_time is not None}

    @property
    def value(self) -> int | None:
        """The minimum over the active producers; None when there is none."""
        return min(self.active.values(), default=None)

    def snapshot(self, offset: int, pending: list[Mark]) -> bytes:
        """W_SNAPSHOT bytes. An idle producer stays only while an older pending mark of it could
        still commit, which its later W_IDLE must then outrank."""
        older = {m.producer for m in pending}
        kept = [m for m in self.latest.values() if m.event_time is not None or m.producer in older]
        snap = wpb.WatermarkSnapshot(offset=offset)
        snap.producers.extend(m.proto() for m in sorted(kept, key=lambda m: m.offset))
        snap.pending.extend(m.proto() for m in pending)
        return snap.SerializeToString()


def fold(read: IndexRead) -> tuple[WatermarkSet, list[Mark]]:
    """The set at `read.offset`, and the marks below it whose transactions are still open."""
    wset = WatermarkSet()
    pending: list[Mark] = []
    if read.snapshot is not None:
        snap = wpb.WatermarkSnapshot()
        snap.ParseFromString(read.snapshot)
        for p in snap.producers:
            wset.apply(Mark.from_proto(p))
        for p in snap.pending:
            status = read.pending.get(p.offset)
            if status == COUNTS:
                wset.apply(Mark.from_proto(p))
            elif status == OPEN:
                pending.append(Mark.from_proto(p))
    for im in read.marks:
        if im.status == COUNTS:
            wset.apply(Mark.decode(im.offset, im.body))
        elif im.status == OPEN:
            pending.append(Mark.decode(im.offset, im.body))
    return wset, pending


def marks_in(sl: Slice, candidates: Iterable[Entry] | None = None) -> list[Mark]:
    """The watermark markers a read-committed slice holds below its last stable offset, but those of
    aborted transactions; among `candidates` only, when the caller knows which entries are not data.
    Only control entries are decoded (one small record each)."""
    out = []
    for e in sl.entries if candidates is None else candidates:
        if e.base_offset >= sl.stable:
            break
        h = parse_header(e.batch, verify_crc=False)
        if not h.control or aborted(sl, h, e.base_offset):
            continue
        kind, value = control_record(e.batch)
        if kind in (CONTROL_WATERMARK_SET, CONTROL_WATERMARK_IDLE):
            out.append(Mark.decode(e.base_offset, value or b""))
    return out


@dataclass(frozen=True)
class PartitionWatermark:
    """A partition's watermark at `offset` (the offset asked for, or the last stable offset)."""

    partition: int
    offset: int
    watermark: int | None
    producers: dict[str, int]  # the active producers' watermarks
    pending: int  # marks of open transactions below the high watermark (only when read at it)
    entries_read: int  # index entries the lookup read: bounded by the snapshots


@dataclass(frozen=True)
class PositionsWatermark:
    """The watermark of a reader (a subscription, a consumer group) at its positions."""

    name: str
    watermark: int | None
    positions: dict[int, int]


class WatermarkService:
    settle_kind = "watermark"
    """What a transaction records of a partition where it writes markers (`settle_txn`)."""

    def __init__(self, store: Store, log_service: LogService, *, snapshot_marks: int = 128) -> None:
        self.index = store.watermark
        self.txns = store.txn
        self.subscriptions = store.subscriptions
        self.log = log_service
        self.snapshot_marks = max(4, snapshot_marks)
        self._snapshotting: set[tuple[str, int]] = set()

    # -- producers ------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        producer: str,
        event_time: int | None,
        *,
        txn_id: str = "",
        producer_id: int = -1,
        producer_epoch: int = -1,
        unless_since: list[int] | None = None,
        control: bool = False,
    ) -> list[int]:
        """W_SET (or W_IDLE when `event_time` is None) of `producer` into every partition of the
        topic, in one round trip; the markers' offsets by partition. In a transaction (its id, producer
        id and epoch) the caller has added the partitions to it first. With `unless_since` (an offset
        per partition), a partition where the producer has a mark at or after it gets none (-1). A
        producer's marks are refused (`StorageFull`) while a partition's Redis primary is at its memory
        high-water mark; `control` ones (the gateway idling a producer that went away) are not."""
        if not producer:
            raise InvalidRequest("a watermark needs the producer's name")
        info = await self.log.topic(topic, create=False)
        body = Mark(0, producer, event_time, now_ms()).encode()
        batch = build_watermark_batch(event_time is None, body, producer_id=producer_id,
                                      producer_epoch=producer_epoch, transactional=bool(txn_id))
        since = unless_since or []
        appends = [MarkAppend(topic, p, batch, body, txn_id, producer_id, producer_epoch,
                              since[p] if p < len(since) else -1, owner(producer))
                   for p in range(info.partitions)]
        if not control:
            for p in range(info.partitions):
                self.log.memory.admit(topic, p, len(batch))
        if txn_id:
            await self.txns.needs(txn_id, self.settle_kind, [(topic, p) for p in range(info.partitions)])
        results = await self.index.append(appends)
        offsets = []
        full = []
        for p, res in enumerate(results):
            if isinstance(res, Exception):
                raise res
            offset, since_snapshot = res
            offsets.append(offset)
            if offset >= 0:
                self.log.notifier.notify(topic, p)
            if since_snapshot >= self.snapshot_marks:
                full.append(p)
        if full:
            await self._snapshot_full(topic, full)
        return offsets

    async def mark_idle(self, topic: str, producer: str) -> list[int] | None:
        """W_IDLE on behalf of `producer`, for one that went away without it (which would hold the
        watermark back for good): the markers' offsets by partition, where every reader meets them;
        None, writing nothing, when it is in no partition's set. Its next watermark puts it back."""
        if producer not in (await self._members(await self.log.topic(topic, create=False)))[0]:
            return None
        return await self.send(topic, producer, None, control=True)

    async def idle_pass(self, topics: list[TopicInfo]) -> list[tuple[str, str]]:
        """On topics with `watermark.idle.timeout.ms`, W_IDLE on behalf of each producer whose latest
        mark was written longer ago than that; (topic, producer) of each one marked idle. A producer
        that sends a mark meanwhile keeps its place: the script checks there is none since the look."""
        done = []
        for info in topics:
            timeout = int(effective_config(info)[IDLE_TIMEOUT])
            if timeout <= 0:
                continue
            members, seen = await self._members(info)
            for producer, written in members.items():
                if written is not None and now_ms() - written > timeout:
                    offsets = await self.send(info.name, producer, None, unless_since=seen)
                    if any(o >= 0 for o in offsets):
                        log.info("watermark producer %r of %s silent for %d ms: marked idle",
                                 producer, info.name, now_ms() - written)
                        done.append((info.name, producer))
        return done

    async def _members(self, info: TopicInfo) -> tuple[dict[str, int | None], list[int]]:
        """The producers in the topic's set at its high watermark, each with when its latest mark was
        written (marks of open transactions count, as they may yet), and the offsets read up to."""
        reads = await self.index.read([(info.name, p, -1) for p in range(info.partitions)], committed=False)
        heard: dict[str, list[int]] = {}
        for r in reads:
            wset, pending = fold(r)
            for name in wset.active:
                heard.setdefault(name, []).extend(
                    m.written for m in (wset.latest[name], *pending) if m.producer == name and m.written is not None
                )
        return {name: max(times, default=None) for name, times in heard.items()}, [r.offset for r in reads]

    async def settle_txn(self, topic: str, partition: int, txn_id: str, commit: bool) -> None:
        """The transaction coordinator's partition hook, after its marker: the transaction's
        watermark markers count from now on (commit) or are gone (abort). Safe to repeat."""
        await self.index.settle(topic, partition, txn_id, commit)

    # -- lookups --------------------------------------------------------------------------------

    async def at(self, topic: str, offsets: dict[int, int]) -> dict[int, PartitionWatermark]:
        """Each partition's watermark at its offset (-1: the last stable offset), in one round trip."""
        info = await self.log.topic(topic, create=False)
        for p, o in offsets.items():
            if not 0 <= p < info.partitions:
                raise PartitionNotFound(f"{topic} has no partition {p}")
            if o < -1:
                raise InvalidRequest(f"{topic}-{p}: offset {o} is not a position")
        parts = sorted(offsets)
        reads = await self.index.read([(topic, p, offsets[p]) for p in parts])
        out = {}
        for p, r in zip(parts, reads, strict=True):
            wset, _ = fold(r)
            out[p] = PartitionWatermark(p, r.offset, wset.value, wset.active, 0, r.entries_read)
        return out

    async def watermark(self, topic: str, offsets: dict[int, int]) -> int | None:
        """The minimum over the given partitions of the watermark at each given offset; None when no
        producer is in the set at any of them."""
        found = await self.at(topic, offsets)
        return min((w.watermark for w in found.values() if w.watermark is not None), default=None)

    async def partitions(self, topic: str) -> list[PartitionWatermark]:
        """Every partition's watermark at its last stable offset, with the marks of open transactions."""
        info = await self.log.topic(topic, create=False)
        committed = await self.at(topic, dict.fromkeys(range(info.partitions), -1))
        everything = await self.index.read([(topic, p, -1) for p in range(info.partitions)], committed=False)
        return [
            PartitionWatermark(p, w.offset, w.watermark, w.producers, len(fold(r)[1]), w.entries_read)
            for (p, w), r in zip(sorted(committed.items()), everything, strict=True)
        ]

    async def of_readers(self, topic: str, readers: dict[str, dict[int, int]]) -> list[PositionsWatermark]:
        """Each reader's watermark at its positions (partition -> next offset), in one round trip."""
        info = await self.log.topic(topic, create=False)
        wanted = [(name, p, o) for name, pos in sorted(readers.items()) for p, o in sorted(pos.items())
                  if 0 <= p < info.partitions and o >= 0]
        reads = await self.index.read([(topic, p, o) for _, p, o in wanted]) if wanted else []
        values: dict[str, list[int]] = {name: [] for name in readers}
        for (name, _, _), r in zip(wanted, reads, strict=True):
            v = fold(r)[0].value
            if v is not None:
                values[name].append(v)
        return [PositionsWatermark(name, min(values[name], default=None), dict(sorted(readers[name].items())))
                for name in sorted(readers)]

    async def of_subscriptions(self, topic: str) -> list[PositionsWatermark]:
        """Every subscription's watermark at its acknowledged positions, as stored."""
        info = await self.log.topic(topic, create=False)
        return await self.of_readers(topic, await self.subscriptions.positions(topic, range(info.partitions)))

    # -- snapshots ------------------------------------------------------------------------------

    async def snapshot(self, topic: str, partition: int) -> bool:
        """A W_SNAPSHOT of the partition at its high watermark; False when a later one exists."""
        return (await self.snapshots([(topic, partition)]))[0]

    async def snapshots(self, parts: list[tuple[str, int]]) -> list[bool]:
        """`snapshot` of each (topic, partition), all in two round trips."""
        reads = await self.index.read([(t, p, -1) for t, p in parts], committed=False)
        writes = []
        for (t, p), r in zip(parts, reads, strict=True):
            wset, pending = fold(r)
            writes.append(SnapshotWrite(t, p, r.offset, [m.offset for m in pending], wset.snapshot(r.offset, pending)))
        return await self.index.snapshot(writes)

    async def snapshot_pass(self) -> int:
        """The background role: mark idle the producers silent past their topic's idle timeout, then
        snapshot every partition with a quarter of `snapshot_marks` markers since its latest snapshot;
        returns how many snapshots were taken."""
        topics = await self.log.list_topics()
        await self.idle_pass(topics)
        parts = [(t.name, p) for t in topics for p in range(t.partitions)]
        if not parts:
            return 0
        due = [tp for tp, n in zip(parts, await self.index.unsnapshotted(parts), strict=True)
               if n >= self.snapshot_marks // 4]
        return sum([sum(await self.snapshots(due[i:i + 256])) for i in range(0, len(due), 256)])

    async def _snapshot_full(self, topic: str, partitions: list[int]) -> None:
        """Partitions with `snapshot_marks` markers since their latest snapshot get one now, by the
        send that filled them (two round trips every that many markers, whatever the partitions),
        but those being taken already."""
        keys = [(topic, p) for p in partitions if (topic, p) not in self._snapshotting]
        if not keys:
            return
        self._snapshotting.update(keys)
        try:
            await self.snapshots(keys)
        except Exception as exc:  # the markers are written: the periodic pass tries again
            log.warning("watermark snapshots of %s %s failed: %s", topic, [p for _, p in keys], exc)
        finally:
            self._snapshotting.difference_update(keys)

    @property
    def entries_read(self) -> int:
        """Index entries read by every lookup so far: the work watermarks cost."""
        return self.index.entries_read


# -- a subscription's watermark, kept at its acknowledged positions ------------------------------


@dataclass
class _Track:
    """One partition: the set at the acknowledged position `asked` (read at `at`, which differs only
    when clamped into the log or to the last stable offset), and the marks known past it: every one
    below `known_to`."""

    wset: WatermarkSet
    asked: int
    at: int
    known_to: int
    ahead: dict[int, Mark] = field(default_factory=dict)

    @classmethod
    def load(cls, read: IndexRead, asked: int) -> _Track:
        wset, _ = fold(read)
        ahead = {m.offset: Mark.decode(m.offset, m.body) for m in read.ahead if m.status == COUNTS}
        known = read.stable if read.ahead_complete else read.ahead[-1].offset + 1 if read.ahead else read.offset
        return cls(wset, asked, read.offset, known, ahead)

    def learn(self, lo: int, hi: int, marks: list[Mark]) -> None:
        for m in marks:
            if m.offset >= self.at:
                self.ahead[m.offset] = m
        if lo <= self.known_to < hi:
            self.known_to = hi

    def advance(self, position: int) -> bool:
        """Move to a later position with the marks known; False when it must be read again."""
        if position == self.asked:
            return True
        if position < self.asked or position > max(self.known_to, self.at):
            return False
        for o in sorted(o for o in self.ahead if o < position):
            self.wset.apply(self.ahead.pop(o))
        self.asked, self.at = position, max(self.at, position)
        return True


def _scanned(sl: Slice) -> tuple[int, int] | None:
    """The offsets a read-committed slice covers below its last stable offset."""
    below = [e for e in sl.entries if e.base_offset < sl.stable]
    if not below:
        return None
    return below[0].base_offset, min(sl.stable, below[-1].next_offset)


class SubscriptionWatermark:
    """A subscription's watermark on this gateway, moved with its acknowledged positions. Marks are
    learned from the entries its dispatcher reads anyway, so acks cost no extra round trip; a position
    beyond what was read (a seek, an ack of something never delivered) is looked up in the index."""

    def __init__(self, service: WatermarkService, topic: str) -> None:
        self.service = service
        self.topic = topic
        self.tracks: dict[int, _Track] = {}

    @property
    def value(self) -> int | None:
        return min((v for t in self.tracks.values() if (v := t.wset.value) is not None), default=None)

    async def load(self, positions: dict[int, int], *, ahead: int = 0) -> None:
        """Read the set at each partition's position afresh: when the subscription opens or seeks,
        its dispatcher reads on from there and teaches it the marks after; an ack that jumps past
        what was read also asks for `ahead` marks after its position."""
        if not positions:
            return
        parts = sorted(positions)
        reads = await self.service.index.read([(self.topic, p, positions[p]) for p in parts], ahead=ahead)
        for p, r in zip(parts, reads, strict=True):
            self.tracks[p] = _Track.load(r, positions[p])

    def learn(self, partition: int, sl: Slice, hidden: list[Entry]) -> None:
        """Marks in a slice the dispatcher read from the partition; `hidden`: its entries that are
        not data (markers, aborted batches), where they are."""
        track = self.tracks.get(partition)
        span = _scanned(sl)
        if track is None or span is None:
            return
        track.learn(span[0], span[1], marks_in(sl, hidden))

    async def advance(self, positions: dict[int, int]) -> None:
        """Move to new acknowledged positions."""
        again = {p: c for p, c in positions.items() if p in self.tracks and not self.tracks[p].advance(c)}
        await self.load(again, ahead=AHEAD)


__all__ = [
    "AHEAD",
    "IndexedMark",
    "Mark",
    "PartitionWatermark",
    "PositionsWatermark",
    "SubscriptionWatermark",
    "WatermarkService",
    "WatermarkSet",
    "fold",
    "marks_in",
]
