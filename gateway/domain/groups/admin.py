"""What an operator sees of a group of either protocol: its type, state and epochs, its members
with their subscriptions and partitions, and per committed partition the offset and the lag.

Read-only and built from what the coordinator and the store already answer (ConsumerGroupDescribe's
view of a consumer group; the stored classic group with its members' ConsumerProtocol subscription
and assignment decoded), so the admin API, the CLI and the metrics show the state Redis holds,
whichever gateway coordinates the group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.domain.groups.classic import COMPLETING_REBALANCE, STABLE
from gateway.domain.groups.coordinator import CLASSIC, CONSUMER, GroupCoordinator
from gateway.domain.groups.offsets import consumer_assignment, consumer_subscription
from gateway.domain.groups.streams import TasksTuple
from gateway.domain.groups.streams_driver import STREAMS
from gateway.domain.log import LogService
from gateway.store.groups import CommittedOffset

Assigned = dict[str, list[int]]
DESCRIBED_AT_ONCE = 16


@dataclass(frozen=True)
class MemberView:
    """One member. `member_epoch` and `target` belong to the consumer protocol (None for a classic
    member, whose partitions are those of the group's generation)."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    member_epoch: int | None
    subscribed_topics: list[str]
    subscribed_regex: str | None
    assigned: Assigned
    target: Assigned | None = None


@dataclass(frozen=True)
class OffsetView:
    """A committed offset; `lag` is Kafka's consumer lag, the high watermark less the committed
    offset (None when the partition no longer exists)."""

    topic: str
    partition: int
    committed: int
    high_watermark: int | None
    lag: int | None
    metadata: str = ""


@dataclass(frozen=True)
class GroupView:
    """A group. `group_epoch` is a consumer group's epoch or a classic group's generation;
    `assignment_epoch` exists for consumer groups only; `assignor` is the server-side assignor of a
    consumer group, the protocol the members agreed on (e.g. range) of a classic one."""

    group_id: str
    group_type: str
    protocol_type: str
    state: str
    group_epoch: int
    assignment_epoch: int | None
    assignor: str | None
    members: list[MemberView] = field(default_factory=list)
    offsets: list[OffsetView] = field(default_factory=list)

    def lag_by_topic(self) -> dict[str, int]:
        """The lag summed over each topic's committed partitions that still exist."""
        out: dict[str, int] = {}
        for o in self.offsets:
            if o.lag is not None:
                out[o.topic] = out.get(o.topic, 0) + o.lag
        return out


def _assigned(partitions: dict[str, frozenset[int]] | set[tuple[str, int]] | None) -> Assigned:
    out: dict[str, set[int]] = {}
    if isinstance(partitions, dict):
        for t, ps in partitions.items():
            out.setdefault(t, set()).update(ps)
    else:
        for t, p in partitions or ():
            out.setdefault(t, set()).add(p)
    return {t: sorted(ps) for t, ps in sorted(out.items()) if ps}


class GroupAdmin:
    """Views of the groups stored on this Redis, with their lag read from the log."""

    def __init__(self, groups: GroupCoordinator, log: LogService) -> None:
        self.groups = groups
        self.log = log

    async def all(self) -> list[GroupView]:
        """Every group, by id (a classic group Kafka would list as Dead is left out). The topics are
        read once for all, and a few groups described at a time: one by one, with the topics read
        for each, a gateway of 1,000 topics and 100 groups took seconds (`gateway bench --console`)."""
        listed = await self.groups.list_groups()
        topics = await self.groups.topics() if self.groups.topics is not None else {}
        gate = asyncio.Semaphore(DESCRIBED_AT_ONCE)

        async def one(group_id: str) -> GroupView | None:
            async with gate:
                return await self.describe(group_id, topics)

        views = await asyncio.gather(*(one(g.group_id) for g in listed))
        return [v for v in views if v is not None]

    async def describe(self, group_id: str, topics: Mapping[str, int] | None = None) -> GroupView | None:
        """The group of this id, of either type; None when there is none. `topics` (name ->
        partitions) saves reading them, where a streams group's state needs them."""
        offsets = await self._offsets(group_id)
        cg = await self.groups.describe_consumer(group_id)
        if cg is not None:
            return GroupView(
                group_id, CONSUMER, CONSUMER, cg.state, cg.group_epoch, cg.assignment_epoch, cg.assignor,
                [MemberView(m.member_id, m.instance_id, m.client_id, m.client_host, m.member_epoch,
                            sorted(m.subscribed_topics), m.subscribed_regex, _assigned(m.assignment),
                            _assigned(m.target_assignment))
                 for m in cg.members],
                offsets,
            )
        streams = await self._streams(group_id, offsets, topics)
        if streams is not None:
            return streams
        g = await self.groups.store.load(group_id)
        if g is None:
            return None
        # the members' subscriptions and assignments are ConsumerProtocol bytes only for consumers;
        # the assignment is the current generation's once the leader has sent it
        is_consumer = g.protocol_type == "consumer"
        assigned = g.state == STABLE and is_consumer
        members = [
            MemberView(
                m.member_id, m.instance_id, m.client_id, m.client_host, None,
                sorted(consumer_subscription(m.metadata(g.protocol)) or ()) if is_consumer else [], None,
                _assigned(consumer_assignment(m.assignment)) if assigned else {},
            )
            for m in g.members.values()
        ]
        protocol = g.protocol if g.state in (STABLE, COMPLETING_REBALANCE) else None
        return GroupView(group_id, CLASSIC, g.protocol_type or "", g.state, g.generation, None, protocol,
                         members, offsets)

    async def _streams(self, group_id: str, offsets: list[OffsetView],
                       topics: Mapping[str, int] | None) -> GroupView | None:
        """A streams group: its members with the input partitions of their active tasks (a task is
        its subtopology's input topics' partition of its number), the topology's inputs as what
        each subscribes to."""
        if topics is None:
            topics = await self.groups.topics() if self.groups.topics is not None else {}
        found = await self.groups.describe_streams(group_id, topics)
        if found is None:
            return None
        g, state = found
        inputs = {s.subtopology_id: (*s.source_topics, *(r.name for r in s.repartition_sources))
                  for s in (g.topology.subtopologies if g.topology else ())}

        def partitions(tasks: TasksTuple) -> Assigned:
            return _assigned({(t, p) for sid, ps in tasks.active.items() for t in inputs.get(sid, ()) for p in ps})

        subscribed = sorted({t for ts in inputs.values() for t in ts})
        return GroupView(
            group_id, STREAMS, STREAMS, state, g.group_epoch, g.assignment_epoch, "sticky",
            [MemberView(m.member_id, m.instance_id, m.client_id, m.client_host, m.member_epoch, subscribed, None,
                        partitions(m.assigned), partitions(g.target.get(m.member_id, TasksTuple())))
             for m in g.members.values()],
            offsets,
        )

    async def _offsets(self, group_id: str) -> list[OffsetView]:
        committed = sorted(((tp, c) for tp, c in (await self.groups.fetch_offsets(group_id)).items()
                            if c is not None and c.offset >= 0), key=lambda item: item[0])
        bounds = await self.log.bounds_many([tp for tp, _ in committed]) if committed else []
        return [offset_view(tp, c, b) for (tp, c), b in zip(committed, bounds, strict=True)]


def offset_view(tp: tuple[str, int], c: CommittedOffset, bounds: tuple[int, int] | None) -> OffsetView:
    """A committed offset beside its partition's (log start, high watermark), None for a partition
    that no longer exists: Kafka's lag, the high watermark less the committed offset."""
    hw = None if bounds is None else bounds[1]
    return OffsetView(tp[0], tp[1], c.offset, hw, None if hw is None else max(0, hw - c.offset), c.metadata)
