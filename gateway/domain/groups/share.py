"""KIP-932's share groups as a state machine: membership, member epochs, assignment, sessions.

Pure, as `classic.py` and `consumer.py`: no Redis, no tasks, no timers; the time comes in with each
event. What a share group hands out is records, not partitions: every member of a topic reads its
partitions through the topic's shared subscription of the group's name
(`gateway.domain.subscriptions`), which gives each record to one member at a time under a lock. So
the assignment only says which partitions a member fetches, and a partition may be assigned to
several members; it needs no reconciliation, so a member reaches its target in one heartbeat. The
assignment is Kafka 4.2's server-side "simple" assignor (`simple_assignment`).

As Kafka's `GroupMetadataManager.shareGroupHeartbeat`: member epoch 0 joins (the member id is the
client's own from ShareGroupHeartbeat v1, KIP-1082), -1 leaves; the group epoch moves whenever the
members, their subscriptions or the subscribed topics' partitions change, and a member's epoch
follows it on its next heartbeat. An unknown member with a non-zero epoch is UNKNOWN_MEMBER_ID; an
epoch that is neither the member's nor its previous one is FENCED_MEMBER_EPOCH. A member silent for
the session timeout is removed (`expire`).

Share sessions (KIP-932's ShareFetch `ShareSessionEpoch`, Kafka's `ShareSessionCache`): epoch 0
opens a session (a new one replaces the member's old), -1 closes it, anything else must be the
session's next epoch (INVALID_SHARE_SESSION_EPOCH), and a session that does not exist is
SHARE_SESSION_NOT_FOUND. A session ends with the connection that opened it (`end_session`), as Kafka
4.4's ShareSessionCache ends it on its connection's disconnect.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from gateway.domain.groups.errors import GroupError, GroupErrorKind

JOIN_EPOCH = 0
FIRST_GROUP_EPOCH = 2  # a new group's first epoch: KAFKA-20268 (Kafka 4.3) keeps 1 for an empty assignment
LEAVE_EPOCH = -1
CLOSE_SESSION_EPOCH = -1

Assignment = dict[str, frozenset[int]]  # topic name -> partitions
TopicPartition = tuple[str, int]


class ShareErrorKind(IntEnum):
    """Kafka's error codes of the share-group APIs beyond those `GroupErrorKind` has."""

    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    SHARE_SESSION_LIMIT_REACHED = 133


class ShareError(Exception):
    """A share fetch or acknowledgement refused with one of `ShareErrorKind`."""

    def __init__(self, kind: ShareErrorKind, message: str = "") -> None:
        self.kind = kind
        super().__init__(message or kind.name.lower().replace("_", " "))


@dataclass
class ShareMember:
    member_id: str
    epoch: int = 0
    previous_epoch: int = 0
    subscribed: tuple[str, ...] = ()
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    deadline_ms: int = 0
    assignment: Assignment = field(default_factory=dict)


def simple_assignment(
    partitions: list[TopicPartition], members: list[str], current: Mapping[str, Iterable[TopicPartition]]
) -> dict[str, set[TopicPartition]]:
    """Kafka 4.2's share-group `SimpleAssignor` (group-coordinator,
    org.apache.kafka.coordinator.group.assignor: SimpleHomogeneousAssignmentBuilder, and per topic
    SimpleHeterogeneousAssignmentBuilder), balance before stickiness: each partition goes to
    ceil(members / partitions) members (its desired sharing), and each member to within one
    partition of the others; what a member has (`current`) it keeps where that allows. Steps as
    Kafka's: drop what is no longer a target, revoke partitions shared more than desired (from
    members over their count first), revoke from members still over their count, then give the
    partitions lacking members to the members under their count, round robin."""
    if not partitions or not members:
        return {m: set() for m in members}
    sharing = -(-len(members) // len(partitions))
    precise = sharing * len(partitions) / len(members)
    desired = {m: math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i, m in enumerate(members)}
    targets = set(partitions)
    owned = {m: [tp for tp in sorted(current.get(m, ())) if tp in targets] for m in members}
    holders: dict[TopicPartition, list[str]] = {tp: [] for tp in partitions}
    for m in members:
        for tp in owned[m]:
            holders[tp].append(m)
    over = {m for m in members if len(owned[m]) > desired[m]}
    for tp in partitions:
        for prefer_over in (True, False):
            for m in list(holders[tp]):
                if len(holders[tp]) <= sharing:
                    break
                if (m in over) == prefer_over:
                    holders[tp].remove(m)
                    owned[m].remove(tp)
    for m in members:
        while len(owned[m]) > desired[m]:
            holders[owned[m].pop()].remove(m)
    unfilled = [m for m in members if len(owned[m]) < desired[m]]
    turn = 0
    for tp in partitions:
        tried = 0
        while len(holders[tp]) < sharing and unfilled and tried < len(unfilled):
            m = unfilled[turn % len(unfilled)]
            if tp in owned[m]:
                turn, tried = turn + 1, tried + 1
                continue
            owned[m].append(tp)
            holders[tp].append(m)
            tried = 0
            if len(owned[m]) >= desired[m]:
                unfilled.remove(m)
            else:
                turn += 1
    return {m: set(owned[m]) for m in members}


@dataclass(frozen=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    assignment: Assignment | None  # None: unchanged since the member's last heartbeat
    left: bool = False


@dataclass
class ShareSession:
    epoch: int  # the epoch the next request must carry
    partitions: set[tuple[str, int]] = field(default_factory=set)


class ShareGroup:
    """One share group's members and sessions."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.sessions: dict[str, ShareSession] = {}
        self._sizes: dict[str, int] = {}  # partition counts the assignments were computed from
        # partitions whose share state is initialized, by topic (a count from 0), and those a
        # heartbeat asked to initialize, which the group's next heartbeat finds done
        self.initialized: dict[str, int] = {}
        self.initializing: dict[str, int] = {}
        self.targets: dict[str, Assignment] = {}  # each member's target assignment at `_assigned_at`
        self._assigned_at = -1

    @property
    def state(self) -> str:
        """As Kafka's ShareGroup.ShareGroupState spells it for ListGroups and the describe."""
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}

    # -- membership -----------------------------------------------------------------------------

    def heartbeat(
        self, member_id: str, member_epoch: int, subscribed: Iterable[str] | None, partitions: Mapping[str, int],
        *, now_ms: int, session_timeout_ms: int, rack_id: str | None = None, client_id: str = "",
        client_host: str = "",
    ) -> HeartbeatResult:
        """A member's heartbeat; `partitions` has the partition count of every existing topic."""
        if not member_id:
            raise GroupError(GroupErrorKind.INVALID_REQUEST, "MemberId can't be empty.")
        member = self.members.get(member_id)
        bump = self._initialized(partitions)
        if member_epoch == LEAVE_EPOCH:
            if member is None:
                raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
            self.remove(member_id)
            return HeartbeatResult(member_id, LEAVE_EPOCH, None, left=True)
        if member is None:
            if member_epoch != JOIN_EPOCH:
                raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
            if subscribed is None:
                raise GroupError(GroupErrorKind.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
            member = self.members[member_id] = ShareMember(member_id)
            bump = True
        elif member_epoch not in (member.epoch, member.previous_epoch, JOIN_EPOCH):
            raise GroupError(GroupErrorKind.FENCED_MEMBER_EPOCH,
                             f"member epoch {member_epoch} is not the member's {member.epoch}")
        member.deadline_ms = now_ms + session_timeout_ms
        member.rack_id, member.client_id, member.client_host = rack_id, client_id, client_host
        if subscribed is not None and tuple(sorted(set(subscribed))) != member.subscribed:
            member.subscribed = tuple(sorted(set(subscribed)))
            bump = True
        sizes = {t: partitions[t] for t in self.subscribed_topics() if t in partitions}
        if sizes != self._sizes:
            self._sizes = sizes
            bump = True
        if bump:  # once per heartbeat, as Kafka's shareGroupHeartbeat bumps it
            self.epoch = max(self.epoch + 1, FIRST_GROUP_EPOCH)
        if self._assigned_at != self.epoch:
            self._assign()
        target = self.targets.get(member_id, {})
        changed = target != member.assignment or member_epoch == JOIN_EPOCH
        if member.epoch != self.epoch:
            member.previous_epoch, member.epoch = member.epoch, self.epoch
            changed = changed or member_epoch != member.epoch
        member.assignment = target
        self.initializing = {t: n for t, n in self._sizes.items() if self.initialized.get(t, 0) < n}
        return HeartbeatResult(member_id, member.epoch, target if changed else None)

    def _initialized(self, partitions: Mapping[str, int]) -> bool:
        """Kafka assigns a share group only partitions whose share state its share coordinator has
        initialized (GroupMetadataManager's `subscribedTopicsChangeMap`, then
        InitializeShareGroupState, sent after the heartbeat that subscribed them); when that is done,
        `initializeShareGroupState` records them and bumps the group epoch for a new assignment. So
        a new member's first heartbeat gets none, and a later one its partitions at the next epoch.
        Here the initialization a heartbeat asked for is found done at the group's next heartbeat
        (Kafka's takes a persister round trip; its clients heartbeat every few seconds): the
        gateway's share state, the shared subscription, needs no initializing. Returns whether the
        epoch must move."""
        for t in [t for t in self.initialized if t not in partitions]:
            del self.initialized[t]  # the topic is gone: one created again under its name starts over
        done = {t: n for t, n in self.initializing.items() if t in partitions}
        self.initializing = {}
        self.initialized.update(done)
        return bool(done)

    def _assign(self) -> None:
        """Every member's target assignment by `simple_assignment`: over all the topics at once when
        the members subscribe to the same ones (Kafka's homogeneous case), else topic by topic."""
        subscribed = {m.member_id: sorted(t for t in m.subscribed if t in self._sizes) for m in self.members.values()}
        current = {mid: [(t, p) for t, ps in a.items() for p in ps] for mid, a in self.targets.items()}
        groups: list[tuple[list[str], list[str]]]  # (topics, members) assigned together
        if len({tuple(ts) for ts in subscribed.values()}) <= 1:
            groups = [(next(iter(subscribed.values()), []), sorted(subscribed))]
        else:
            topics = sorted({t for ts in subscribed.values() for t in ts})
            groups = [([t], sorted(m for m, ts in subscribed.items() if t in ts)) for t in topics]
        targets: dict[str, dict[str, set[int]]] = {m: {} for m in subscribed}
        for topics, members in groups:
            partitions = [(t, p) for t in topics for p in range(min(self._sizes[t], self.initialized.get(t, 0)))]
            mine = {m: [tp for tp in current.get(m, []) if tp[0] in topics] for m in members}
            for m, tps in simple_assignment(partitions, members, mine).items():
                for t, p in tps:
                    targets[m].setdefault(t, set()).add(p)
        self.targets = {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in targets.items()}
        self._assigned_at = self.epoch

    def remove(self, member_id: str) -> None:
        if self.members.pop(member_id, None) is not None:
            self.epoch += 1
        self.sessions.pop(member_id, None)

    def next_deadline(self) -> int | None:
        return min((m.deadline_ms for m in self.members.values()), default=None)

    def expire(self, now_ms: int) -> list[str]:
        """Remove the members whose session timed out; their ids."""
        gone = [m.member_id for m in self.members.values() if m.deadline_ms <= now_ms]
        for member_id in gone:
            self.remove(member_id)
        return gone

    # -- share sessions -------------------------------------------------------------------------

    def session(
        self, member_id: str, epoch: int, add: Iterable[tuple[str, int]], forget: Iterable[tuple[str, int]]
    ) -> ShareSession | None:
        """The member's session after a ShareFetch with `epoch`; None when the request closes it."""
        if epoch == JOIN_EPOCH:  # from a member whose heartbeat may not have arrived yet, as Kafka allows
            session = self.sessions[member_id] = ShareSession(epoch=1)
        else:
            found = self.sessions.get(member_id)
            if found is None:
                raise ShareError(ShareErrorKind.SHARE_SESSION_NOT_FOUND, f"no share session for member {member_id}")
            if epoch == CLOSE_SESSION_EPOCH:
                del self.sessions[member_id]
                return None
            session = found
            if epoch != session.epoch:
                raise ShareError(ShareErrorKind.INVALID_SHARE_SESSION_EPOCH,
                                 f"share session epoch {epoch} is not the expected {session.epoch}")
            session.epoch = session.epoch + 1 if session.epoch < 2**31 - 1 else 1
        session.partitions.update(add)
        session.partitions.difference_update(forget)
        return session

    def end_session(self, member_id: str, session: ShareSession) -> bool:
        """The connection that opened `session` closed: it ends, unless a newer session of the
        member (opened on another connection) replaced it, as Kafka's ShareSessionCache marks a
        replaced session's connection entry stale. Whether it ended."""
        if self.sessions.get(member_id) is not session:
            return False
        del self.sessions[member_id]
        return True

    def close_session(self, member_id: str, epoch: int) -> None:
        """ShareAcknowledge with epoch -1 (the session's last acknowledgements), or any other epoch
        checked and moved on as a ShareFetch's would be."""
        self.session(member_id, epoch, (), ())
