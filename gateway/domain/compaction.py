"""The log cleaner: compacted topics keep the latest record of each key (docs/compaction.md).

One pass over a partition, as Kafka's `Cleaner.doClean` does it: an offset map (key digest -> the
latest offset of that key) is built from the dirty section in one walk, then the whole log below
the end of that section is copied into the next generation of the cleaned stream without the
records that go, and that generation is made current in one step. The map's offsets are the
section's survivors, so the copy hashes no key of the section and reads only its batches that keep
something. Every write is a script fenced by the cleaner role's lease epoch; a pass stopped
anywhere leaves the log as it was, and the next pass starts again.

Bounds: the map holds at most `MAX_KEYS` 16-byte digests (Kafka's `SkimpyOffsetMap` holds MD5
digests too) and the section's index at most `MAX_BATCHES` batches; a dirty section with more is
cleaned in several passes, each up to the batch where one filled. At most two XRANGE replies of
`SCAN_ENTRIES` batches, `SCAN_ENTRIES` read batches and one `ADD_BYTES` group of rewritten ones
are in memory at a time. Redis holds the old and the new cleaned generation during a pass.
"""

from __future__ import annotations

import asyncio
import logging
import os
from array import array
from bisect import bisect_left
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import cast

from gateway import telemetry
from gateway.clock import now_ms
from gateway.domain.log import LogService, effective_config
from gateway.domain.roles import NO_LEASE, Lease
from gateway.errors import NotAllowed, TopicNotFound
from gateway.formats.compaction import ACCELERATED, Keep, OffsetMap, OffsetMapLike
from gateway.formats.records import (
    BatchHeader,
    filter_batch,
    join_batches,
    joinable,
    parse_header,
    record_body,
)
from gateway.store.compaction import SCAN_ENTRIES, CleanState, StoredBatch
from gateway.store.log import AbortedRange

log = logging.getLogger(__name__)

# Keys in one pass's offset map: 32 MB in C (24-byte slots, at most 3/4 full), about 25 MB of Python
# objects without it.
MAX_KEYS = 1_000_000 if ACCELERATED else 200_000
MAX_BATCHES = 250_000  # batches in one pass's section: its index is 48 bytes a batch, 12 MB
ADD_BYTES = 4 * 1024 * 1024  # rewritten batches sent to Redis per round trip
JOIN_BYTES = 256 * 1024  # cleaned batches joined into one make at most this (`Run`)
LONG_MAX = 2**63 - 1


# What the rebuild does with a batch's records: `Keep` of gateway/formats/compaction.py (a slice of
# the map's sorted offsets, or the map), or one of these.
_WHOLE: Keep = object()  # a control batch: kept as it is
_DROP: Keep = object()  # an aborted transaction's batch, or none of its records stays
_DATA, _CONTROL, _ABORTED = 0, 1, 2  # a section batch's kind in its index
_FIELDS = 6  # index fields a batch: base offset, span, max timestamp, size, record count, kind


@dataclass
class Section:
    """What the walk over the dirty section leaves the rebuild."""

    offsets: OffsetMapLike  # key digest -> latest offset in the section
    index: array[int]  # the section's batches, `_FIELDS` a batch
    end: int  # the base offset of the first batch after it
    aborted: list[AbortedRange]
    survivors: bytes = b""  # the map's offsets, sorted: the section's records that stay


@dataclass(frozen=True)
class Policy:
    """The topic configs a pass follows, read when it starts."""

    min_ratio: float
    min_lag_ms: int
    max_lag_ms: int
    delete_retention_ms: int
    retention_ms: int  # -1: none (or the policy has no `delete`)
    # The largest batch joined batches make (`Run`): at most max.message.bytes, and 0 (none joined)
    # under `compact,delete`, whose retention removes whole batches by their time.
    join_bytes: int = JOIN_BYTES

    @classmethod
    def of(cls, cfg: dict[str, str]) -> Policy:
        deletes = "delete" in cfg["cleanup.policy"].split(",")
        return cls(float(cfg["min.cleanable.dirty.ratio"]), int(cfg["min.compaction.lag.ms"]),
                   int(cfg["max.compaction.lag.ms"]), int(cfg["delete.retention.ms"]),
                   int(cfg["retention.ms"]) if deletes else -1,
                   0 if deletes else min(JOIN_BYTES, int(cfg["max.message.bytes"])))


@dataclass
class PassResult:
    """What one pass over one partition did."""

    cleaned_to: int = 0  # the new clean boundary
    bytes_read: int = 0
    bytes_removed: int = 0
    batches_dropped: int = 0
    records_dropped: int = 0


class Run:
    """Cleaned batches that one batch may hold (`join_batches`): joinable ones (no producer state,
    no tombstones kept), of one codec, each starting where the last ends, at most `limit` bytes.
    Kafka's cleaner keeps every batch it retains, each with its header, for the producer state
    they carry; batches without any (no producer id) are joined here, so a cleaned log of a few
    survivors a batch is not mostly headers and stream entries. Offsets, timestamps and what every
    reader sees are unchanged."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.batches: list[StoredBatch] = []
        self.size = 0
        self.codec = -1

    def push(self, b: StoredBatch, res: PassResult) -> list[StoredBatch]:
        """Take a cleaned batch; returns those ready to write, in offset order."""
        assert b.batch is not None
        h = parse_header(b.batch, verify_crc=False)
        if not joinable(h) or b.size >= self.limit:
            return [*self.flush(res), b]
        if not (self.batches and self.batches[-1].next_offset == b.base_offset and h.compression == self.codec
                and self.size + b.size <= self.limit):
            out = self.flush(res)
            self.codec = h.compression
        else:
            out = []
        self.batches.append(b)
        self.size += b.size
        return out

    def flush(self, res: PassResult) -> list[StoredBatch]:
        """The batches held, as one."""
        batches, self.batches, self.size = self.batches, [], 0
        if len(batches) < 2:
            return batches
        joined = join_batches([(b.base_offset, cast(bytes, b.batch)) for b in batches])
        res.bytes_removed += sum(b.size for b in batches) - len(joined)
        first, last = batches[0], batches[-1]
        return [StoredBatch(first.base_offset, last.next_offset - first.base_offset, last.max_ts, joined)]


def _is_aborted(h: BatchHeader, base: int, aborted: list[AbortedRange]) -> bool:
    return h.transactional and any(
        a.producer_id == h.producer_id and a.first_offset <= base < a.marker_offset for a in aborted)


class LogCleaner:
    """Cleans every partition of the compacted topics, one pass per `clean_pass`."""

    def __init__(self, logs: LogService, *, max_keys: int = MAX_KEYS, stop_at: str = "") -> None:
        self.logs = logs
        self.store = logs.store.cleaner
        self.max_keys = max_keys
        self.stop_at = stop_at  # the `debug_cleaner_stop_at` setting
        self.passes = 0  # this gateway's

    async def _reached(self, point: str) -> None:
        """The `debug_cleaner_stop_at` setting: at its point, the pass stops and waits for good, so a
        test can kill the gateway at a known step of a pass."""
        if point == self.stop_at:
            log.warning("log cleaner stopped at %s (debug_cleaner_stop_at): this pass goes no further", point)
            await asyncio.Event().wait()

    async def clean_pass(self, lease: Lease = NO_LEASE) -> int:
        """One pass over every partition of every compacted topic; returns the bytes removed."""
        removed = 0
        cluster = await self.logs.cluster_config(fresh=True)
        for info in await self.logs.list_topics():
            cfg = effective_config(info, cluster)
            if "compact" not in cfg["cleanup.policy"].split(","):
                continue
            for p in range(info.partitions):
                if not lease.held():
                    return removed
                try:
                    done = await self.clean(info.name, p, Policy.of(cfg), lease)
                except TopicNotFound:
                    break  # deleted meanwhile
                except NotAllowed:  # a newer holder of the role has touched the partition
                    log.warning("log cleaner: %s-%d was cleaned under a newer lease; this pass stops", info.name, p)
                    return removed
                if done is not None:
                    removed += done.bytes_removed
        return removed

    async def clean(self, topic: str, partition: int, policy: Policy, lease: Lease = NO_LEASE) -> PassResult | None:
        """Clean the partition if it is due; None when it was not."""
        st = await self.store.state(topic, partition)
        if st is None:
            return None
        now = now_ms()
        if not await self._due(topic, partition, st, policy, now):
            return None
        aborted = await self.store.aborted(topic, partition)
        section = await self._section(topic, partition, st, policy, now, aborted)
        gen = st.generation + 1
        await self.store.begin(topic, partition, lease.epoch, st.generation)
        await self._reached("begun")
        res = PassResult(cleaned_to=section.end)
        start, pending, pending_bytes, size, horizon = st.log_start, list[StoredBatch](), 0, 0, -1
        run = Run(policy.join_bytes)
        cutoff = now - policy.retention_ms if policy.retention_ms >= 0 else -1
        expiring = cutoff >= 0  # retention drops a prefix: only while every batch so far went
        async for b, keep in self._below(topic, partition, st, section):
            res.bytes_read += b.size
            if b.next_offset <= start or (expiring and 0 <= b.max_ts < cutoff):
                start = max(start, b.next_offset)
                res.bytes_removed += b.size
                res.batches_dropped += 1
                continue
            expiring = False
            if keep is _DROP or b.batch is None:  # aborted, or none of its records stays (not even read)
                res.bytes_removed += b.size
                res.batches_dropped += 1
                res.records_dropped += b.records
                continue
            kept, tombstones = self._clean_batch(b, keep, policy, now, res)
            if kept is None:
                continue
            if tombstones >= 0:
                horizon = tombstones if horizon < 0 else min(horizon, tombstones)
            for out in run.push(kept, res):
                size += out.size
                pending.append(out)
                pending_bytes += out.size
            if pending_bytes >= ADD_BYTES:
                await self.store.add(topic, partition, lease.epoch, gen, pending)
                pending, pending_bytes = [], 0
                await self._reached("added")
        for out in run.flush(res):
            size += out.size
            pending.append(out)
        await self.store.add(topic, partition, lease.epoch, gen, pending)
        await self._reached("switching")
        await self.store.switch(topic, partition, lease.epoch, gen, boundary=section.end, start=start,
                                reclaimed=res.bytes_removed, now=now, size=size, horizon=horizon)
        self.passes += 1
        telemetry.cleaned(topic, res.bytes_read, res.bytes_removed)
        log.info("cleaned %s-%d below %d: %d bytes read, %d removed", topic, partition, section.end, res.bytes_read,
                 res.bytes_removed)
        return res

    def _cleanable(self, b: StoredBatch, st: CleanState, policy: Policy, now: int, last: int) -> bool:
        """Whether a dirty batch may be cleaned: never the last batch (the active head), nothing at or
        above the last stable offset, nothing younger than min.compaction.lag.ms."""
        return b.base_offset < last and b.next_offset <= st.last_stable_offset and b.max_ts <= now - policy.min_lag_ms

    async def _due(self, topic: str, partition: int, st: CleanState, policy: Policy, now: int) -> bool:
        """Kafka's conditions: the cleanable dirty ratio reached min.cleanable.dirty.ratio, or a dirty
        record waited max.compaction.lag.ms; or a cleaned batch's delete horizon passed (KIP-534); or
        retention has something to remove from the cleaned part (the retention role's trim leaves the
        cleaned part to the cleaner unless all of it goes)."""
        if 0 <= st.horizon <= now:
            return True
        if st.boundary and policy.retention_ms >= 0:
            first = await self.store.edge(topic, partition, generation=st.generation)
            if first is not None and 0 <= first.max_ts < now - policy.retention_ms:
                return True
        dirty = await self.store.edge(topic, partition)
        last = await self.store.edge(topic, partition, last=True)
        if dirty is None or last is None or not self._cleanable(dirty, st, policy, now, last.base_offset):
            return False
        if policy.max_lag_ms < LONG_MAX and dirty.max_ts <= now - policy.max_lag_ms:
            return True
        size = st.appended_bytes - dirty.appended_before
        return size > 0 and size >= policy.min_ratio * (size + st.clean_bytes)

    async def _section(self, topic: str, partition: int, st: CleanState, policy: Policy, now: int,
                       aborted: list[AbortedRange]) -> Section:
        """The one walk over the cleanable dirty section: the latest offset of each key in it (data
        of aborted transactions left out), where it ends (a batch base) and what the rebuild needs
        of each of its batches. At most `max_keys` keys and `MAX_BATCHES` batches: the section ends
        at the batch where either filled, and the next pass goes on from there."""
        section = Section(OffsetMap(self.max_keys, os.urandom(16)), array("q"), st.boundary, aborted)
        last = await self.store.edge(topic, partition, last=True)
        if last is None:
            return section
        section.end = last.base_offset
        async with aclosing(self.store.scan(topic, partition)) as batches:
            async for b in batches:
                if not self._cleanable(b, st, policy, now, last.base_offset):
                    section.end = b.base_offset
                    break
                assert b.batch is not None
                h = parse_header(b.batch, verify_crc=False)
                kind = _CONTROL if h.control else _ABORTED if _is_aborted(h, b.base_offset, aborted) else _DATA
                if kind == _DATA and section.offsets and len(section.offsets) + h.record_count > self.max_keys or \
                        len(section.index) >= MAX_BATCHES * _FIELDS:
                    section.end = b.base_offset
                    break
                if kind == _DATA:
                    section.offsets.add(record_body(h, b.batch), h.record_count, b.base_offset)
                section.index.extend((b.base_offset, b.span, b.max_ts, b.size, h.record_count, kind))
        section.survivors = section.offsets.survivors()
        return section

    async def _below(self, topic: str, partition: int, st: CleanState,
                     section: Section) -> AsyncIterator[tuple[StoredBatch, Keep]]:
        """Every batch below the section's end, with what decides which of its records stay: the
        cleaned stream's (read whole; a record stays unless the map holds its key), then the
        section's (a record stays when its offset is one of the map's). A batch of the section
        that keeps nothing (aborted, or none of its offsets in the map) is not read: it comes
        without its bytes."""
        if st.boundary:
            async for b in self.store.scan(topic, partition, generation=st.generation):
                assert b.batch is not None
                h = parse_header(b.batch, verify_crc=False)
                yield b, _WHOLE if h.control else _DROP if _is_aborted(h, b.base_offset, section.aborted) \
                    else section.offsets
        survivors = memoryview(section.survivors).cast("q")
        index = section.index
        group: list[tuple[StoredBatch, Keep]] = []  # up to SCAN_ENTRIES to read, and those between
        runs: list[tuple[int, int]] = []  # of consecutive batches to read
        reads = 0
        for i in range(0, len(index), _FIELDS):
            base, span, max_ts, size, records, kind = index[i:i + _FIELDS]
            lo = bisect_left(survivors, base)
            hi = bisect_left(survivors, base + span, lo)
            keep: Keep = _WHOLE if kind == _CONTROL else section.survivors[lo * 8:hi * 8] \
                if kind == _DATA and hi > lo else _DROP
            group.append((StoredBatch(base, span, max_ts, None, known_size=size, known_records=records), keep))
            if keep is not _DROP:
                reads += 1
                if len(group) > 1 and group[-2][1] is not _DROP:
                    runs[-1] = (runs[-1][0], base)
                else:
                    runs.append((base, base))
            if reads == SCAN_ENTRIES or i + _FIELDS == len(index):
                fetched = await self.store.fetch(topic, partition, runs)
                for b, k in group:
                    yield (b, k) if k is _DROP else (fetched.get(b.base_offset, b), k)
                group, runs, reads = [], [], 0

    @staticmethod
    def _clean_batch(b: StoredBatch, keep: Keep, policy: Policy, now: int,
                     res: PassResult) -> tuple[StoredBatch | None, int]:
        """The batch as the next generation holds it (None: nothing of it stays), and the delete
        horizon of the tombstones it keeps (-1: none). Control batches stay whole: markers are kept."""
        assert b.batch is not None
        if keep is _WHOLE:
            return b, -1
        out = filter_batch(b.batch, b.base_offset, keep, now=now, delete_retention_ms=policy.delete_retention_ms)
        res.records_dropped += b.records - out.records
        if out.batch is None:
            res.bytes_removed += b.size
            res.batches_dropped += 1
            return None, -1
        if out.batch is b.batch:
            return b, out.horizon
        res.bytes_removed += b.size - len(out.batch)
        return StoredBatch(b.base_offset, b.span, b.max_ts, out.batch), out.horizon


@dataclass(frozen=True)
class CleanerView:
    """A compacted partition's cleaner state, as the admin API shows it."""

    clean_boundary: int  # offsets below it have been cleaned
    dirty_ratio: float  # dirty bytes over all bytes, as a pass judges it against min.cleanable.dirty.ratio
    passes: int
    bytes_reclaimed: int
    last_clean_ms: int | None
    tombstone_horizon_ms: int | None  # when the earliest kept tombstones may go


async def cleaner_view(logs: LogService, topic: str, partition: int) -> CleanerView | None:
    """The partition's cleaner state, None when the partition does not exist."""
    store = logs.store.cleaner
    st = await store.state(topic, partition)
    if st is None:
        return None
    first = await store.edge(topic, partition)
    dirty = st.appended_bytes - first.appended_before if first is not None else 0
    ratio = dirty / (dirty + st.clean_bytes) if dirty + st.clean_bytes else 0.0
    return CleanerView(st.boundary, round(ratio, 4), st.passes, st.reclaimed,
                       st.cleaned_at if st.cleaned_at >= 0 else None, st.horizon if st.horizon >= 0 else None)
