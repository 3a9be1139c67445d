"""The group coordinator: the driver of the group protocols over state kept in Redis.

`GroupCoordinator` joins the shared driver (`driver.GroupDriver`: locks, leases, timers, adoption)
with each protocol's driving (`classic_driver`, `consumer_driver`) and the moves between them
(`migration_driver`), and holds what spans protocols:
offsets committed to a group of either type, describing, listing and deleting groups.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.domain.groups.classic import DEAD, EMPTY, GroupDescription, MemberDescription, describe
from gateway.domain.groups.consumer import ConsumerGroupConfig, group_state, validate_offset_fetch
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.migration_driver import MigrationDriver
from gateway.domain.groups.offsets import (
    consumer_subscription,
    encode_consumer_assignment,
    encode_consumer_subscription,
)
from gateway.domain.groups.streams import StreamsGroupConfig
from gateway.domain.groups.streams import group_state as streams_state
from gateway.domain.groups.streams import validate_offset_commit as validate_streams_commit
from gateway.domain.groups.streams_driver import STREAMS, StreamsDriver
from gateway.domain.log import LogService
from gateway.errors import PartitionNotFound, TopicExists, TopicNotFound
from gateway.store import Store
from gateway.store.groups import CommittedOffset, GroupDoc
from gateway.store.streams_groups import InternalTopic

CLASSIC = "classic"
CONSUMER = "consumer"


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC


class GroupCoordinator(MigrationDriver, StreamsDriver):
    """Coordinates the groups of every protocol whose lease this gateway holds (see `GroupDriver`)."""

    # -- offsets --------------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
        *,
        instance_id: str | None = None,
        api_version: int = 9,
    ) -> dict[tuple[str, int], GroupErrorKind | None]:
        """Commit (offset, leader epoch, metadata) per partition; a refusal of the committer raises,
        a bad partition is reported in its own slot. A commit keeps a classic member's session; a
        consumer group's member commits in its current epoch (`generation` is the member epoch)."""
        sg = await self.streams_store.load(group_id)
        if sg is not None:
            return await self._commit_streams(sg, generation, member_id, offsets)
        if await self.consumer_store.load(group_id) is not None:
            return await self._commit_consumer(group_id, generation, member_id, offsets, api_version)
        return await self._commit_classic(group_id, generation, member_id, offsets, instance_id, api_version)

    async def fetch_offsets(
        self, group_id: str, parts: list[tuple[str, int]] | None = None,
        *, member_id: str | None = None, member_epoch: int = -1,
    ) -> dict[tuple[str, int], CommittedOffset | None]:
        """Committed offsets; with `parts`, every asked partition appears (None: nothing committed).
        A member of a consumer group (OffsetFetch v9+) fetches in its current epoch."""
        if member_id is not None or member_epoch >= 0:
            g = await self.consumer_store.load(group_id)
            if g is not None:
                validate_offset_fetch(g, member_id, member_epoch)
            sg = await self.streams_store.load(group_id) if g is None else None
            if sg is not None and member_epoch >= 0:  # Kafka's StreamsGroup.validateOffsetFetch
                validate_streams_commit(sg, member_id or "", member_epoch)
        return await self.offsets.fetch(group_id, parts)

    # -- administration -------------------------------------------------------------------------

    async def describe(self, group_id: str) -> GroupDescription | None:
        """DescribeGroups' view; a consumer group as Kafka's ConsumerGroup.asDescribedGroup shows it
        (protocol type "consumer", the assignor as protocol, the classic encodings of members). A
        streams group is not described: GROUP_ID_NOT_FOUND, as Kafka's getOrMaybeCreateClassicGroup
        refuses it."""
        if await self.streams_store.load(group_id) is not None:
            raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a classic group.")
        cg = await self.describe_consumer(group_id)
        if cg is not None:
            return GroupDescription(group_id, cg.state, CONSUMER, cg.assignor, [
                MemberDescription(
                    m.member_id, m.instance_id, m.client_id, m.client_host,
                    encode_consumer_subscription(list(m.subscribed_topics)), encode_consumer_assignment(m.assignment),
                )
                for m in cg.members
            ])
        g = await self.store.load(group_id)
        return describe(g) if g is not None else None

    async def list_groups(self, states: set[str] | None = None) -> list[GroupListing]:
        """Groups of both types; `states` matches either type's state names, in any case."""
        wanted = {s.lower() for s in states or ()}
        out = []
        topics = await self.topics() if self.topics is not None else {}
        for gid in await self.store.group_ids():
            sg = await self.streams_store.load(gid)
            cg = await self.consumer_store.load(gid) if sg is None else None
            if sg is not None:
                listing = GroupListing(gid, STREAMS, streams_state(sg, topics).value, STREAMS)
            elif cg is not None:
                listing = GroupListing(gid, CONSUMER, group_state(cg).value, CONSUMER)
            else:
                g = await self.store.load(gid)
                if g is None:
                    continue
                listing = GroupListing(gid, g.protocol_type or "", g.state)
            if not wanted or listing.state.lower() in wanted:
                out.append(listing)
        return out

    async def delete_offsets(
        self, group_id: str, parts: list[tuple[str, int]]
    ) -> dict[tuple[str, int], GroupErrorKind | None]:
        """Delete committed offsets (Kafka's OffsetDelete, as its OffsetMetadataManager.deleteOffsets):
        GROUP_ID_NOT_FOUND for no group, NON_EMPTY_GROUP for a group of another protocol with
        members; per partition GROUP_SUBSCRIBED_TO_TOPIC when a member of the consumer group
        subscribes to its topic, else deleted (None, whether or not an offset was there)."""
        rt = self._rt(group_id)
        async with rt.lock:
            await self._own(group_id, rt)
            sg = await self.streams_store.load(group_id)
            if sg is not None:
                return await self._delete_streams_offsets(sg, parts)
            cg = await self.consumer_store.load(group_id)
            if cg is not None:
                return await self._delete_consumer_offsets(cg, parts)
            g = await self.store.load(group_id)
            if g is None or g.state == DEAD:
                raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"group {group_id} not found")
            subscribed: set[str] = set()
            if g.state != EMPTY:
                if g.protocol_type != "consumer":
                    raise GroupError(GroupErrorKind.NON_EMPTY_GROUP, f"group {group_id} has members")
                subscribed = _subscribed_topics(g)
            outcome = {p: GroupErrorKind.GROUP_SUBSCRIBED_TO_TOPIC if p[0] in subscribed else None for p in parts}
            if not await self.store.delete_offsets(group_id, g.version, [p for p, e in outcome.items() if e is None]):
                self._reset(group_id, "the group changed in Redis behind this coordinator")
                raise GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, "group changed concurrently; retry")
        return outcome

    async def delete(self, group_id: str) -> None:
        """Delete an empty group and its offsets (Kafka's DeleteGroups)."""
        rt = self._rt(group_id)
        async with rt.lock:
            await self._own(group_id, rt)
            code = await self.streams_store.delete(group_id)
            if code != GroupErrorKind.GROUP_ID_NOT_FOUND:
                if code:
                    raise GroupError(GroupErrorKind(code))
                rt.streams.reset()
                return
            code = await self.consumer_store.delete(group_id, offsets=True)
            if code != GroupErrorKind.GROUP_ID_NOT_FOUND:
                if code:
                    raise GroupError(GroupErrorKind(code))
                rt.consumer.reset()
                await self.store.delete(group_id)  # the classic meta a commit from outside may have left
                return
            code = await self.store.delete(group_id)
            if code:
                raise GroupError(GroupErrorKind(code))
            rt.group.deleted()


def _subscribed_topics(g: GroupDoc) -> set[str]:
    """The topics the members of a consumer group subscribe to in its protocol (none while no
    protocol is chosen or a subscription does not parse, as Kafka's ClassicGroup.computeSubscribedTopics)."""
    if g.protocol is None:
        return set()
    out: set[str] = set()
    for m in g.members.values():
        topics = consumer_subscription(m.metadata(g.protocol))
        if topics is None:
            return set()
        out |= topics
    return out


# -- one coordinator per Services ---------------------------------------------------------------


def open_coordinator(
    store: Store, log_service: LogService | None = None, *, node_id: int = 0,
    prefers: Callable[[str], bool] = lambda group_id: True, consumer_config: ConsumerGroupConfig | None = None,
    initial_rebalance_delay_ms: int = 0, streams_config: StreamsGroupConfig | None = None,
) -> GroupCoordinator:
    """A coordinator over the gateway's store; given the log service, commits to partitions that do
    not exist are refused, as Kafka does. `prefers`: see `GroupCoordinator.prefers`."""
    partitions = topics = None
    if log_service is not None:

        async def partitions(topic: str) -> int:
            try:
                return (await log_service.topic(topic, create=False)).partitions
            except (TopicNotFound, PartitionNotFound):
                return 0

        async def topics() -> Mapping[str, int]:
            """Topics by name as the consumer protocol knows them: those with an id."""
            return {t.name: t.partitions for t in await log_service.list_topics() if t.topic_id}

    coordinator = GroupCoordinator(
        store.groups, partitions=partitions, node_id=node_id, prefers=prefers,
        consumer_store=store.consumer_groups, consumer_config=consumer_config,
        initial_rebalance_delay_ms=initial_rebalance_delay_ms, topics=topics, streams_config=streams_config,
    )
    if log_service is not None:

        async def create_topics(wanted: list[InternalTopic]) -> None:
            """The internal topics a streams topology needs, with the configs it gives them; one
            created meanwhile by another member's heartbeat is left as it is."""
            for t in wanted:
                with contextlib.suppress(TopicExists):
                    await log_service.create_topic(t.name, t.partitions, dict(t.configs))

        coordinator.create_topics = create_topics
    return coordinator
