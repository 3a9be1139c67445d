"""Reads and deletes of a partition's tiered segments (KIP-405's RemoteLogManager read side).

A read below the local log start finds the segment holding the offset in the manifest, its index
(kept in a small cache bounded in bytes: a sequential reader asks for the same one again and again)
and takes the batches it wants with one ranged GET of the data object: their bytes go to the client
as they are, never decoded. The sequential read-ahead of `LogService.read` reads the next range
while this one crosses the network. An object store that is away fails the read retriably
(KAFKA_STORAGE_ERROR on the Kafka face, the native client's StorageUnavailable) and nothing else:
local reads and produce do not touch it.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import replace
from typing import TypeVar

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


class RemoteLog:
    def __init__(self, store: Store, objects: ObjectStore, *, cache_bytes: int = INDEX_CACHE_BYTES) -> None:
        self.store = store
        self.objects = objects
        self._cache: OrderedDict[str, tuple[int, SegmentIndex]] = OrderedDict()
        self._cache_bytes = 0
        self._cache_limit = cache_bytes

    async def index(self, topic: str, topic_id: str, partition: int, seg: Segment) -> SegmentIndex:
        key = index_key(topic, topic_id, partition, seg)
        found = self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
            telemetry.TIER.cache_hits += 1
            return found[1]
        telemetry.TIER.cache_misses += 1
        raw = await remote_call(self.objects.get(key), key)
        idx = parse_index(raw)
        self._cache[key] = (len(raw), idx)
        self._cache_bytes += len(raw)
        while self._cache_bytes > self._cache_limit and len(self._cache) > 1:
            _, (size, _) = self._cache.popitem(last=False)
            self._cache_bytes -= size
        return idx

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
            begin, length = idx.positions[first], idx.positions[last] - idx.positions[first]
            key = data_key(topic, topic_id, partition, seg)
            started = time.monotonic()
            data = await remote_call(self.objects.get_range(key, begin, length), key)
        except ObjectNotFound:
            return sl
        telemetry.TIER.fetched(len(data), time.monotonic() - started)
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
                begin, end = idx.positions[row], idx.positions[row + 1]
                batch = await remote_call(self.objects.get_range(key, begin, end - begin), key)
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
                self._forget(key)

    async def delete_topic(self, topic: str, topic_id: str) -> int:
        """Delete every object of a deleted topic (its manifests went with its partitions); returns
        how many. Objects a store away keeps are orphans for the tiering role's sweep."""
        prefix = f"{topic}-{topic_id}/"
        found = await remote_call(self.objects.list(prefix), prefix)
        for obj in found:
            await remote_call(self.objects.delete(obj.key), obj.key)
            self._forget(obj.key)
        return len(found)

    def _forget(self, key: str) -> None:
        found = self._cache.pop(key, None)
        if found is not None:
            self._cache_bytes -= found[0]


async def remote_call(call: Awaitable[T], key: str) -> T:
    """An object store call, its store being away as the gateway's retriable StorageUnavailable; an
    object gone (retention deleted it meanwhile) as ObjectNotFound, which readers treat as nothing."""
    try:
        return await call
    except ObjectStoreUnavailable as exc:
        telemetry.TIER.remote_errors += 1
        raise StorageUnavailable(f"tiered storage is unavailable ({key}): {exc}") from exc
