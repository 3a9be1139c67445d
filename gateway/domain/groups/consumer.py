"""KIP-848's consumer group protocol (ConsumerGroupHeartbeat) as a state machine.

Pure, as `classic.py`: no Redis, no tasks, no timers. Each event takes the group as stored (a
`ConsumerGroupDoc` the driver loaded, or None), the time now and the request, changes the group and
returns a `Step`: the reply and whether the group must be saved before the reply goes out. A refusal
raises `GroupError` with Kafka's error. `next_deadline` says when to call `expire`.

The three layers of Kafka's group-coordinator module, followed here:
- the group (`modern/consumer/ConsumerGroup`, `GroupMetadataManager.consumerGroupHeartbeat`): a
  heartbeat creates or updates its member; a changed subscription (names, regex, or the partitions
  of the subscribed topics) bumps the group epoch;
- the target (`modern/TargetAssignmentBuilder`): when the group epoch is ahead of the assignment
  epoch, the group's assignor (`assignors.py`) computes every member's target from the previous one;
- the member (`modern/consumer/CurrentAssignmentBuilder`): each member walks to its target on its own
  heartbeats. Partitions to give up first go pending revocation (UNREVOKED_PARTITIONS, the member
  keeps its epoch) until the member's heartbeat no longer lists them as owned; a partition still
  held by another member, assigned or pending revocation, is not given (UNRELEASED_PARTITIONS), so
  no partition is ever owned by two members.

Kept in process only, as Kafka keeps its timers: each member's session deadline, the revocation
deadline (rebalance timeout) of a member asked to revoke, and when the group's regular expressions
were last resolved (a gateway that takes a group over resolves them again at once). A stored group
first seen here (`arm`) gives every member a fresh session and every revoking member a fresh
revocation deadline, as a new Kafka coordinator does when it loads a group.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

from gateway.domain.groups.assignors import ASSIGNORS, MemberSpec
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.topic_regex import matching, topic_pattern
from gateway.store.consumer_groups import Assignment as Assignment  # re-exported for the Kafka face
from gateway.store.consumer_groups import ConsumerGroupDoc, ConsumerMemberDoc

log = logging.getLogger(__name__)

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
# A group's epoch starts at 2: KAFKA-20268 (Kafka 4.3) reserves epoch 1 for a special empty
# assignment, so a new group's first bump goes from 0 to 2 (0 is a joining member's epoch).
FIRST_GROUP_EPOCH = 2
REGEX_REFRESH_MIN_INTERVAL = 10.0  # seconds: Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1  # ConsumerGroupHeartbeat v1+: the client names itself


class MemberState(StrEnum):
    """Kafka's `modern/MemberState`."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class GroupState(StrEnum):
    """Kafka's `ConsumerGroup.ConsumerGroupState`, as ListGroups and the describes spell it."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """Kafka's `group.consumer.*` broker settings."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    # Kafka's group.consumer.migration.policy: whether a classic group with members may become a
    # consumer group when a member joins with ConsumerGroupHeartbeat (upgrade), and back (downgrade)
    migration_policy: str = "bidirectional"


@dataclass(frozen=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat, topic ids already resolved to names. None is "not sent" (the
    client only sends what changed); `owned` is what the member owns now."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topics: list[str] | None = None
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class HeartbeatResult:
    """The response: `assignment` is None when the member already has it."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None


@dataclass(frozen=True)
class ConsumerMemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    subscribed_regex: str | None
    assignment: Assignment
    target_assignment: Assignment
    classic: bool = False  # a member of the classic protocol (online migration)


@dataclass(frozen=True)
class ConsumerGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ConsumerMemberDescription] = field(default_factory=list)


R = TypeVar("R")


@dataclass(frozen=True)
class Step(Generic[R]):
    """One event's outcome: the driver saves `group` when `save`, then replies."""

    group: ConsumerGroupDoc | None
    reply: R
    save: bool


class ConsumerGroup:
    """This process's side of one consumer group (its timers), and the transitions of its stored side."""

    def __init__(self, group_id: str, config: ConsumerGroupConfig | None = None) -> None:
        self.group_id = group_id
        self.config = config or ConsumerGroupConfig()
        self.sessions: dict[str, float] = {}  # member id -> when its session ends
        self.revocations: dict[str, tuple[float, int]] = {}  # member id -> (deadline, epoch it revokes in)
        # a classic member (online migration) told to rejoin, or that joined and must sync: by when
        # (its rebalance timeout; Kafka's consumer group join and sync timeouts)
        self.classic_deadlines: dict[str, float] = {}
        # regular expressions are resolved as Kafka's coordinator resolves them, off the heartbeat
        # that asks (`_refresh_regexes`): the refresh a heartbeat scheduled, the time of the last
        # one and the topics it saw (to tell new topics)
        self.regex_refresh: frozenset[str] | None = None
        self.regex_refreshed_at = float("-inf")
        self.regex_topics: frozenset[str] = frozenset()
        self.armed = False

    # -- what the driver asks -------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        candidates = [*self.sessions.values(), *(d for d, _ in self.revocations.values()), *self.classic_deadlines.values()]
        return min(candidates) if candidates else None

    def arm(self, g: ConsumerGroupDoc, now: float) -> None:
        """First sight of a stored group in this process: fresh sessions and revocation deadlines."""
        if self.armed:
            return
        self.armed = True
        for m in g.members.values():
            self.touch(m, now)
            if m.state == MemberState.UNREVOKED_PARTITIONS:
                self.revocations[m.member_id] = (now + m.rebalance_timeout_ms / 1000, m.member_epoch)

    def reset(self) -> None:
        """Forget this process's view of the group (another gateway coordinates it now)."""
        self.sessions.clear()
        self.revocations.clear()
        self.classic_deadlines.clear()
        self.regex_refresh, self.regex_refreshed_at, self.regex_topics = None, float("-inf"), frozenset()
        self.armed = False

    # -- ConsumerGroupHeartbeat -----------------------------------------------------------------

    def heartbeat(
        self,
        g: ConsumerGroupDoc | None,
        now: float,
        req: HeartbeatRequest,
        topics: Mapping[str, int],
        *,
        api_version: int = 1,
    ) -> Step[HeartbeatResult]:
        """Join, heartbeat, reconcile or leave. `topics` is every topic with its partition count,
        against which subscriptions and regular expressions are resolved."""
        validate(req, api_version, self.config.assignors)
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(g, req)
        joining = req.member_epoch == 0
        if g is None:
            if not joining:
                raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"consumer group {self.group_id} not found")
            g = ConsumerGroupDoc(self.group_id)
        member_id = req.member_id or str(uuid.uuid4())
        if len(g.members) >= self.config.max_size and member_id not in g.members:
            raise GroupError(
                GroupErrorKind.GROUP_MAX_SIZE_REACHED,
                f"the consumer group has reached its maximum capacity of {self.config.max_size} members",
            )
        member, replaced = self._member(g, member_id, req)
        if req.subscribed_regex and req.subscribed_regex != member.subscribed_regex:
            topic_pattern(req.subscribed_regex)  # a bad one is refused before anything changes
        reconciled, changed_group = self.step(g, now, member, _updated(member, req), replaced, topics, req.owned)

        full = joining or (
            req.rebalance_timeout_ms != -1
            and (req.subscribed_topics is not None or req.subscribed_regex is not None)
            and req.owned is not None
        )
        changed = reconciled.assigned != member.assigned
        return Step(
            g,
            HeartbeatResult(
                member_id,
                reconciled.member_epoch,
                self.config.heartbeat_interval_ms,
                dict(reconciled.assigned) if full or changed else None,
            ),
            changed_group or reconciled != member,
        )

    def step(
        self,
        g: ConsumerGroupDoc,
        now: float,
        member: ConsumerMemberDoc,
        updated: ConsumerMemberDoc,
        replaced: ConsumerMemberDoc | None,
        topics: Mapping[str, int],
        owned: Assignment | None,
    ) -> tuple[ConsumerMemberDoc, bool]:
        """Kafka's heartbeat steps 1-3 for a member of either protocol: store `updated` (bumping the
        group epoch when its subscription changed), recompute the target if the epoch moved ahead,
        and take one step of the member towards its target. Returns the reconciled member and
        whether the group changed beyond it."""
        member_id = updated.member_id
        bump = g.group_epoch == 0 or _subscription(updated) != _subscription(member)
        if replaced is not None:
            self._replace(g, replaced, updated)
        g.members[member_id] = updated
        moved, resolved = self._refresh_regexes(g, now, topics)
        bump |= moved
        counts = {t: topics[t] for t in sorted(_subscribed_names(g)) if t in topics}
        if counts != g.partition_counts:
            g.partition_counts, bump = counts, True
        if bump:
            g.group_epoch = max(g.group_epoch + 1, FIRST_GROUP_EPOCH)
            log.info("group %s: epoch %d", g.group_id, g.group_epoch)
        retarget = g.group_epoch > g.assignment_epoch
        if retarget:
            self._update_target(g)

        reconciled = reconcile(updated, g, owned)
        g.members[member_id] = reconciled
        if reconciled != updated or replaced is not None:
            if reconciled.state == MemberState.UNREVOKED_PARTITIONS:
                self.revocations[member_id] = (now + reconciled.rebalance_timeout_ms / 1000, reconciled.member_epoch)
            else:
                self.revocations.pop(member_id, None)
        self.touch(reconciled, now)
        return reconciled, bump or retarget or resolved or replaced is not None

    def _refresh_regexes(self, g: ConsumerGroupDoc, now: float, topics: Mapping[str, int]) -> tuple[bool, bool]:
        """Kafka resolves a group's regular expressions asynchronously (GroupMetadataManager's
        maybeUpdateRegularExpressions schedules the resolution, handleRegularExpressionsResult
        applies it and bumps the group epoch): the heartbeat that brings a new regex is answered
        without its topics, which come in a later heartbeat. Here a heartbeat schedules the refresh
        and the next heartbeat of any member applies it first, resolving the regexes against the
        topics of that moment. A refresh is scheduled when a member brings a regex no member had,
        or, at most once per `REGEX_REFRESH_MIN_INTERVAL` after the last one, when a regex is
        unresolved or topics were created since. Returns whether the topics the regexes name changed
        (the group epoch moves, as handleRegularExpressionsResult bumps it) and whether the stored
        resolutions did (a regex that matches nothing is stored too)."""
        before = dict(g.regexes)
        in_use = {m.subscribed_regex for m in g.members.values() if m.subscribed_regex}
        if self.regex_refresh is not None:  # the result of the refresh scheduled before
            for rx in sorted(self.regex_refresh & in_use):
                g.regexes[rx] = matching(rx, list(topics))
            self.regex_refresh, self.regex_refreshed_at, self.regex_topics = None, now, frozenset(topics)
        for rx in set(g.regexes) - in_use:  # the last member of a regex left it (Kafka's tombstone)
            del g.regexes[rx]
        if in_use and now > self.regex_refreshed_at + REGEX_REFRESH_MIN_INTERVAL and (
                in_use != set(g.regexes) or not set(topics) <= self.regex_topics):  # a new regex is unresolved
            self.regex_refresh = frozenset(in_use)
        moved = any(before.get(rx, ()) != g.regexes.get(rx, ()) for rx in set(before) | set(g.regexes))
        return moved, g.regexes != before

    def touch(self, m: ConsumerMemberDoc, now: float) -> None:
        """Start the member's session again: a classic member's own timeout, else the group's."""
        timeout = m.classic_session_timeout_ms if m.classic else self.config.session_timeout_ms
        self.sessions[m.member_id] = now + timeout / 1000

    def _member(
        self, g: ConsumerGroupDoc, member_id: str, req: HeartbeatRequest
    ) -> tuple[ConsumerMemberDoc, ConsumerMemberDoc | None]:
        """The member the heartbeat speaks for (new when it joins), and the static member it
        replaces, if any (Kafka's `getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember`)."""
        joining = req.member_epoch == 0
        if req.instance_id is None:
            m = g.members.get(member_id)
            if m is None:
                if not joining:
                    raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
                return ConsumerMemberDoc(member_id), None
            _check_epoch(m, req.member_epoch, req.owned)
            return m, None
        existing = g.static_member(req.instance_id)
        if not joining:
            if existing is None:
                raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID, f"instance id {req.instance_id} is unknown")
            if existing.member_id != member_id:
                raise GroupError(GroupErrorKind.FENCED_INSTANCE_ID, f"instance id {req.instance_id} has a newer member")
            _check_epoch(existing, req.member_epoch, req.owned)
            return existing, None
        if existing is None:
            m = g.members.get(member_id)
            return (m, None) if m is not None else (ConsumerMemberDoc(member_id), None)
        if existing.member_id == member_id:
            # the same member again (its join response was lost, or it was fenced): handled in place
            # rather than as its own replacement (apache/kafka#23542)
            if existing.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                return replace(existing, member_epoch=0, previous_epoch=0), None
            return existing, None
        if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise GroupError(
                GroupErrorKind.UNRELEASED_INSTANCE_ID,
                f"instance id {req.instance_id} is still owned by member {existing.member_id}",
            )
        log.info("group %s: static member %s is back as %s", g.group_id, req.instance_id, member_id)
        return replace(existing, member_id=member_id, member_epoch=0, previous_epoch=0), existing

    def _replace(self, g: ConsumerGroupDoc, old: ConsumerMemberDoc, new: ConsumerMemberDoc) -> None:
        """A static member's new incarnation takes over the old one's assignment and target."""
        del g.members[old.member_id]
        target = g.target.pop(old.member_id, None)
        if target is not None:
            g.target[new.member_id] = target
        self.sessions.pop(old.member_id, None)
        self.revocations.pop(old.member_id, None)

    def _leave(self, g: ConsumerGroupDoc | None, req: HeartbeatRequest) -> Step[HeartbeatResult]:
        """Epoch -1: the member leaves for good. Epoch -2: a static member leaves for now, keeping its
        assignment for a successor with its instance id until its session ends."""
        if g is None:
            raise GroupError(GroupErrorKind.GROUP_ID_NOT_FOUND, f"consumer group {self.group_id} not found")
        if req.instance_id is None:
            m = g.members.get(req.member_id)
            if m is None:
                raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID, f"member {req.member_id} is not in the group")
        else:
            found = g.static_member(req.instance_id)
            if found is None:
                raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID, f"instance id {req.instance_id} is unknown")
            if found.member_id != req.member_id:
                raise GroupError(GroupErrorKind.FENCED_INSTANCE_ID, f"instance id {req.instance_id} has a newer member")
            m = found
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            g.members[m.member_id] = replace(
                m, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={}
            )
            self.revocations.pop(m.member_id, None)
            log.info("group %s: static member %s left for now", g.group_id, req.instance_id)
        else:
            log.info("group %s: member %s left", g.group_id, m.member_id)
            self.fence(g, m.member_id)
        # no heartbeat interval: Kafka's consumerGroupLeave answers the member id and epoch alone
        return Step(g, HeartbeatResult(m.member_id, req.member_epoch, 0, None), True)

    # -- timers ---------------------------------------------------------------------------------

    def expire(self, g: ConsumerGroupDoc | None, now: float) -> Step[None]:
        """What is due at `now`: members whose session ended, and members that did not revoke
        within their rebalance timeout, are fenced (removed, the group epoch bumped)."""
        if g is None:
            self.sessions.clear()
            self.revocations.clear()
            self.classic_deadlines.clear()
            return Step(None, None, False)
        due = overdue(self.sessions, self.revocations, g.members, MemberState.UNREVOKED_PARTITIONS, now)
        for mid, why in due:
            log.info("group %s: member %s %s; fenced", g.group_id, mid, why)
            self.fence(g, mid)
        save = bool(due)
        for mid, until in list(self.classic_deadlines.items()):
            if mid not in g.members:
                del self.classic_deadlines[mid]
            elif until <= now:
                log.info("group %s: classic member %s did not rejoin or sync within its rebalance timeout; fenced",
                         g.group_id, mid)
                self.fence(g, mid)
                save = True
        return Step(g, None, save)

    # -- the transitions ------------------------------------------------------------------------

    def fence(self, g: ConsumerGroupDoc, member_id: str) -> None:
        """Remove a member: its partitions are free at once, the others' targets follow at the next
        heartbeat (the group epoch moves ahead of the assignment epoch)."""
        g.members.pop(member_id, None)
        g.target.pop(member_id, None)
        self.sessions.pop(member_id, None)
        self.revocations.pop(member_id, None)
        self.classic_deadlines.pop(member_id, None)
        g.group_epoch += 1
        if not g.members:  # an empty group has nothing to assign (KAFKA-20442)
            g.assignment_epoch = g.group_epoch
            g.target.clear()

    def _update_target(self, g: ConsumerGroupDoc) -> None:
        """Kafka's `TargetAssignmentBuilder`: the assignor runs over every member, the previous
        target as the base it sticks to."""
        specs = {
            mid: MemberSpec(
                frozenset(t for t in _subscribed(m, g) if t in g.partition_counts), g.target.get(mid, {})
            )
            for mid, m in g.members.items()
        }
        g.target = ASSIGNORS[self.assignor(g)].assign(specs, g.partition_counts)
        g.assignment_epoch = g.group_epoch

    def assignor(self, g: ConsumerGroupDoc) -> str:
        """The members' most requested assignor, else the default (Kafka's
        `computePreferredServerAssignor`); ties go to the earlier name."""
        votes = Counter(m.server_assignor for m in g.members.values() if m.server_assignor)
        if not votes:
            return self.config.assignors[0]
        return min(votes, key=lambda name: (-votes[name], name))


class _Revoking(Protocol):
    member_epoch: int
    state: str


def overdue(
    sessions: dict[str, float], revocations: dict[str, tuple[float, int]],
    members: Mapping[str, _Revoking], revoking: str, now: float,
) -> list[tuple[str, str]]:
    """The members whose session ended, or that did not revoke (still in state `revoking` in the
    epoch they were asked in) within their rebalance timeout, by `now`, each with why; the
    deadlines of members gone or no longer revoking are dropped. Shared with the streams protocol."""
    due: dict[str, str] = {}
    for mid, until in list(sessions.items()):
        if mid not in members:
            del sessions[mid]
        elif until <= now:
            due[mid] = "missed its session timeout"
    for mid, (until, epoch) in list(revocations.items()):
        m = members.get(mid)
        if m is None or m.member_epoch != epoch or m.state != revoking:
            del revocations[mid]
        elif until <= now:
            due.setdefault(mid, "did not revoke within its rebalance timeout")
    return list(due.items())


# -- validation ---------------------------------------------------------------------------------


def validate(req: HeartbeatRequest, api_version: int, assignors: tuple[str, ...]) -> None:
    """Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid`."""

    def invalid(message: str) -> GroupError:
        return GroupError(GroupErrorKind.INVALID_REQUEST, message)

    if (
        api_version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION
        or req.member_epoch > 0
        or req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH
    ) and not req.member_id.strip():
        raise invalid("MemberId can't be empty.")
    if req.instance_id is not None and not req.instance_id.strip():
        raise invalid("InstanceId can't be empty.")
    if req.rack_id is not None and not req.rack_id.strip():
        raise invalid("RackId can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or req.owned:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topics is None and req.subscribed_regex is None:
            raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
    elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in assignors:
        raise GroupError(
            GroupErrorKind.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: {', '.join(assignors)}.",
        )


def _check_epoch(m: ConsumerMemberDoc, epoch: int, owned: Assignment | None) -> None:
    """Kafka's `throwIfConsumerGroupMemberEpochIsInvalid`. Epoch 0 is a member rejoining after it
    let go of everything (KAFKA-19233); the previous epoch is accepted when the member owns no more
    than its assignment (the response bumping its epoch may have been lost)."""
    if epoch == 0:
        return
    if epoch > m.member_epoch:
        raise GroupError(
            GroupErrorKind.FENCED_MEMBER_EPOCH,
            f"member epoch {epoch} is ahead of the coordinator's {m.member_epoch}; abandon all partitions and rejoin",
        )
    if epoch < m.member_epoch and (epoch != m.previous_epoch or not _within(owned, m.assigned)):
        raise GroupError(
            GroupErrorKind.FENCED_MEMBER_EPOCH,
            f"member epoch {epoch} is behind the coordinator's {m.member_epoch}; abandon all partitions and rejoin",
        )


def _within(owned: Assignment | None, assigned: Assignment) -> bool:
    return owned is not None and all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items())


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member still owns any of `partitions`; not knowing (a heartbeat without owned
    partitions) counts as owning."""
    if owned is None:
        return True
    return any(ps & partitions.get(t, frozenset()) for t, ps in owned.items())


def _updated(m: ConsumerMemberDoc, req: HeartbeatRequest) -> ConsumerMemberDoc:
    """The member with what the heartbeat changed (fields not sent are kept)."""
    return replace(
        m,
        instance_id=req.instance_id if req.instance_id is not None else m.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else m.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else m.rebalance_timeout_ms,
        server_assignor=req.server_assignor if req.server_assignor is not None else m.server_assignor,
        subscribed_topics=(
            tuple(sorted(set(req.subscribed_topics))) if req.subscribed_topics is not None else m.subscribed_topics
        ),
        subscribed_regex=(req.subscribed_regex or None) if req.subscribed_regex is not None else m.subscribed_regex,
        client_id=req.client_id,
        client_host=req.client_host,
    )


def _subscription(m: ConsumerMemberDoc) -> tuple[tuple[str, ...], str | None, str | None]:
    return m.subscribed_topics, m.subscribed_regex, m.server_assignor


def _subscribed(m: ConsumerMemberDoc, g: ConsumerGroupDoc) -> set[str]:
    """The topics a member subscribes to: its names and what its regex matched."""
    topics = set(m.subscribed_topics)
    if m.subscribed_regex:
        topics.update(g.regexes.get(m.subscribed_regex, ()))
    return topics


def _subscribed_names(g: ConsumerGroupDoc) -> set[str]:
    return set().union(*(_subscribed(m, g) for m in g.members.values()))


# -- reconciliation -----------------------------------------------------------------------------


def owners(g: ConsumerGroupDoc) -> dict[tuple[str, int], str]:
    """Who holds each partition, assigned or pending revocation (Kafka's partition epochs)."""
    held: dict[tuple[str, int], str] = {}
    for m in g.members.values():
        for a in (m.assigned, m.pending_revocation):
            for t, ps in a.items():
                for p in ps:
                    held[(t, p)] = m.member_id
    return held


def reconcile(m: ConsumerMemberDoc, g: ConsumerGroupDoc, owned: Assignment | None) -> ConsumerMemberDoc:
    """Kafka's `CurrentAssignmentBuilder.build`: one step of the member towards its target."""
    if m.state == MemberState.STABLE and m.member_epoch == g.assignment_epoch:
        return m
    if m.state == MemberState.UNREVOKED_PARTITIONS and _owns_any(owned, m.pending_revocation):
        return m
    return _next_assignment(m, g, owned)


def _next_assignment(m: ConsumerMemberDoc, g: ConsumerGroupDoc, owned: Assignment | None) -> ConsumerMemberDoc:
    """Kafka's `CurrentAssignmentBuilder.computeNextAssignment`: revoke first (keeping the epoch),
    then take the target's free partitions and move to the target epoch."""
    target = g.target.get(m.member_id, {})
    subscribed = _subscribed(m, g)
    held = owners(g)
    assigned: dict[str, frozenset[int]] = {}
    revoking: dict[str, frozenset[int]] = {}
    adding: dict[str, frozenset[int]] = {}
    unreleased = False
    for t in sorted(set(target) | set(m.assigned)):
        want = target.get(t, frozenset()) if t in subscribed else frozenset()
        current = m.assigned.get(t, frozenset())
        keep, drop = current & want, current - want
        free = {p for p in want - keep if held.get((t, p), m.member_id) == m.member_id}
        unreleased = unreleased or len(free) < len(want - keep)
        for out, value in ((assigned, keep), (revoking, drop), (adding, frozenset(free))):
            if value:
                out[t] = value
    if revoking and _owns_any(owned, revoking):
        return _with_epoch(m, m.member_epoch, MemberState.UNREVOKED_PARTITIONS, assigned, revoking)
    for t, ps in adding.items():
        assigned[t] = assigned.get(t, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with_epoch(m, g.assignment_epoch, state, dict(sorted(assigned.items())), {})


def _with_epoch(
    m: ConsumerMemberDoc, epoch: int, state: MemberState, assigned: Assignment, pending: Assignment
) -> ConsumerMemberDoc:
    previous = m.member_epoch if epoch != m.member_epoch else m.previous_epoch
    return replace(
        m, member_epoch=epoch, previous_epoch=previous, state=state.value, assigned=assigned, pending_revocation=pending
    )


# -- describing, listing, offsets ---------------------------------------------------------------


def group_state(g: ConsumerGroupDoc | None) -> GroupState:
    """Kafka's `ConsumerGroup.maybeUpdateGroupState`."""
    if g is None:
        return GroupState.DEAD
    if not g.members:
        return GroupState.EMPTY
    if g.group_epoch > g.assignment_epoch:
        return GroupState.ASSIGNING
    for m in g.members.values():
        if m.state != MemberState.STABLE or m.member_epoch != g.assignment_epoch:
            return GroupState.RECONCILING
    return GroupState.STABLE


def describe(g: ConsumerGroupDoc, assignor: str) -> ConsumerGroupDescription:
    """ConsumerGroupDescribe's view of a group."""
    return ConsumerGroupDescription(
        g.group_id,
        group_state(g).value,
        g.group_epoch,
        g.assignment_epoch,
        assignor,
        [
            ConsumerMemberDescription(
                m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                m.subscribed_topics, m.subscribed_regex, dict(m.assigned), dict(g.target.get(m.member_id, {})),
                m.classic,
            )
            for m in g.members.values()
        ],
    )


def validate_offset_commit(
    g: ConsumerGroupDoc, member_id: str, member_epoch: int, *, transactional: bool = False, api_version: int = 9
) -> None:
    """Kafka's `ConsumerGroup.validateOffsetCommit`: a commit with epoch -1 (the admin client, or a
    consumer assigning partitions itself) is accepted while the group is empty; otherwise the member
    must exist and commit in its current epoch, with OffsetCommit v9+ unless transactional. A
    classic member commits with any version, its generation being its member epoch, and a stale one
    is ILLEGAL_GENERATION as in a classic group."""
    if member_epoch < 0 and not g.members:
        return
    m = _known(g, member_id)
    if not transactional and api_version < 9 and not m.classic:
        raise GroupError(
            GroupErrorKind.UNSUPPORTED_VERSION,
            "OffsetCommit version 9 or above must be used by members using the consumer group protocol",
        )
    _check_current(m, member_epoch)


def validate_offset_fetch(g: ConsumerGroupDoc, member_id: str | None, member_epoch: int) -> None:
    """Kafka's `ConsumerGroup.validateOffsetFetch`: without a member (the admin client) any fetch
    goes; a member must exist and fetch in its current epoch."""
    if member_epoch < 0 and member_id is None:
        return
    _check_current(_known(g, member_id or ""), member_epoch)


def _known(g: ConsumerGroupDoc, member_id: str) -> ConsumerMemberDoc:
    m = g.members.get(member_id)
    if m is None:
        raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {g.group_id}")
    return m


def _check_current(m: ConsumerMemberDoc, member_epoch: int) -> None:
    if member_epoch != m.member_epoch:
        raise GroupError(
            GroupErrorKind.ILLEGAL_GENERATION if m.classic else GroupErrorKind.STALE_MEMBER_EPOCH,
            f"member epoch {member_epoch} is not the member's current epoch {m.member_epoch}",
        )
