"""KIP-848's protocol's driving: ConsumerGroupHeartbeat over `ConsumerGroup`, and its commits.

A mixin over `driver.GroupDriver`: load, transition, save, then answer; nothing waits at a barrier
in this protocol (a member learns its next step from its next heartbeat).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import TypeVar

from gateway.domain.groups.consumer import (
    ConsumerGroup,
    ConsumerGroupDescription,
    HeartbeatRequest,
    HeartbeatResult,
    Step,
    validate_offset_commit,
)
from gateway.domain.groups.consumer import describe as describe_consumer
from gateway.domain.groups.driver import Adoption, GroupDriver, _Runtime
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.store.consumer_groups import ConsumerGroupDoc
from gateway.store.groups import GroupDoc

R = TypeVar("R")


class ConsumerDriver(GroupDriver):
    """The consumer protocol's requests and timers."""

    async def _expire_due(self, group_id: str, rt: _Runtime, now: float) -> bool:
        due = rt.consumer.next_deadline()
        ran = due is not None and due <= now
        if ran:
            await self._run_consumer(group_id, lambda g, group, now: group.expire(g, now))
        return await super()._expire_due(group_id, rt, now) or ran

    async def _adoptable(self, group_id: str, rt: _Runtime) -> Adoption | None:
        g = await self.consumer_store.load(group_id)
        if g is not None and g.members:
            return partial(rt.consumer.arm, g), len(g.members)
        return await super()._adoptable(group_id, rt)

    async def _run_consumer(
        self, group_id: str, event: Callable[[ConsumerGroupDoc | None, ConsumerGroup, float], Step[R]],
        *, joining: bool = False,
    ) -> R:
        """Load, transition, save, then answer: the consumer protocol's `_run` (nothing waits). A
        heartbeat (`joining`) is refused while a classic group of the id has members, or when the id
        is a share group's: Kafka's getOrMaybeCreateConsumerGroup (without online upgrade) answers
        GROUP_ID_NOT_FOUND, "Group <id> is not a consumer group."."""
        rt = self._rt(group_id)
        try:
            async with rt.lock:
                await self._own(group_id, rt)
                g = await self.consumer_store.load(group_id)
                replacing = None
                if joining and g is None and await self.share_groups.exists(group_id):
                    raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
                if joining:
                    classic = await self.store.load(group_id)
                    if classic is not None and classic.members:
                        g, replacing = self._upgrade(group_id, rt, classic), classic.version
                if g is not None:
                    rt.consumer.arm(g, self.clock())
                return await self._step_consumer(group_id, rt, g, event, replacing)
        finally:
            self._wake.set()

    async def _step_consumer(
        self, group_id: str, rt: _Runtime, g: ConsumerGroupDoc | None,
        event: Callable[[ConsumerGroupDoc | None, ConsumerGroup, float], Step[R]], replacing: int | None = None,
    ) -> R:
        """Apply the event to the loaded group and save it; under the group's lock."""
        mixed = g is not None and any(not m.classic for m in g.members.values())
        step = event(g, rt.consumer, self.clock())
        if step.save and step.group is not None:
            await self._save_consumer(group_id, rt, step.group, replacing=replacing, had_consumer_members=mixed)
        return step.reply

    def _upgrade(self, group_id: str, rt: _Runtime, classic: GroupDoc) -> ConsumerGroupDoc:
        """The consumer group a classic group with members becomes when a member joins with
        ConsumerGroupHeartbeat; without online migration, Kafka's getOrMaybeCreateConsumerGroup
        answers GROUP_ID_NOT_FOUND."""
        raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")

    async def _save_consumer(
        self, group_id: str, rt: _Runtime, g: ConsumerGroupDoc, *, replacing: int | None, had_consumer_members: bool
    ) -> None:
        """Save the group (`replacing`: the version of the classic group it converts, with online
        migration; `had_consumer_members`: whether members of this protocol were there before)."""
        self._refused(group_id, await self.consumer_store.save(g, self.node_id))

    # -- ConsumerGroupHeartbeat, ConsumerGroupDescribe --------------------------------------------

    async def consumer_heartbeat(
        self, group_id: str, req: HeartbeatRequest, topics: Mapping[str, int], *, api_version: int = 1
    ) -> HeartbeatResult:
        """Join, heartbeat, reconcile or leave a consumer group; `topics` is every topic with its
        partition count, against which subscriptions are resolved."""
        if not group_id:
            raise GroupError(GroupErrorKind.INVALID_REQUEST, "GroupId can't be empty.")
        return await self._run_consumer(
            group_id, lambda g, group, now: group.heartbeat(g, now, req, topics, api_version=api_version),
            joining=True,
        )

    async def describe_consumer(self, group_id: str) -> ConsumerGroupDescription | None:
        """ConsumerGroupDescribe's view, None when the id is not a consumer group."""
        g = await self.consumer_store.load(group_id)
        return describe_consumer(g, self._rt(group_id).consumer.assignor(g)) if g is not None else None

    # -- offsets --------------------------------------------------------------------------------

    async def _commit_consumer(
        self,
        group_id: str,
        member_epoch: int,
        member_id: str,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
        api_version: int,
    ) -> dict[tuple[str, int], GroupErrorKind | None]:
        """Kafka's OffsetMetadataManager.commitOffset for a consumer group: the member and epoch
        are checked against the group as stored, and the offsets written only if it did not move."""
        outcome, good = await self.offsets.check(group_id, member_epoch, "", offsets)
        rt = self._rt(group_id)
        async with rt.lock:
            await self._own(group_id, rt)
            g = await self.consumer_store.load(group_id)
            if g is None:
                raise GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, f"group {group_id} changed type; retry")
            validate_offset_commit(g, member_id, member_epoch, api_version=api_version)
            if good:
                self._refused(group_id, await self.consumer_store.commit(group_id, g.version, self.node_id, good))
        return outcome

    async def _delete_consumer_offsets(
        self, g: ConsumerGroupDoc, parts: list[tuple[str, int]]
    ) -> dict[tuple[str, int], GroupErrorKind | None]:
        """OffsetDelete on a consumer group: partitions of topics its members subscribe to stay."""
        return await self._delete_offsets_unless(g.group_id, parts, set(g.partition_counts))
