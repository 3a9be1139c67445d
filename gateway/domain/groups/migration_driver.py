"""Online migration's driving: a classic group becomes a consumer group when a member joins with
ConsumerGroupHeartbeat, its classic members are served from the consumer group, and it becomes a
classic group again when its last member of the consumer protocol leaves (`migration.py` holds the
transitions; Kafka's `group.consumer.migration.policy` says which ways are open).

A mixin over both protocols' drivers: it answers their hooks (`_upgrade`, `_save_consumer`,
`_serve_elsewhere`) and leaves everything else to them. A conversion is one script
(group-convert-6) that writes the new group and removes the old one, the committed offsets
staying where both protocols keep them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gateway.domain.groups import migration
from gateway.domain.groups.classic import STABLE
from gateway.domain.groups.classic_driver import (
    ClassicCall,
    ClassicDriver,
    HeartbeatCall,
    JoinCall,
    LeaveCall,
)
from gateway.domain.groups.consumer import ConsumerGroup, Step
from gateway.domain.groups.consumer_driver import ConsumerDriver
from gateway.domain.groups.driver import _Runtime
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.migration import MigrationPolicy
from gateway.store.consumer_groups import ConsumerGroupDoc
from gateway.store.groups import GroupDoc

log = logging.getLogger(__name__)


class MigrationDriver(ClassicDriver, ConsumerDriver):
    """Moves groups between the protocols, and serves classic members inside consumer groups."""

    @property
    def migration_policy(self) -> MigrationPolicy:
        return MigrationPolicy(self.consumer_config.migration_policy)

    def _upgrade(self, group_id: str, rt: _Runtime, classic: GroupDoc) -> ConsumerGroupDoc:
        if not migration.can_upgrade(self.migration_policy, classic, self.consumer_config.max_size):
            return super()._upgrade(group_id, rt, classic)
        if classic.state != STABLE:
            # the classic machine forgets its members' assignments when a rebalance starts, and the
            # upgrade must know who owns what: the joining member retries once the group is stable
            raise GroupError(GroupErrorKind.COORDINATOR_NOT_AVAILABLE, f"group {group_id} is rebalancing; retry")
        log.info("group %s: upgrading from the classic protocol with %d members", group_id, len(classic.members))
        rt.consumer.reset()
        return migration.upgrade(classic)

    async def _save_consumer(
        self, group_id: str, rt: _Runtime, g: ConsumerGroupDoc, *, replacing: int | None, had_consumer_members: bool
    ) -> None:
        if replacing is not None:
            self._refused(group_id, await self.consumer_store.upgrade(g, replacing, self.node_id))
            # Kafka's convertToConsumerGroup: requests waiting at a classic barrier rejoin
            rebalance = GroupError(GroupErrorKind.REBALANCE_IN_PROGRESS, "the group moved to the consumer protocol")
            rt.deliver([(ticket, rebalance) for ticket in rt.group.reset()])
            return
        if migration.can_downgrade(self.migration_policy, had_consumer_members, g):
            classic = migration.downgrade(g)
            log.info("group %s: downgrading to the classic protocol with %d members", group_id, len(classic.members))
            self._refused(group_id, await self.consumer_store.downgrade(classic, g.version, self.node_id))
            rt.consumer.reset()
            rt.group.reset()
            rt.group.arm(classic, self.clock())
            return
        await super()._save_consumer(
            group_id, rt, g, replacing=replacing, had_consumer_members=had_consumer_members
        )

    async def _serve_elsewhere(self, group_id: str, rt: _Runtime, call: ClassicCall) -> Any:
        cg = await self.consumer_store.load(group_id)
        if cg is None or not cg.members:
            return await super()._serve_elsewhere(group_id, rt, call)
        rt.consumer.arm(cg, self.clock())
        event: Callable[[ConsumerGroupDoc, ConsumerGroup, float], Step[Any]]
        if isinstance(call, JoinCall):
            topics = await self.topics() if self.topics is not None else {}
            join = call

            def event(g: ConsumerGroupDoc, machine: ConsumerGroup, now: float) -> Step[Any]:
                return migration.join(
                    machine, g, now, join.member_id, join.request, topics, require_known=join.require_known
                )
        elif isinstance(call, HeartbeatCall):
            beat = call

            def event(g: ConsumerGroupDoc, machine: ConsumerGroup, now: float) -> Step[Any]:
                return migration.heartbeat(machine, g, now, beat.generation, beat.member_id, beat.instance_id)
        elif isinstance(call, LeaveCall):
            leaving = call.members

            def event(g: ConsumerGroupDoc, machine: ConsumerGroup, now: float) -> Step[Any]:
                return migration.leave(machine, g, leaving)
        else:
            sync = call

            def event(g: ConsumerGroupDoc, machine: ConsumerGroup, now: float) -> Step[Any]:
                return migration.sync(machine, g, now, sync)

        def loaded(g: ConsumerGroupDoc | None, machine: ConsumerGroup, now: float) -> Step[Any]:
            assert g is not None
            return event(g, machine, now)

        return await self._step_consumer(group_id, rt, cg, loaded)
