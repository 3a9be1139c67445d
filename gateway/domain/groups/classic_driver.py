"""The classic protocol's driving: JoinGroup, SyncGroup, Heartbeat, LeaveGroup over `ClassicGroup`.

A mixin over `driver.GroupDriver`: each request loads the stored group under the group's lock,
applies the pure transition, saves, answers the requests the transition released, and then waits at
the join or sync barrier if it must.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from gateway.domain.groups.classic import (
    ClassicGroup,
    Decision,
    JoinRequest,
    JoinResult,
    Parked,
    SyncRequest,
    SyncResult,
)
from gateway.domain.groups.driver import Adoption, GroupDriver, _Runtime
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.store.groups import GroupDoc

R = TypeVar("R")


@dataclass(frozen=True)
class JoinCall:
    member_id: str
    request: JoinRequest
    require_known: bool


@dataclass(frozen=True)
class HeartbeatCall:
    generation: int
    member_id: str
    instance_id: str | None


@dataclass(frozen=True)
class LeaveCall:
    members: list[tuple[str, str | None]]


# a classic request as made, for a driver that serves it from a group of another protocol
ClassicCall = JoinCall | SyncRequest | HeartbeatCall | LeaveCall
NOT_SERVED: Any = object()


class ClassicDriver(GroupDriver):
    """The classic protocol's requests and timers."""

    async def _expire_due(self, group_id: str, rt: _Runtime, now: float) -> bool:
        due = rt.group.next_deadline()
        ran = due is not None and due <= now
        if ran:
            await self._run(group_id, lambda g, group, now: group.expire(g, now))
        return await super()._expire_due(group_id, rt, now) or ran

    async def _adoptable(self, group_id: str, rt: _Runtime) -> Adoption | None:
        g = await self.store.load(group_id)
        if g is not None and g.members:
            return partial(rt.group.arm, g), len(g.members)
        return await super()._adoptable(group_id, rt)

    async def _serve_elsewhere(self, group_id: str, rt: _Runtime, call: ClassicCall) -> Any:
        """The answer to a classic request when the id is a group of another protocol that serves
        classic members (online migration), else NOT_SERVED. Runs under the group's lock, asked only
        when the id has no classic group with members (the protocols never both have members)."""
        return NOT_SERVED

    async def _run(
        self, group_id: str, event: Callable[[GroupDoc | None, ClassicGroup, float], Decision[R]],
        *, joining: bool = False, call: ClassicCall | None = None,
    ) -> R:
        """Load, transition, save, answer; then wait at the barrier if the caller must. A member
        `joining` finds the id free of a consumer group with members (an empty one gives way)."""
        rt = self._rt(group_id)
        try:
            async with rt.lock:
                await self._own(group_id, rt)
                g = await self.store.load(group_id)
                if call is not None and (g is None or not g.members):  # a classic group with members is one
                    served = await self._serve_elsewhere(group_id, rt, call)
                    if served is not NOT_SERVED:
                        result: R = served
                        return result
                if joining:
                    await self._claim_for_classic(group_id, g)
                if g is not None:
                    rt.group.arm(g, self.clock())
                decision = event(g, rt.group, self.clock())
                reply = decision.reply
                waiting = rt.park(reply.ticket) if isinstance(reply, Parked) else None
                if decision.save and decision.group is not None:
                    self._refused(group_id, await self.store.save(decision.group, self.node_id))
                rt.deliver(decision.answers)
        finally:
            self._wake.set()  # deadlines may have moved
        if isinstance(reply, Parked):
            assert waiting is not None
            answer: R = await waiting
            return answer
        return reply

    async def _claim_for_classic(self, group_id: str, g: GroupDoc | None) -> None:
        """Kafka's classicGroupJoin: a consumer group with members is joined only through online
        migration (`_serve_elsewhere`), else refused (INCONSISTENT_GROUP_PROTOCOL); an empty one is
        replaced by the classic group, its committed offsets kept. A share group's id is refused
        (INCONSISTENT_GROUP_PROTOCOL, "Group exists but it's not a consumer group")."""
        if g is None and await self.share_groups.exists(group_id):
            raise GroupError(GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL,
                             f"group {group_id} is a share group; classic members cannot join it")
        cg = await self.consumer_store.load(group_id)
        if cg is None:
            return
        if cg.members:
            raise GroupError(
                GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL,
                f"group {group_id} is a consumer group of the consumer protocol; classic members cannot join it",
            )
        await self.consumer_store.delete(group_id, offsets=False)
        self._rt(group_id).consumer.reset()

    # -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup --------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        *,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int = -1,
        instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        require_known_member_id: bool = False,
    ) -> JoinResult:
        """Join (or rejoin) a group; returns when the join barrier falls or at once if nothing changes.

        `rebalance_timeout_ms` -1 (JoinGroup v0) means the session timeout. With
        `require_known_member_id` (v4+, dynamic members) a first join is refused with
        MEMBER_ID_REQUIRED carrying the id to come back with.
        """
        if not group_id:
            raise GroupError(GroupErrorKind.INVALID_GROUP_ID, "the group id is empty")
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            raise GroupError(
                GroupErrorKind.INVALID_SESSION_TIMEOUT,
                f"session timeout must be within {self.min_session_timeout_ms}..{self.max_session_timeout_ms} ms",
            )
        req = JoinRequest(
            protocol_type,
            protocols,
            session_timeout_ms,
            rebalance_timeout_ms if rebalance_timeout_ms >= 0 else session_timeout_ms,
            instance_id or None,
            client_id,
            client_host,
        )
        return await self._run(
            group_id, lambda g, group, now: group.join(g, now, member_id, req, require_known=require_known_member_id),
            joining=True, call=JoinCall(member_id, req, require_known_member_id),
        )

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        *,
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol: str | None = None,
        assignments: dict[str, bytes] | None = None,
    ) -> SyncResult:
        """The member's assignment for `generation`; parks followers until the leader's sync."""
        req = SyncRequest(generation, member_id, instance_id, protocol_type, protocol, assignments)
        return await self._run(group_id, lambda g, group, now: group.sync(g, now, req), call=req)

    async def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None = None
    ) -> None:
        """Keep the member's session; raises REBALANCE_IN_PROGRESS when it must rejoin."""
        await self._run(
            group_id, lambda g, group, now: group.heartbeat(g, now, generation, member_id, instance_id),
            call=HeartbeatCall(generation, member_id, instance_id),
        )

    async def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> list[GroupErrorKind | None]:
        """Remove members (member id, instance id); one outcome per member, None when it left."""
        return await self._run(group_id, lambda g, group, now: group.leave(g, now, members), call=LeaveCall(members))

    # -- offsets --------------------------------------------------------------------------------

    async def _commit_classic(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
        instance_id: str | None,
        api_version: int,
    ) -> dict[tuple[str, int], GroupErrorKind | None]:
        """A classic group's commit: checked against its generation and member; keeps the
        member's session."""
        outcome, good = await self.offsets.check(group_id, generation, member_id, offsets)
        if good:
            await self._own(group_id, self._rt(group_id))
            try:
                await self.offsets.write(group_id, generation, member_id, instance_id, good)
            except GroupError as exc:
                # Kafka's OffsetMetadataManager.validateOffsetCommit: a member's commit to a group
                # that does not exist is GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before
                if exc.kind is GroupErrorKind.GROUP_ID_NOT_FOUND and api_version < 9:
                    raise GroupError(GroupErrorKind.ILLEGAL_GENERATION) from exc
                raise
        rt = self._groups.get(group_id)
        if rt is not None:
            rt.group.seen(member_id, self.clock())
        return outcome
