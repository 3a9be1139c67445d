"""Consumer groups' lag over time, kept in Redis so that a console page opened later shows the past.

A leased role (one gateway at a time, `gateway.domain.roles`) samples every group every
`--lag-sample-interval` seconds: each partition's lag and their total. For a group that commits
offsets (classic, consumer, streams) as the admin API computes it (`admin.offset_view`: the high
watermark less the committed offset); for a share group as Kafka's DescribeShareGroupOffsets v1
does (the high watermark less the group's start offset). One pass is three round trips however
many groups there are (the committed offsets of all groups, the watermarks of their partitions, one
append script per group), and three more over every partition while share groups exist.

Each group keeps the last day of samples and at most MAX_POINTS of them: a day at the default 15 s
is 5,760 samples, so the age bound governs at the default and the count bound keeps a short interval
from growing Redis's memory (the log's disk); a sample of a group reading 12 partitions is about
100 bytes, some 600 KB a group at the cap.
"""

from __future__ import annotations

from gateway.domain.groups.admin import offset_view
from gateway.domain.groups.coordinator import GroupCoordinator
from gateway.domain.log import LogService
from gateway.store import Store
from gateway.store.lag_history import LagSample

MAX_AGE_MS = 24 * 3600 * 1000
MAX_POINTS = 5760


class LagHistory:
    def __init__(self, groups: GroupCoordinator, log: LogService, store: Store, *, max_age_ms: int = MAX_AGE_MS,
                 max_points: int = MAX_POINTS) -> None:
        self.groups = groups
        self.log = log
        self.store = store.lag_history
        self.share_groups = store.share_groups
        self.subscriptions = store.subscriptions
        self.max_age_ms = max_age_ms
        self.max_points = max_points

    async def sample_pass(self) -> int:
        """One sample of every group with committed offsets; returns how many were kept."""
        ids = await self.groups.store.group_ids()
        committed = await self.groups.store.offsets_of_groups(ids)
        parts = sorted({tp for offsets in committed for tp, c in offsets.items() if c.offset >= 0})
        bounds = dict(zip(parts, await self.log.bounds_many(parts), strict=True)) if parts else {}
        samples = []
        for group_id, offsets in zip(ids, committed, strict=True):
            by_topic: dict[str, list[tuple[int, int]]] = {}
            for tp, c in sorted(offsets.items()):
                lag = offset_view(tp, c, bounds[tp]).lag if c.offset >= 0 else None
                if lag is not None:
                    by_topic.setdefault(tp[0], []).append((tp[1], lag))
            if offsets:
                samples.append(LagSample(group_id, 0, sum(lag for ps in by_topic.values() for _, lag in ps), by_topic))
        samples += await self._share_samples()
        return await self.store.append(samples, self.max_age_ms, self.max_points)

    async def _share_samples(self) -> list[LagSample]:
        """Each share group's lag as DescribeShareGroupOffsets v1 gives it: per partition it has
        read, the high watermark less its start offset. Three more round trips, over every
        partition, and only while share groups exist."""
        share = await self.share_groups.known()
        if not share:
            return []
        parts = [(t.name, p) for t in await self.log.list_topics() for p in range(t.partitions)]
        cursors = await self.subscriptions.positions_of(parts)
        read = [tp for tp in parts if share & set(cursors.get(tp, {}))]
        bounds = dict(zip(read, await self.log.bounds_many(read), strict=True)) if read else {}
        out = []
        for group_id in sorted(share):
            by_topic: dict[str, list[tuple[int, int]]] = {}
            for tp in read:
                start, b = cursors[tp].get(group_id), bounds[tp]
                if start is not None and b is not None:
                    by_topic.setdefault(tp[0], []).append((tp[1], max(0, b[1] - start)))
            out.append(LagSample(group_id, 0, sum(lag for ps in by_topic.values() for _, lag in ps), by_topic,
                                 share=True))
        return out

    async def read(self, group_id: str, since_ms: int = 0) -> list[LagSample]:
        """The group's samples from `since_ms` on, oldest first (none for a group never sampled)."""
        return await self.store.read(group_id, since_ms)
