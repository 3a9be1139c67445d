"""Online migration between the classic and the consumer group protocols (KIP-848's "Online
Migration"), as Kafka 4.2's group coordinator does it. Pure, as `classic.py` and `consumer.py`.

- Upgrade (Kafka's `GroupMetadataManager.convertToConsumerGroup`, `ConsumerGroup.fromClassicGroup`):
  a ConsumerGroupHeartbeat joining a classic group with members, when `group.consumer.migration.policy`
  allows it and the group uses the consumer embedded protocol, turns the group into a consumer group:
  each classic member becomes a member at the classic generation as its epoch, keeping the partitions
  the classic assignment gave it, which are also the target; the joining member then bumps the epoch.
- Classic members inside a consumer group (`classicGroupJoinToConsumerGroup`,
  `classicGroupSyncToConsumerGroup`, `classicGroupHeartbeatToConsumerGroup`): a JoinGroup is the
  member's heartbeat (its subscription and owned partitions come from the embedded protocol's
  metadata) and answers its member epoch as the generation, no leader; SyncGroup hands out the
  partitions the server assigned it; Heartbeat answers REBALANCE_IN_PROGRESS when the member must
  rejoin to move on (the group epoch moved ahead of it, it must revoke, or partitions it waits for
  are free). A rejoin is how a classic member reports its revocation complete.
- Downgrade (`convertToClassicGroup`, `ClassicGroup.fromConsumerGroup`): when the last member of
  the consumer protocol leaves or is fenced and only classic members remain, the group becomes a
  classic group at the group epoch as generation, every member keeping its assignment, and a
  rebalance starts so that the classic protocol takes over.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum

from gateway.domain.groups.classic import (
    PREPARING_REBALANCE,
    JoinRequest,
    JoinResult,
    SyncRequest,
    SyncResult,
)
from gateway.domain.groups.consumer import (
    ConsumerGroup,
    MemberState,
    Step,
    owners,
)
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.offsets import (
    consumer_assignment,
    consumer_subscription,
    encode_consumer_assignment,
)
from gateway.store.consumer_groups import Assignment, ConsumerGroupDoc, ConsumerMemberDoc
from gateway.store.groups import GroupDoc, MemberDoc

CONSUMER_PROTOCOL_TYPE = "consumer"


class MigrationPolicy(StrEnum):
    """Kafka's `ConsumerGroupMigrationPolicy` (group.consumer.migration.policy)."""

    DISABLED = "disabled"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    BIDIRECTIONAL = "bidirectional"

    @property
    def upgrades(self) -> bool:
        return self in (MigrationPolicy.UPGRADE, MigrationPolicy.BIDIRECTIONAL)

    @property
    def downgrades(self) -> bool:
        return self in (MigrationPolicy.DOWNGRADE, MigrationPolicy.BIDIRECTIONAL)


# -- upgrade ------------------------------------------------------------------------------------


def can_upgrade(policy: MigrationPolicy, g: GroupDoc, max_size: int) -> bool:
    """Kafka's `validateOnlineUpgrade`, and every member's subscription must parse."""
    return (
        policy.upgrades
        and g.protocol_type == CONSUMER_PROTOCOL_TYPE
        and len(g.members) <= max_size
        and all(_subscribed(m.protocols) is not None for m in g.members.values())
    )


def upgrade(g: GroupDoc) -> ConsumerGroupDoc:
    """The consumer group a classic group becomes: members at the generation as their epoch, their
    classic assignment as both their current and target assignment."""
    members: dict[str, ConsumerMemberDoc] = {}
    for m in g.members.values():
        assigned = _assignment(m.assignment)
        members[m.member_id] = ConsumerMemberDoc(
            m.member_id, m.instance_id, None, m.client_id, m.client_host, m.rebalance_timeout_ms,
            tuple(sorted(_subscribed(m.protocols) or ())), None, None, g.generation, g.generation,
            MemberState.STABLE.value, assigned, {}, m.session_timeout_ms, tuple(m.protocols),
        )
    # the partition counts are left for the joining member's heartbeat to resolve
    return ConsumerGroupDoc(
        g.group_id, g.generation, g.generation, members, {mid: dict(m.assigned) for mid, m in members.items()}
    )


# -- classic members inside a consumer group ----------------------------------------------------


def join(
    machine: ConsumerGroup, g: ConsumerGroupDoc, now: float, member_id: str, req: JoinRequest,
    topics: Mapping[str, int], *, require_known: bool = False,
) -> Step[JoinResult]:
    """A JoinGroup to a consumer group: the classic member's heartbeat."""
    if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not req.protocols:
        raise GroupError(
            GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL,
            f"group {g.group_id} is a consumer group; only members of the consumer embedded protocol may join it",
        )
    subscribed = _subscribed(req.protocols)
    if subscribed is None:
        raise GroupError(GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL, "the embedded consumer protocol is malformed")
    unknown = not member_id
    member_id = member_id or f"{req.instance_id or req.client_id or 'member'}-{uuid.uuid4()}"
    if len(g.members) >= machine.config.max_size and member_id not in g.members:
        raise GroupError(
            GroupErrorKind.GROUP_MAX_SIZE_REACHED,
            f"the consumer group has reached its maximum capacity of {machine.config.max_size} members",
        )
    if unknown and require_known and req.instance_id is None:
        raise GroupError(GroupErrorKind.MEMBER_ID_REQUIRED, member_id=member_id)
    member, replaced = _member(g, member_id, req.instance_id, unknown)
    updated = replace(
        member,
        instance_id=req.instance_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        server_assignor=None,
        subscribed_topics=tuple(sorted(subscribed)),
        client_id=req.client_id,
        client_host=req.client_host,
        classic_session_timeout_ms=req.session_timeout_ms,
        classic_protocols=tuple(req.protocols),
    )
    owned = _owned(req.protocols)  # eager members give up everything before they rejoin
    reconciled, changed_group = machine.step(g, now, member, updated, replaced, topics, owned)
    machine.classic_deadlines[member_id] = now + reconciled.rebalance_timeout_ms / 1000  # to sync by
    result = JoinResult(reconciled.member_epoch, CONSUMER_PROTOCOL_TYPE, req.protocols[0][0], "", member_id)
    return Step(g, result, changed_group or reconciled != member)


def sync(machine: ConsumerGroup, g: ConsumerGroupDoc, now: float, req: SyncRequest) -> Step[SyncResult]:
    """A SyncGroup from a classic member: the partitions the server assigned it."""
    m = _classic_member(g, req.member_id, req.instance_id, req.generation)
    protocol = m.classic_protocols[0][0]
    if req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE:
        raise GroupError(GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL, f"protocol type {req.protocol_type} is not consumer")
    if req.protocol is not None and req.protocol != protocol:
        raise GroupError(GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL, f"protocol {req.protocol} is not {protocol}")
    # Kafka's throwIfRebalanceInProgress: a member revoking has rejoined already
    if g.group_epoch > m.member_epoch and m.state != MemberState.UNREVOKED_PARTITIONS:
        raise _rejoin(machine, m, now)
    machine.classic_deadlines.pop(m.member_id, None)
    machine.touch(m, now)
    return Step(g, SyncResult(CONSUMER_PROTOCOL_TYPE, protocol, encode_consumer_assignment(m.assigned)), False)


def heartbeat(
    machine: ConsumerGroup, g: ConsumerGroupDoc, now: float, generation: int, member_id: str, instance_id: str | None
) -> Step[None]:
    """A Heartbeat from a classic member: REBALANCE_IN_PROGRESS when it must rejoin to move on."""
    m = _classic_member(g, member_id, instance_id, generation)
    machine.touch(m, now)
    if (
        m.member_epoch < g.group_epoch
        or m.state == MemberState.UNREVOKED_PARTITIONS
        or (m.state == MemberState.UNRELEASED_PARTITIONS and not _waiting_on_unreleased(g, m))
    ):
        raise _rejoin(machine, m, now)
    return Step(g, None, False)


def _rejoin(machine: ConsumerGroup, m: ConsumerMemberDoc, now: float) -> GroupError:
    """REBALANCE_IN_PROGRESS, the member to rejoin within its rebalance timeout or be fenced."""
    machine.classic_deadlines.setdefault(m.member_id, now + m.rebalance_timeout_ms / 1000)
    return GroupError(GroupErrorKind.REBALANCE_IN_PROGRESS, "the group rebalances; rejoin")


def leave(
    machine: ConsumerGroup, g: ConsumerGroupDoc, members: list[tuple[str, str | None]]
) -> Step[list[GroupErrorKind | None]]:
    """A LeaveGroup to a consumer group: each member named is fenced (its partitions free at once)."""
    outcome: list[GroupErrorKind | None] = []
    for member_id, instance_id in members:
        found = g.static_member(instance_id) if instance_id else g.members.get(member_id)
        if found is None:
            outcome.append(GroupErrorKind.UNKNOWN_MEMBER_ID)
        elif instance_id and member_id and found.member_id != member_id:
            outcome.append(GroupErrorKind.FENCED_INSTANCE_ID)
        else:
            machine.fence(g, found.member_id)
            outcome.append(None)
    return Step(g, outcome, any(e is None for e in outcome))


def _member(
    g: ConsumerGroupDoc, member_id: str, instance_id: str | None, unknown: bool
) -> tuple[ConsumerMemberDoc, ConsumerMemberDoc | None]:
    """The member a JoinGroup speaks for (new when unknown) and the static member it replaces."""
    if instance_id is None:
        return g.members.get(member_id) or ConsumerMemberDoc(member_id), None
    existing = g.static_member(instance_id)
    if existing is None or existing.member_id == member_id:
        return existing or g.members.get(member_id) or ConsumerMemberDoc(member_id), None
    if not unknown:
        raise GroupError(GroupErrorKind.FENCED_INSTANCE_ID, f"instance id {instance_id} has a newer member")
    return replace(existing, member_id=member_id), existing


def _classic_member(g: ConsumerGroupDoc, member_id: str, instance_id: str | None, generation: int) -> ConsumerMemberDoc:
    """Kafka's validateConsumerGroupMember, throwIfMemberDoesNotUseClassicProtocol and
    throwIfGenerationIdUnmatched."""
    if instance_id:
        m = g.static_member(instance_id)
        if m is None:
            raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID, f"instance id {instance_id} is unknown")
        if m.member_id != member_id:
            raise GroupError(GroupErrorKind.FENCED_INSTANCE_ID, f"instance id {instance_id} has a newer member")
    else:
        found = g.members.get(member_id)
        if found is None:
            raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {g.group_id}")
        m = found
    if not m.classic:
        raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID, f"member {member_id} does not use the classic protocol")
    if generation != m.member_epoch:
        raise GroupError(
            GroupErrorKind.ILLEGAL_GENERATION, f"generation {generation} is not the member's epoch {m.member_epoch}"
        )
    return m


def _waiting_on_unreleased(g: ConsumerGroupDoc, m: ConsumerMemberDoc) -> bool:
    """Kafka's `ConsumerGroup.waitingOnUnreleasedPartition`: a partition of the member's target
    it does not have yet is still held by another member."""
    held = owners(g)
    for t, ps in g.target.get(m.member_id, {}).items():
        for p in ps - m.assigned.get(t, frozenset()):
            if held.get((t, p), m.member_id) != m.member_id:
                return True
    return False


# -- downgrade ----------------------------------------------------------------------------------


def can_downgrade(policy: MigrationPolicy, had_consumer_members: bool, after: ConsumerGroupDoc) -> bool:
    """Kafka's `validateOnlineDowngradeWithFencedMembers`: a member of the consumer protocol left
    or was fenced, and the members left all use the classic protocol."""
    return (
        policy.downgrades
        and had_consumer_members
        and bool(after.members)
        and all(m.classic for m in after.members.values())
    )


def downgrade(g: ConsumerGroupDoc) -> GroupDoc:
    """The classic group a consumer group of classic members becomes: generation the group epoch,
    every member keeping its assignment, a rebalance under way (Kafka's `convertToClassicGroup`
    then `prepareRebalance`)."""
    members = {
        m.member_id: MemberDoc(
            m.member_id, m.instance_id, m.client_id, m.client_host, m.classic_session_timeout_ms,
            m.rebalance_timeout_ms, CONSUMER_PROTOCOL_TYPE, list(m.classic_protocols),
            encode_consumer_assignment(m.assigned), seq,
        )
        for seq, m in enumerate(g.members.values())
    }
    first = next(iter(g.members.values()))
    return GroupDoc(
        g.group_id, PREPARING_REBALANCE, g.group_epoch, CONSUMER_PROTOCOL_TYPE, first.classic_protocols[0][0],
        first.member_id, members, len(members),
    )


# -- the embedded consumer protocol -------------------------------------------------------------


def _subscribed(protocols: list[tuple[str, bytes]] | tuple[tuple[str, bytes], ...]) -> set[str] | None:
    """The topics of the member's subscription (every protocol carries the same one)."""
    return consumer_subscription(protocols[0][1]) if protocols else None


def _assignment(raw: bytes) -> Assignment:
    out: dict[str, set[int]] = {}
    for t, p in consumer_assignment(raw) or ():
        out.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in sorted(out.items())}


def _owned(protocols: list[tuple[str, bytes]]) -> Assignment:
    """The owned partitions of a ConsumerProtocolSubscription v1+ (none for v0 or unreadable)."""
    raw = protocols[0][1]
    try:
        (version, topics) = struct.unpack_from(">hi", raw, 0)
        if version < 1:
            return {}
        pos = 6
        for _ in range(topics):
            (n,) = struct.unpack_from(">h", raw, pos)
            pos += 2 + n
        (user_data,) = struct.unpack_from(">i", raw, pos)
        pos += 4 + max(user_data, 0)
        (count,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        owned: dict[str, frozenset[int]] = {}
        for _ in range(count):
            (n,) = struct.unpack_from(">h", raw, pos)
            topic = raw[pos + 2:pos + 2 + n].decode()
            pos += 2 + n
            (k,) = struct.unpack_from(">i", raw, pos)
            owned[topic] = frozenset(struct.unpack_from(f">{k}i", raw, pos + 4))
            pos += 4 + 4 * k
        return {t: ps for t, ps in owned.items() if ps}
    except (struct.error, UnicodeDecodeError):
        return {}
