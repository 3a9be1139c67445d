"""The log cleaner: compacted topics keep the latest record of each key (docs/compaction.md).

One pass over a partition, as Kafka's `Cleaner.doClean` does it: an offset map (key digest -> the
latest offset of that key) is built from the dirty section, then the whole log below the end of that
section is copied into the next generation of the cleaned stream without the records the map
supersedes, and that generation is made current in one step. Every write is a script fenced by the
cleaner role's lease epoch; a pass stopped anywhere leaves the log as it was, and the next pass
starts again.

Bounds: the map holds at most `MAX_KEYS` 16-byte digests (Kafka's `SkimpyOffsetMap` holds MD5
digests too); a dirty section with more distinct keys is cleaned in several passes, each up to the
batch where the map filled. At most `SCAN_ENTRIES` batches and one `ADD_BYTES` group of rewritten
ones are in memory at a time. Redis holds the old and the new cleaned generation during a pass.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from gateway import telemetry
from gateway.clock import now_ms
from gateway.domain.log import LogService, effective_config
from gateway.domain.roles import NO_LEASE, Lease
from gateway.errors import NotAllowed, TopicNotFound
from gateway.formats.records import (
    BatchHeader,
    RawRecord,
    delete_horizon,
    parse_header,
    raw_records,
    record_keys,
    rewrite_batch,
)
from gateway.store.compaction import CleanState, StoredBatch
from gateway.store.log import AbortedRange

log = logging.getLogger(__name__)

MAX_KEYS = 200_000  # digests in one pass's offset map: about 25 MB of Python objects at most
ADD_BYTES = 4 * 1024 * 1024  # rewritten batches sent to Redis per round trip
LONG_MAX = 2**63 - 1


def digest(key: bytes) -> bytes:
    """A key as the offset map holds it: 16 bytes whatever its size."""
    return hashlib.blake2b(key, digest_size=16).digest()


@dataclass(frozen=True)
class Policy:
    """The topic configs a pass follows, read when it starts."""

    min_ratio: float
    min_lag_ms: int
    max_lag_ms: int
    delete_retention_ms: int
    retention_ms: int  # -1: none (or the policy has no `delete`)

    @classmethod
    def of(cls, cfg: dict[str, str]) -> Policy:
        deletes = "delete" in cfg["cleanup.policy"].split(",")
        return cls(float(cfg["min.cleanable.dirty.ratio"]), int(cfg["min.compaction.lag.ms"]),
                   int(cfg["max.compaction.lag.ms"]), int(cfg["delete.retention.ms"]),
                   int(cfg["retention.ms"]) if deletes else -1)


@dataclass
class PassResult:
    """What one pass over one partition did."""

    cleaned_to: int = 0  # the new clean boundary
    bytes_read: int = 0
    bytes_removed: int = 0
    batches_dropped: int = 0
    records_dropped: int = 0


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
        offsets, end = await self._offset_map(topic, partition, st, policy, now, aborted)
        gen = st.generation + 1
        await self.store.begin(topic, partition, lease.epoch, st.generation)
        await self._reached("begun")
        res = PassResult(cleaned_to=end)
        start, pending, pending_bytes, size, horizon = st.log_start, list[StoredBatch](), 0, 0, -1
        cutoff = now - policy.retention_ms if policy.retention_ms >= 0 else -1
        expiring = cutoff >= 0  # retention drops a prefix: only while every batch so far went
        async for b in self._below(topic, partition, st, end):
            res.bytes_read += len(b.batch)
            if b.next_offset <= start or (expiring and 0 <= b.max_ts < cutoff):
                start = max(start, b.next_offset)
                res.bytes_removed += len(b.batch)
                res.batches_dropped += 1
                continue
            expiring = False
            kept, tombstones = self._clean_batch(b, offsets, aborted, policy, now, res)
            if kept is None:
                continue
            size += len(kept.batch)
            if tombstones >= 0:
                horizon = tombstones if horizon < 0 else min(horizon, tombstones)
            pending.append(kept)
            pending_bytes += len(kept.batch)
            if pending_bytes >= ADD_BYTES:
                await self.store.add(topic, partition, lease.epoch, gen, pending)
                pending, pending_bytes = [], 0
                await self._reached("added")
        await self.store.add(topic, partition, lease.epoch, gen, pending)
        await self._reached("switching")
        await self.store.switch(topic, partition, lease.epoch, gen, boundary=end, start=start,
                                reclaimed=res.bytes_removed, now=now, size=size, horizon=horizon)
        self.passes += 1
        telemetry.cleaned(topic, res.bytes_read, res.bytes_removed)
        log.info("cleaned %s-%d below %d: %d bytes read, %d removed", topic, partition, end, res.bytes_read,
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

    async def _offset_map(self, topic: str, partition: int, st: CleanState, policy: Policy, now: int,
                          aborted: list[AbortedRange]) -> tuple[dict[bytes, int], int]:
        """The latest offset of each key in the cleanable dirty section, data of aborted transactions
        left out, and where that section ends (a batch base). At most `max_keys` keys: the section
        ends at the batch where the map filled, and the next pass goes on from there."""
        offsets: dict[bytes, int] = {}
        last = await self.store.edge(topic, partition, last=True)
        if last is None:
            return offsets, st.boundary
        async for b in self.store.scan(topic, partition):
            if not self._cleanable(b, st, policy, now, last.base_offset):
                return offsets, b.base_offset
            h = parse_header(b.batch, verify_crc=False)
            if h.control or _is_aborted(h, b.base_offset, aborted):
                continue
            if offsets and len(offsets) + h.record_count > self.max_keys:
                return offsets, b.base_offset
            for delta, key in record_keys(b.batch)[1]:
                if key is not None:
                    offsets[digest(key)] = b.base_offset + delta
        return offsets, last.base_offset

    async def _below(self, topic: str, partition: int, st: CleanState, end: int) -> AsyncIterator[StoredBatch]:
        """Every batch below `end`: the cleaned stream's, then the main stream's."""
        if st.boundary:
            async for b in self.store.scan(topic, partition, generation=st.generation):
                yield b
        async for b in self.store.scan(topic, partition, end=end):
            yield b

    @staticmethod
    def _clean_batch(b: StoredBatch, offsets: dict[bytes, int], aborted: list[AbortedRange], policy: Policy,
                     now: int, res: PassResult) -> tuple[StoredBatch | None, int]:
        """The batch as the next generation holds it (None: nothing of it stays), and the delete
        horizon of the tombstones it keeps (-1: none). Control batches stay whole: markers are kept."""
        h = parse_header(b.batch, verify_crc=False)
        if h.control:
            return b, -1
        if _is_aborted(h, b.base_offset, aborted):
            res.bytes_removed += len(b.batch)
            res.batches_dropped += 1
            res.records_dropped += h.record_count
            return None, -1
        _, records = raw_records(b.batch)
        horizon = delete_horizon(h)
        expired = 0 <= horizon <= now
        kept: list[RawRecord] = [  # a record without a key goes, as in Kafka's `shouldRetainRecord`
            r for r in records if r.key is not None
            and offsets.get(digest(r.key), -1) <= b.base_offset + r.offset_delta and not (r.tombstone and expired)
        ]
        res.records_dropped += len(records) - len(kept)
        if not kept:
            res.bytes_removed += len(b.batch)
            res.batches_dropped += 1
            return None, -1
        tombstones = any(r.tombstone for r in kept)
        if len(kept) == len(records) and (horizon >= 0 or not tombstones):
            return b, horizon if tombstones else -1
        if tombstones and horizon < 0:
            horizon = now + policy.delete_retention_ms
        batch = rewrite_batch(h, kept, delete_horizon=horizon if tombstones else -1)
        res.bytes_removed += len(b.batch) - len(batch)
        return StoredBatch(b.base_offset, b.span, b.max_ts, batch), horizon if tombstones else -1


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
