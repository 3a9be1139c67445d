"""KIP-1071's protocol's driving: StreamsGroupHeartbeat over `StreamsGroup`, and its commits.

A mixin over `driver.GroupDriver`, as `consumer_driver`: load, transition, save, then answer. The
internal topics a heartbeat finds missing are created after the group is saved, as Kafka's
coordinator hands them to its AutoTopicCreationManager once the heartbeat's records are written;
the member learns of them (MISSING_INTERNAL_TOPICS gone, tasks assigned) in a later heartbeat.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial

from gateway.domain.groups.driver import Adoption, GroupDriver, _Runtime
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.streams import (
    HeartbeatRequest,
    HeartbeatResult,
    group_state,
    validate_offset_commit,
)
from gateway.store.streams_groups import InternalTopic, StreamsGroupDoc

log = logging.getLogger(__name__)

STREAMS = "streams"  # ListGroups' group type and protocol type of a streams group


class StreamsDriver(GroupDriver):
    """The streams protocol's requests and timers."""

    # set by `open_coordinator`: creates the internal topics a topology needs (Kafka's coordinator
    # asks its controller); without it they are only reported missing
    create_topics: Callable[[list[InternalTopic]], Awaitable[None]] | None = None

    async def _expire_due(self, group_id: str, rt: _Runtime, now: float) -> bool:
        due = rt.streams.next_deadline()
        ran = due is not None and due <= now
        if ran:
            async with rt.lock:
                await self._own(group_id, rt)
                g = await self.streams_store.load(group_id)
                step = rt.streams.expire(g, self.clock())
                if step.save and step.group is not None:
                    self._refused(group_id, await self.streams_store.save(step.group, self.node_id))
        return await super()._expire_due(group_id, rt, now) or ran

    async def _adoptable(self, group_id: str, rt: _Runtime) -> Adoption | None:
        g = await self.streams_store.load(group_id)
        if g is not None and g.members:
            return partial(rt.streams.arm, g), len(g.members)
        return await super()._adoptable(group_id, rt)

    async def streams_heartbeat(
        self, group_id: str, req: HeartbeatRequest, topics: Mapping[str, int],
        configs: Mapping[str, str] | None = None,
    ) -> HeartbeatResult:
        """Join, heartbeat, reconcile or leave a streams group; `configs` are the group's own
        (`streams.session.timeout.ms`, ...). An id that is a group of another type is refused as
        Kafka's getOrMaybeCreateStreamsGroup refuses it."""
        if not group_id:
            raise GroupError(GroupErrorKind.INVALID_REQUEST, "GroupId can't be empty.")
        rt = self._rt(group_id)
        try:
            async with rt.lock:
                await self._own(group_id, rt)
                g = await self.streams_store.load(group_id)
                if g is None and (await self.consumer_store.load(group_id) is not None
                                  or await self.share_groups.exists(group_id)
                                  or _has_members(await self.store.load(group_id))):
                    raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")
                if g is not None:
                    rt.streams.arm(g, self.clock())
                config = rt.streams.config.overridden(configs or {})
                step = rt.streams.heartbeat(g, self.clock(), req, topics, config)
                if step.save and step.group is not None:
                    self._refused(group_id, await self.streams_store.save(step.group, self.node_id))
        finally:
            self._wake.set()
        if step.reply.create and self.create_topics is not None:
            await self.create_topics(step.reply.create)
        return step.reply

    async def describe_streams(self, group_id: str, topics: Mapping[str, int]) -> tuple[StreamsGroupDoc, str] | None:
        """StreamsGroupDescribe's view (the group and its state), None when the id is not a streams group."""
        g = await self.streams_store.load(group_id)
        return None if g is None else (g, group_state(g, topics).value)

    async def _delete_streams_offsets(
        self, g: StreamsGroupDoc, parts: list[tuple[str, int]]
    ) -> dict[tuple[str, int], GroupErrorKind | None]:
        """OffsetDelete on a streams group: while it has members, the partitions of the topics its
        topology reads stay (Kafka's StreamsGroup.isSubscribedToTopic)."""
        read = {t for s in g.topology.subtopologies
                for t in (*s.source_topics, *(r.name for r in s.repartition_sources))} if g.topology else set()
        return await self._delete_offsets_unless(g.group_id, parts, read if g.members else set())

    async def _commit_streams(
        self, g: StreamsGroupDoc, member_epoch: int, member_id: str,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
    ) -> dict[tuple[str, int], GroupErrorKind | None]:
        """Kafka's OffsetMetadataManager.commitOffset for a streams group."""
        group_id = g.group_id
        outcome, good = await self.offsets.check(group_id, member_epoch, "", offsets)
        rt = self._rt(group_id)
        async with rt.lock:
            await self._own(group_id, rt)
            current = await self.streams_store.load(group_id)
            if current is None:
                raise GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, f"group {group_id} changed type; retry")
            validate_offset_commit(current, member_id, member_epoch)
            if good:
                # the consumer group's commit script compares the version of the group's meta hash
                self._refused(group_id, await self.streams_store.commit(group_id, current.version, self.node_id, good))
        return outcome


def _has_members(classic: object) -> bool:
    return bool(getattr(classic, "members", None))
