"""The tiering role: copy closed ranges of tiered partitions to the object store, then trim them
from Redis once beyond local retention (KIP-405's RLMCopyTask and local log retention).

One pass per interval over every topic with `remote.storage.enable`, under the role's lease, as the
log cleaner is run. Per partition:

1. From the end of what is listed (`te`, else the log start) take whole stored batches, below the
   last stable offset (Kafka copies only segments below it, so an open transaction's batches never
   reach a segment before their fate is known), as many as fit in `segment.bytes`. The range is
   closed, and copied, when the next batch would not fit or its first batch is older than
   `segment.ms` (Kafka's segment roll); and once KIP-1241's copy lag allows (`copy_due`).
2. Write its data and index objects (`gateway.formats.segment`; the data object straight from the
   batches' buffers, in the store's thread), then list it in the manifest
   (`tier-add-2`, one script fenced by the lease's epoch). A stop before the listing leaves
   orphans, never a half-listed segment; a repeated copy is refused by the script, never listed twice.
3. Trim the stream's listed entries beyond local retention (`tier-trim-3`).

Orphans (objects of segments not in a manifest: an interrupted copy, a topic deleted while the store
was away, a stop between a trim's unlisting and its deletes) are found by listing the store each
time the role is taken and every `SWEEP_SECONDS` after, and deleted. `--debug-tier-stop-at` stops the first pass for good at one of these steps, so a
test can kill the gateway there.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass

from gateway import telemetry
from gateway.clock import now_ms
from gateway.domain.log import LogService, effective_config
from gateway.domain.remote import RemoteLog, remote_call
from gateway.domain.roles import NO_LEASE, Lease
from gateway.domain.topic_configs import local_retention
from gateway.errors import NotAllowed, StorageUnavailable, TopicNotFound
from gateway.formats.segment import build
from gateway.store.log import TopicInfo
from gateway.store.tier import BatchHead, Segment, TierState, TierStore, data_key, index_key, object_owner

log = logging.getLogger(__name__)

STOP_POINTS = ("", "copied", "listed", "trimmed")
# A segment's batches are held in memory, read from Redis, while it is written: copies stay at most
# this big whatever segment.bytes says (Kafka's default is 1 GiB, for files on a disk).
MAX_SEGMENT_BYTES = 32 * 1024 * 1024
COPY_CONCURRENCY = 2  # partitions of a topic copied at once, so an object store's latency overlaps
SWEEP_SECONDS = 600.0  # how often the role's holder looks for orphans again


def copy_due(lag_ms: int, lag_bytes: int, age_ms: int, newer_bytes: int) -> bool:
    """KIP-1241's upload eligibility of a closed range, as Kafka 4.4's RLMCopyTask.isEligibleForUpload
    decides it: at once when either lag is 0; else when a lag that applies (above 0; -1, taken from an
    unlimited local retention, does not) is met: its newest record `age_ms` old (or stamped in the
    future), or `newer_bytes` of the log after it. No lag that applies: never."""
    if lag_ms == 0 or lag_bytes == 0:
        return True
    if lag_ms > 0 and (age_ms < 0 or age_ms >= lag_ms):
        return True
    return lag_bytes > 0 and newer_bytes >= lag_bytes


def _may_roll(first: BatchHead | None, st: TierState, seg_bytes: int, seg_ms: int, now: int) -> bool:
    """Whether the range from `first` can be closed yet, told from its first batch and the meta's
    byte count alone: a pass every interval must not read a growing segment's megabytes from Redis
    only to find it short."""
    if first is None or first.base_offset + first.span > st.last_stable_offset:
        return False
    return first.appended_before < 0 or st.appended_bytes - first.appended_before >= seg_bytes \
        or now - first.max_ts >= seg_ms


@dataclass(frozen=True)
class TierView:
    """A partition's two parts, for the admin API: offsets [log start, local start) are in tiered
    storage, [local start, high watermark) in Redis."""

    local_log_start_offset: int
    highest_tiered_offset: int  # -1: nothing tiered
    remote_segments: int
    remote_bytes: int
    local_bytes: int  # batches' bytes in the stream (Redis's own overhead aside)


async def tier_view(logs: LogService, topic: str, partition: int) -> TierView | None:
    """None when the partition does not exist."""
    store = logs.store.tier
    st = await store.state(topic, partition)
    if st is None:
        return None
    segments = await store.segments(topic, partition)
    head, _ = await store.batches(topic, partition, st.local_start, st.high_watermark, 0)
    local = st.appended_bytes - head[0].appended_before if head else 0
    listed = [s for s in segments if s.next_offset > st.log_start]
    return TierView(st.local_start, st.tiered_end - 1 if listed else -1, len(listed), sum(s.size for s in listed),
                    local)


class TierCopier:
    def __init__(self, logs: LogService, *, stop_at: str = "") -> None:
        assert logs.remote is not None, "tiering needs an object store"
        self.logs = logs
        self.remote: RemoteLog = logs.remote
        self.store: TierStore = logs.store.tier
        self.stop_at = stop_at  # the `debug_tier_stop_at` setting
        self._swept: tuple[Lease, float] | None = None  # the lease under which orphans were last looked for, and when

    async def _reached(self, point: str) -> None:
        if point == self.stop_at:
            log.warning("tiering stopped at %s (debug_tier_stop_at): this pass goes no further", point)
            await asyncio.Event().wait()

    async def tier_pass(self, lease: Lease = NO_LEASE) -> int:
        """One pass over every tiered partition; returns the bytes copied. The object store being
        away ends the pass (the next one tries again); the log goes on in Redis meanwhile."""
        copied = 0
        try:
            now = time.monotonic()
            if self._swept is None or self._swept[0] is not lease or now - self._swept[1] >= SWEEP_SECONDS:
                await self.sweep_orphans()
                self._swept = (lease, now)
            cluster = await self.logs.cluster_config(fresh=True)
            for info in await self.logs.list_topics():
                cfg = effective_config(info, cluster)
                if cfg["remote.storage.enable"] != "true":
                    if cfg["remote.log.delete.on.disable"] == "true":
                        await self.drop_remote(info, lease)
                    continue
                lag = 0
                for first in range(0, info.partitions, COPY_CONCURRENCY):
                    if not lease.held():
                        return copied
                    parts = range(first, min(first + COPY_CONCURRENCY, info.partitions))
                    results = await asyncio.gather(*(self.tier_partition(info, p, cfg, lease) for p in parts),
                                                   return_exceptions=True)
                    failed = [r for r in results if isinstance(r, BaseException)]
                    for done in results:
                        if not isinstance(done, BaseException):
                            copied += done[0]
                            lag += done[1]
                    if any(isinstance(r, NotAllowed) for r in failed):
                        log.warning("tiering: %s was tiered under a newer lease; this pass stops", info.name)
                        return copied
                    if any(isinstance(r, TopicNotFound) for r in failed):
                        break
                    if failed:
                        raise failed[0]
                telemetry.TIER.copy_lag_bytes[info.name] = lag
        except StorageUnavailable as exc:
            log.warning("tiering pass stopped: %s", exc)
        return copied

    async def tier_partition(self, info: TopicInfo, partition: int, cfg: dict[str, str],
                             lease: Lease = NO_LEASE) -> tuple[int, int]:
        """Copy what is due of one partition, then trim it locally: (bytes copied, bytes of the log
        not copied yet)."""
        topic = info.name
        copied = 0
        seg_bytes, seg_ms = min(int(cfg["segment.bytes"]), MAX_SEGMENT_BYTES), int(cfg["segment.ms"])
        local_ms, local_bytes = local_retention(cfg)
        lag_ms, lag_bytes = int(cfg["remote.copy.lag.ms"]), int(cfg["remote.copy.lag.bytes"])
        lag_ms = local_ms if lag_ms == -1 else lag_ms
        lag_bytes = local_bytes if lag_bytes == -1 else lag_bytes
        st: TierState | None = None  # the partition's state and its first batch not copied, as last read
        first: BatchHead | None = None
        while cfg["remote.log.copy.disable"] != "true" and lease.held():
            st = await self.store.state(topic, partition)
            if st is None:
                raise TopicNotFound(f"{topic}-{partition} does not exist")
            start = max(st.tiered_end, st.log_start)
            now = now_ms()
            first = await self.store.head(topic, partition, start)
            if not _may_roll(first, st, seg_bytes, seg_ms, now):
                break
            batches, full = await self.store.batches(topic, partition, start, st.last_stable_offset, seg_bytes,
                                                     holding=first)
            if not batches:
                break
            size = sum(b.size for b in batches)
            last = batches[-1]
            after = st.appended_bytes - (last.appended_before + last.size)
            rolled = full or size >= seg_bytes or now - batches[0].max_ts >= seg_ms
            if not rolled or not copy_due(lag_ms, lag_bytes, now - last.max_ts, after):
                break
            seg = Segment(batches[0].base_offset, last.next_offset, last.max_ts, batches[0].appended_before, size,
                          uuid.uuid4().hex)
            aborted = await self.store.aborted(topic, partition, seg.base_offset, seg.next_offset)
            data, index = build([(b.base_offset, b.span, b.max_ts, b.batch or b"") for b in batches],
                                [(a.producer_id, a.first_offset, a.marker_offset) for a in aborted])
            dkey, ikey = data_key(topic, info.topic_id, partition, seg), index_key(topic, info.topic_id, partition, seg)
            await asyncio.gather(remote_call(self.remote.objects.put(dkey, *data), dkey),
                                 remote_call(self.remote.objects.put(ikey, index), ikey))
            await self._reached("copied")
            st = None  # the listing below moves it: the next turn reads it again
            if not await self.store.add(topic, partition, lease.epoch, seg):
                log.warning("tiering: %s-%d from %d was listed already; its copy's objects go", topic, partition,
                            seg.base_offset)
                await self.remote.delete(topic, info.topic_id, partition, [seg.member])
                continue
            telemetry.TIER.bytes_copied += size
            telemetry.TIER.segments_copied += 1
            copied += size
            await self._reached("listed")
        if st is None:  # copying is off, or the lease went: not read since the last change
            st = await self.store.state(topic, partition)
            first = await self.store.head(topic, partition, max(st.tiered_end, st.log_start)) if st else None
        if st is not None and st.local_start < st.tiered_end:  # else no listed entry is left in the stream
            await self.store.trim_local(topic, partition, lease.epoch, now_ms(), local_ms, local_bytes)
        await self._reached("trimmed")
        # from the first batch not copied on (as the loop's last turn read it: a listing goes round again)
        behind = st.appended_bytes - first.appended_before if st is not None and first is not None else 0
        return copied, behind

    async def drop_remote(self, info: TopicInfo, lease: Lease = NO_LEASE) -> None:
        """Delete a topic's tiered data once remote storage is turned off with
        remote.log.delete.on.disable: segments unlisted first, then their objects."""
        for p in range(info.partitions):
            if not lease.held():
                return
            if await self.store.segments(info.name, p):
                members = await self.store.drop_all(info.name, p, lease.epoch)
                await self.remote.delete(info.name, info.topic_id, p, members)

    async def sweep_orphans(self) -> int:
        """Delete every object no manifest lists; returns how many went."""
        objects = await remote_call(self.remote.objects.list(""), "the object store's listing")
        if not objects:
            return 0
        topics = {(t.name, t.topic_id): t for t in await self.logs.list_topics()}
        listed: dict[tuple[str, int], set[str]] = {}
        gone = 0
        for obj in objects:
            owner = object_owner(obj.key)
            if owner is None:
                continue
            topic, topic_id, partition, seg_id = owner
            if (topic, topic_id) in topics:
                if (topic, partition) not in listed:
                    listed[(topic, partition)] = {s.segment_id for s in await self.store.segments(topic, partition)}
                if seg_id in listed[(topic, partition)]:
                    continue
            await remote_call(self.remote.objects.delete(obj.key), obj.key)
            gone += 1
        if gone:
            log.info("tiering: %d orphaned objects deleted", gone)
        return gone
