"""Reads and deletes of a partition's tiered segments (KIP-405's RemoteLogManager read side).

A read below the local log start finds the segment holding the offset in the manifest, its index
(kept in a small cache bounded in bytes: a sequential reader asks for the same one again and again)
and takes the batches it wants out of a ranged GET of the data object: their bytes go to the client
as they are, never decoded. A GET takes a few megabytes from there (a read-ahead, bounded in bytes,
that the next sequential reads are served from), and the sequential read-ahead of `LogService.read`
asks for the next range while this one crosses the network. An object store that is away fails the read retriably
(KAFKA_STORAGE_ERROR on the Kafka face, the native client's StorageUnavailable) and nothing else:
local reads and produce do not touch it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import replace
from typing import Generic, TypeVar

from gateway import telemetry
from gateway.errors import StorageUnavailable
from gateway.formats.records import iter_records, parse_header
from gateway.formats.segment import SegmentIndex, parse_index, split
from gateway.store import Store
from gateway.store.log import Entry, Slice
from gateway.store.objects import ObjectNotFound, ObjectStore, ObjectStoreUnavailable
from gateway.store.tier import Segment, data_key, index_key

log = logging.getLogger(__name__)
T = TypeVar("T")

INDEX_CACHE_BYTES = 8 * 1024 * 1024  # segment indexes kept: a few dozen bytes a batch
READ_AHEAD = 4 * 1024 * 1024  # a remote read takes at least this much of its segment (to its end)
READ_AHEAD_BYTES = 16 * 1024 * 1024  # read-ahead kept, the newest range of each segment read
V = TypeVar("V")


class BytesLru(Generic[V]):
    """Values by key, the least recently used going once their sizes pass `limit` (the newest stays)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: OrderedDict[str, tuple[int, V]] = OrderedDict()
        self._bytes = 0

    def get(self, key: str) -> V | None:
        found = self._items.get(key)
        if found is None:
            return None
        self._items.move_to_end(key)
        return found[1]

    def put(self, key: str, size: int, value: V) -> None:
        self.pop(key)
        self._items[key] = (size, value)
        self._bytes += size
        while self._bytes > self.limit and len(self._items) > 1:
            _, (gone, _) = self._items.popitem(last=False)
            self._bytes -= gone

    def pop(self, key: str) -> None:
        found = self._items.pop(key, None)
        if found is not None:
            self._bytes -= found[0]


class RemoteLog:
    def __init__(self, store: Store, objects: ObjectStore) -> None:
        self.store = store
        self.objects = objects
        self._indexes = BytesLru[SegmentIndex](INDEX_CACHE_BYTES)
        self._ahead = BytesLru[tuple[int, bytes]](READ_AHEAD_BYTES)  # data key -> (position, bytes from it)
        self._getting: dict[str, tuple[int, int, asyncio.Task[bytes]]] = {}  # data key -> GET in flight

    async def index(self, topic: str, topic_id: str, partition: int, seg: Segment) -> SegmentIndex:
        key = index_key(topic, topic_id, partition, seg)
        found = self._indexes.get(key)
        if found is not None:
            telemetry.TIER.cache_hits += 1
            return found
        telemetry.TIER.cache_misses += 1
        raw = await remote_call(self.objects.get(key), key)
        idx = parse_index(raw)
        self._indexes.put(key, len(raw), idx)
        return idx

    async def _range(self, key: str, begin: int, end: int, size: int) -> bytes:
        """Bytes [begin, end) of a segment's data object of `size` bytes: from the read-ahead when it
        holds them, else one ranged GET of at least `READ_AHEAD` (to the object's end), kept for
        the sequential reads that follow."""
        held = self._ahead.get(key)
        if held is not None and held[0] <= begin and end <= held[0] + len(held[1]):
            telemetry.TIER.read_ahead_hits += 1
            return held[1][begin - held[0]: end - held[0]]
        getting = self._getting.get(key)
        if getting is not None and getting[0] <= begin and end <= getting[1]:
            # the range is on its way (the sequential read-ahead asked for it, and a client's next
            # Fetch came before it arrived): one GET serves both
            telemetry.TIER.read_ahead_hits += 1
            data = await asyncio.shield(getting[2])
            return data[begin - getting[0]: end - getting[0]]
        stop = min(size, max(end, begin + READ_AHEAD))
        task = asyncio.ensure_future(self._get(key, begin, stop))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved when nobody waits
        self._getting[key] = (begin, stop, task)
        data = await asyncio.shield(task)
        return data[: end - begin]

    async def _get(self, key: str, begin: int, stop: int) -> bytes:
        """One ranged GET, kept as the segment's read-ahead; in a task of its own, so a reader that
        gives up does not cancel it for the others waiting on it."""
        started = time.monotonic()
        try:
            data = await remote_call(self.objects.get_range(key, begin, stop - begin), key)
        finally:
            if self._getting.get(key, (0, 0, None))[2] is asyncio.current_task():
                del self._getting[key]
        telemetry.TIER.fetched(len(data), time.monotonic() - started)
        self._ahead.put(key, len(data), (begin, data))
        return data

    async def read(self, topic: str, topic_id: str, partition: int, offset: int, max_entries: int,
                   sl: Slice, max_bytes: int = 1024 * 1024) -> Slice:
        """`sl` (a read below its local start, with no entries) with the batches from the one
        holding `offset` on, out of the segment holding it: at most `max_entries` and about
        `max_bytes` (the first always). A segment unlisted meanwhile (retention) leaves it empty."""
        seg = await self.store.tier.segment_at(topic, partition, offset)
        if seg is None:
            return sl
        try:
            idx = await self.index(topic, topic_id, partition, seg)
            first = idx.holding(offset)
            if first >= len(idx.bases):
                return sl
            first, last = idx.span(first, max_entries, max_bytes)
            key = data_key(topic, topic_id, partition, seg)
            data = await self._range(key, idx.positions[first], idx.positions[last], seg.size)
        except ObjectNotFound:
            return sl
        entries = [Entry(base, count, batch) for base, count, batch in split(idx, first, last, data)]
        return replace(sl, entries=entries)

    async def offset_for_time(self, topic: str, topic_id: str, partition: int, ts: int,
                              log_start: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `ts` in tiered storage, at or above
        `log_start`; None when no tiered record is that late (the stream is looked at next). The
        segments' and rows' running maximum timestamps find the first batch that may hold one;
        from there the batches' records decide (control batches never answer)."""
        for seg in await self.store.tier.segments(topic, partition):
            if seg.next_offset <= log_start or seg.max_timestamp < ts:
                continue
            idx = await self.index(topic, topic_id, partition, seg)
            key = data_key(topic, topic_id, partition, seg)
            for row in range(idx.first_reaching(ts), len(idx.bases)):
                batch = await self._range(key, idx.positions[row], idx.positions[row + 1], seg.size)
                h = parse_header(batch, verify_crc=False)
                if h.control or h.max_timestamp < ts:
                    continue
                for rec in iter_records(batch, idx.bases[row]):
                    if rec.timestamp >= ts and rec.offset >= log_start:
                        return rec.offset, rec.timestamp
        return None

    async def delete(self, topic: str, topic_id: str, partition: int, members: list[str]) -> None:
        """Delete the objects of unlisted segments (already out of the manifest: a stop before
        this leaves orphans, which the tiering role's sweep deletes)."""
        for m in members:
            seg = Segment.parse(m)
            for key in (data_key(topic, topic_id, partition, seg), index_key(topic, topic_id, partition, seg)):
                await remote_call(self.objects.delete(key), key)
                self._indexes.pop(key)
                self._ahead.pop(key)

    async def delete_topic(self, topic: str, topic_id: str) -> int:
        """Delete every object of a deleted topic (its manifests went with its partitions); returns
        how many. Objects a store away keeps are orphans for the tiering role's sweep."""
        prefix = f"{topic}-{topic_id}/"
        found = await remote_call(self.objects.list(prefix), prefix)
        for obj in found:
            await remote_call(self.objects.delete(obj.key), obj.key)
            self._indexes.pop(obj.key)
            self._ahead.pop(obj.key)
        return len(found)


async def remote_call(call: Awaitable[T], key: str) -> T:
    """An object store call, its store being away as the gateway's retriable StorageUnavailable; an
    object gone (retention deleted it meanwhile) as ObjectNotFound, which readers treat as nothing."""
    try:
        return await call
    except ObjectStoreUnavailable as exc:
        telemetry.TIER.remote_errors += 1
        raise StorageUnavailable(f"tiered storage is unavailable ({key}): {exc}") from exc
