"""Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) as a state machine.

Pure: no Redis, no tasks, no timers. Each event takes the group as stored (a `GroupDoc` the driver
loaded), the time now and the request; it changes the group and this process's view of it, and
returns a `Decision`: the reply to the caller (or a ticket, when the caller waits at the join or
sync barrier), the waiting requests to answer, and whether the group must be saved before anyone is
answered. A refusal raises `GroupError`. `next_deadline` says when to call `expire`.

Kept in process only, as Kafka keeps them in memory: who waits at which barrier, the last
heartbeat of each member, the member ids handed out with MEMBER_ID_REQUIRED and the rebalance
deadline. A stored group first seen here (`arm`) gives every member a fresh session, so a
restarted coordinator lets members carry on or rejoin, as Kafka does on failover.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.store.groups import GroupDoc, MemberDoc

log = logging.getLogger(__name__)

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
STATES = (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD)


@dataclass(frozen=True)
class JoinedMember:
    member_id: str
    instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup answer; `members` is filled for the leader only."""

    generation: int
    protocol_type: str | None
    protocol: str | None
    leader: str
    member_id: str
    members: list[JoinedMember] = field(default_factory=list)


@dataclass(frozen=True)
class SyncResult:
    protocol_type: str | None
    protocol: str | None
    assignment: bytes


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]


@dataclass(frozen=True)
class JoinRequest:
    """What a JoinGroup asks for; the rebalance timeout is already resolved (v0 has none)."""

    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    instance_id: str | None
    client_id: str
    client_host: str

    def member(self, member_id: str) -> MemberDoc:
        return MemberDoc(
            member_id,
            self.instance_id,
            self.client_id,
            self.client_host,
            self.session_timeout_ms,
            self.rebalance_timeout_ms,
            self.protocol_type,
            list(self.protocols),
        )

    def update(self, m: MemberDoc) -> None:
        m.protocols = list(self.protocols)
        m.session_timeout_ms = self.session_timeout_ms
        m.rebalance_timeout_ms = self.rebalance_timeout_ms
        m.client_id, m.client_host = self.client_id, self.client_host


@dataclass(frozen=True)
class SyncRequest:
    """What a SyncGroup asks for; `assignments` (member id -> assignment) come from the leader."""

    generation: int
    member_id: str
    instance_id: str | None = None
    protocol_type: str | None = None
    protocol: str | None = None
    assignments: dict[str, bytes] | None = None


@dataclass(frozen=True)
class Parked:
    """The caller waits at a barrier: a later decision answers `ticket`."""

    ticket: int


Answer = JoinResult | SyncResult | GroupError
R = TypeVar("R")


@dataclass(frozen=True)
class Decision(Generic[R]):
    """One event's outcome. The driver saves `group` when `save`, and only then gives the answers,
    so a client never sees a state the store does not hold."""

    group: GroupDoc | None
    reply: R | Parked
    save: bool
    answers: list[tuple[int, Answer]]


class _Effects:
    def __init__(self) -> None:
        self.save = False
        self.answers: list[tuple[int, Answer]] = []

    def answer(self, ticket: int, result: Answer) -> None:
        self.answers.append((ticket, result))

    def decide(self, g: GroupDoc | None, reply: R | Parked) -> Decision[R]:
        return Decision(g, reply, self.save, self.answers)


class ClassicGroup:
    """This process's side of one classic group, and the transitions of its stored side."""

    def __init__(self, group_id: str, *, initial_rebalance_delay: float = 0.0) -> None:
        self.group_id = group_id
        self.initial_rebalance_delay = initial_rebalance_delay  # seconds
        self.sessions: dict[str, tuple[float, float]] = {}  # member id -> last seen, session
        self.pending: dict[str, float] = {}  # member id handed out -> expiry
        self.joining: dict[str, int] = {}  # member id -> ticket waiting at the join barrier
        self.syncing: dict[str, int] = {}  # member id -> ticket waiting at the sync barrier
        self.abandoned: set[int] = set()  # waiting tickets whose client went away
        self.rebalance_deadline: float | None = None
        # the first rebalance of an empty group, while it waits for more members (see `_initial`)
        self.initial_remaining: float | None = None
        self.new_member_added = False
        self.armed = False
        self._tickets = itertools.count(1)

    # -- what the driver asks -------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether this process holds anything of the group's members."""
        return bool(self.sessions or self.joining or self.syncing)

    def next_deadline(self) -> float | None:
        """When `expire` has something to do: an id handed out lapses, the rebalance deadline, or
        a member's session ends."""
        candidates = list(self.pending.values())
        if self.rebalance_deadline is not None:
            candidates.append(self.rebalance_deadline)
        candidates += [t + s for mid, (t, s) in self.sessions.items() if not self.kept_alive(mid)]
        return min(candidates) if candidates else None

    def kept_alive(self, member_id: str) -> bool:
        """A member waiting at a barrier is alive (Kafka's rule): the join barrier has its own
        deadline, and the sync barrier falls when the leader syncs or its own session ends."""
        return any(
            t is not None and t not in self.abandoned
            for t in (self.joining.get(member_id), self.syncing.get(member_id))
        )

    def arm(self, g: GroupDoc, now: float) -> None:
        """First sight of a stored group in this process: every member gets a fresh session."""
        if self.armed:
            return
        self.armed = True
        for m in g.members.values():
            self.sessions[m.member_id] = (now, m.session_timeout_ms / 1000)
        if g.state == PREPARING_REBALANCE and self.rebalance_deadline is None:  # not one begun here
            self.rebalance_deadline = now + _rebalance_timeout(g)

    def seen(self, member_id: str, now: float) -> None:
        """A member showed it is alive other than by heartbeat (an offset commit)."""
        if member_id in self.sessions:
            _, session = self.sessions[member_id]
            self.sessions[member_id] = (now, session)

    def abandon(self, ticket: int) -> None:
        """A waiting request's client went away: it no longer keeps its member alive, though the
        member still counts as having joined."""
        if ticket in self.joining.values() or ticket in self.syncing.values():
            self.abandoned.add(ticket)

    def reset(self) -> list[int]:
        """Forget this process's view of the group; returns the waiting tickets, to fail."""
        tickets = [*self.joining.values(), *self.syncing.values()]
        self.joining.clear()
        self.syncing.clear()
        self.abandoned.clear()
        self.sessions.clear()
        self.pending.clear()
        self.rebalance_deadline = None
        self.initial_remaining = None
        self.armed = False
        return tickets

    def deleted(self) -> None:
        """The group is gone from the store: ids handed out lapse, and a new one is armed afresh."""
        self.pending.clear()
        self.armed = False

    # -- JoinGroup ------------------------------------------------------------------------------

    def join(
        self, g: GroupDoc | None, now: float, member_id: str, req: JoinRequest, *, require_known: bool = False
    ) -> Decision[JoinResult]:
        """Join (or rejoin); the caller waits at the join barrier unless nothing changes. With
        `require_known` (v4+, dynamic members) a first join is refused with MEMBER_ID_REQUIRED
        carrying the id to come back with."""
        fx = _Effects()
        if g is None:
            if member_id and member_id not in self.pending:
                raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
            g = GroupDoc(self.group_id)
        if not req.protocol_type or not req.protocols:
            raise GroupError(GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL, "no protocol type or protocols")
        if g.members and (
            g.protocol_type != req.protocol_type or not _candidates(g) & {n for n, _ in req.protocols}
        ):
            raise GroupError(GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL, "no protocol in common with the group")
        if not g.members:
            g.protocol_type = req.protocol_type
        if not member_id:
            return fx.decide(g, self._join_unknown(g, now, req, fx, require_known))
        return fx.decide(g, self._join_known(g, now, member_id, req, fx))

    def _join_unknown(
        self, g: GroupDoc, now: float, req: JoinRequest, fx: _Effects, require_known: bool
    ) -> JoinResult | Parked:
        new_id = f"{req.instance_id or req.client_id or 'member'}-{uuid.uuid4()}"
        if req.instance_id:
            old_id = g.instance_owner(req.instance_id)
            if old_id is not None:
                return self._replace_static(g, now, old_id, new_id, req, fx)
        elif require_known:
            self.pending[new_id] = now + req.session_timeout_ms / 1000
            raise GroupError(GroupErrorKind.MEMBER_ID_REQUIRED, member_id=new_id)
        return self._add_member(g, now, req.member(new_id), fx)

    def _join_known(
        self, g: GroupDoc, now: float, member_id: str, req: JoinRequest, fx: _Effects
    ) -> JoinResult | Parked:
        if member_id in self.pending and member_id not in g.members:
            del self.pending[member_id]
            return self._add_member(g, now, req.member(member_id), fx)
        if req.instance_id and g.instance_owner(req.instance_id) is None:
            raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
        m = _check_member(g, member_id, req.instance_id)
        if g.state == PREPARING_REBALANCE:
            return self._update_and_rebalance(g, now, m, req, fx)
        if g.state == COMPLETING_REBALANCE:
            if m.protocols == req.protocols:
                self._touch(m, now)
                return _current(g, member_id)
            return self._update_and_rebalance(g, now, m, req, fx)
        if g.state == STABLE:
            if member_id == g.leader or m.protocols != req.protocols:
                return self._update_and_rebalance(g, now, m, req, fx)
            self._touch(m, now)
            return _current(g, member_id)
        raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)

    def _replace_static(
        self, g: GroupDoc, now: float, old_id: str, new_id: str, req: JoinRequest, fx: _Effects
    ) -> JoinResult | Parked:
        """A static member came back under a new member id: the old id is fenced, the slot kept."""
        old = g.members.pop(old_id)
        old_leader = g.leader
        m = req.member(new_id)
        m.assignment, m.seq = old.assignment, old.seq
        # keep join order: the replacement takes the old member's place
        g.members[new_id] = m
        g.members = dict(sorted(g.members.items(), key=lambda kv: kv[1].seq))
        if g.leader == old_id:
            g.leader = new_id
        self.sessions.pop(old_id, None)
        self._unpark_answering(old_id, GroupError(GroupErrorKind.FENCED_INSTANCE_ID), fx)
        self._touch(m, now)
        fx.save = True
        log.info("group %s: static member %s is back as %s", g.group_id, req.instance_id, new_id)
        if g.state == STABLE and _select_protocol(g) == g.protocol:
            # answer with the old leader id, so a returning leader does not reassign a stable group
            return _current(g, new_id, leader=old_leader)
        return self._park_and_rebalance(g, now, m, fx)

    def _add_member(self, g: GroupDoc, now: float, m: MemberDoc, fx: _Effects) -> Parked:
        if self.initial_remaining is not None:
            self.new_member_added = True  # Kafka's ClassicGroup.add, while the first rebalance waits
        m.seq = g.next_seq
        g.next_seq += 1
        g.members[m.member_id] = m
        if g.leader is None:
            g.leader = m.member_id
        self._touch(m, now)
        return self._park_and_rebalance(g, now, m, fx)

    def _update_and_rebalance(self, g: GroupDoc, now: float, m: MemberDoc, req: JoinRequest, fx: _Effects) -> Parked:
        req.update(m)
        self._touch(m, now)
        return self._park_and_rebalance(g, now, m, fx)

    def _park_and_rebalance(self, g: GroupDoc, now: float, m: MemberDoc, fx: _Effects) -> Parked:
        parked = self._park(self.joining, m.member_id, "JoinGroup", fx)
        if g.state != PREPARING_REBALANCE:
            self._prepare_rebalance(g, now, fx)
        fx.save = True
        self._try_complete_join(g, now, fx)
        return parked

    # -- SyncGroup ------------------------------------------------------------------------------

    def sync(self, g: GroupDoc | None, now: float, req: SyncRequest) -> Decision[SyncResult]:
        """The member's assignment for its generation; followers wait until the leader syncs."""
        fx = _Effects()
        if g is None:
            raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
        member_id = req.member_id
        m = _check_member(g, member_id, req.instance_id)
        if req.generation != g.generation:
            raise GroupError(GroupErrorKind.ILLEGAL_GENERATION)
        if (req.protocol_type and req.protocol_type != g.protocol_type) or (req.protocol and req.protocol != g.protocol):
            raise GroupError(GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL)
        if g.state == PREPARING_REBALANCE:
            raise GroupError(GroupErrorKind.REBALANCE_IN_PROGRESS)
        self._touch(m, now)
        if g.state == STABLE:
            return fx.decide(g, SyncResult(g.protocol_type, g.protocol, m.assignment))
        if g.state != COMPLETING_REBALANCE:
            raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
        parked = self._park(self.syncing, member_id, "SyncGroup", fx)
        if member_id == g.leader:
            given = req.assignments or {}
            for other in g.members.values():
                other.assignment = given.get(other.member_id, b"")
            g.state = STABLE
            fx.save = True
            for mid, ticket in self._release(self.syncing):
                fx.answer(ticket, SyncResult(g.protocol_type, g.protocol, g.members[mid].assignment))
            log.info("group %s: generation %d stable", g.group_id, g.generation)
        return fx.decide(g, parked)

    # -- Heartbeat, LeaveGroup, timers ----------------------------------------------------------

    def heartbeat(
        self, g: GroupDoc | None, now: float, generation: int, member_id: str, instance_id: str | None = None
    ) -> Decision[None]:
        """Keep the member's session; REBALANCE_IN_PROGRESS when it must rejoin."""
        if g is None or g.state == EMPTY:
            raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
        m = _check_member(g, member_id, instance_id)
        if generation != g.generation:
            raise GroupError(GroupErrorKind.ILLEGAL_GENERATION)
        self._touch(m, now)
        if g.state == PREPARING_REBALANCE:
            raise GroupError(GroupErrorKind.REBALANCE_IN_PROGRESS)
        return _Effects().decide(g, None)

    def leave(
        self, g: GroupDoc | None, now: float, members: list[tuple[str, str | None]]
    ) -> Decision[list[GroupErrorKind | None]]:
        """Remove members (member id, instance id); one outcome per member, None when it left."""
        fx = _Effects()
        outcomes: list[GroupErrorKind | None] = []
        for member_id, instance_id in members:
            try:
                if g is None:
                    raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
                leaving = member_id
                if instance_id:
                    owner = g.instance_owner(instance_id)
                    if owner is None:
                        raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
                    if member_id and owner != member_id:
                        raise GroupError(GroupErrorKind.FENCED_INSTANCE_ID)
                    leaving = owner
                elif member_id in self.pending:
                    del self.pending[member_id]
                    outcomes.append(None)
                    self._try_complete_join(g, now, fx)
                    continue
                if leaving not in g.members:
                    raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
                log.info("group %s: member %s left", g.group_id, leaving)
                self._remove_and_rebalance(g, now, leaving, fx)
                outcomes.append(None)
            except GroupError as exc:
                outcomes.append(exc.kind)
        return fx.decide(g, outcomes)

    def expire(self, g: GroupDoc | None, now: float) -> Decision[None]:
        """What is due at `now`: ids handed out lapse, silent members go, the join barrier falls at
        the rebalance deadline."""
        fx = _Effects()
        for mid, until in list(self.pending.items()):
            if until <= now:
                del self.pending[mid]
        if g is None:
            self.sessions.clear()
            self.rebalance_deadline = None
            return fx.decide(None, None)
        for mid, (seen, session) in list(self.sessions.items()):
            if mid not in g.members:
                del self.sessions[mid]
            elif seen + session <= now and not self.kept_alive(mid):
                log.info("group %s: member %s missed its session timeout; removed", g.group_id, mid)
                self._remove_and_rebalance(g, now, mid, fx)
        if g.state == PREPARING_REBALANCE:
            due = self.rebalance_deadline is not None and self.rebalance_deadline <= now
            if not (due and self.initial_remaining is not None and self._extend_initial(now)):
                self._try_complete_join(g, now, fx, deadline=due)
        return fx.decide(g, None)

    # -- the transitions ------------------------------------------------------------------------

    def _touch(self, m: MemberDoc, now: float) -> None:
        self.sessions[m.member_id] = (now, m.session_timeout_ms / 1000)

    def _park(self, waiting: dict[str, int], member_id: str, request: str, fx: _Effects) -> Parked:
        old = self._unpark(waiting, member_id)
        if old is not None:
            fx.answer(old, GroupError(GroupErrorKind.REBALANCE_IN_PROGRESS, f"superseded by a newer {request}"))
        ticket = next(self._tickets)
        waiting[member_id] = ticket
        return Parked(ticket)

    def _unpark(self, waiting: dict[str, int], member_id: str) -> int | None:
        ticket = waiting.pop(member_id, None)
        if ticket is not None:
            self.abandoned.discard(ticket)
        return ticket

    def _unpark_answering(self, member_id: str, error: GroupError, fx: _Effects) -> None:
        """Whoever waits for `member_id` at either barrier gets `error`."""
        for waiting in (self.joining, self.syncing):
            ticket = self._unpark(waiting, member_id)
            if ticket is not None:
                fx.answer(ticket, error)

    def _release(self, waiting: dict[str, int]) -> list[tuple[str, int]]:
        """Everyone waiting at a barrier, now let through."""
        released = list(waiting.items())
        for _, ticket in released:
            self.abandoned.discard(ticket)
        waiting.clear()
        return released

    def _prepare_rebalance(self, g: GroupDoc, now: float, fx: _Effects) -> None:
        if g.state == COMPLETING_REBALANCE:
            for _, ticket in self._release(self.syncing):
                fx.answer(ticket, GroupError(GroupErrorKind.REBALANCE_IN_PROGRESS))
        for m in g.members.values():
            m.assignment = b""
        if g.state == EMPTY and self.initial_rebalance_delay > 0:
            self._initial(g, now)
        else:
            self.rebalance_deadline = now + _rebalance_timeout(g)
        g.state = PREPARING_REBALANCE
        fx.save = True

    def _initial(self, g: GroupDoc, now: float) -> None:
        """The first rebalance of an empty group waits `initial_rebalance_delay` (Kafka's
        group.initial.rebalance.delay.ms) so that members starting together share the first
        generation, rather than each one's arrival forcing another: Kafka's
        GroupMetadataManager.prepareRebalance schedules tryCompleteInitialRebalanceElseSchedule
        after the delay, with the rest of the group's rebalance timeout to extend it by."""
        self.initial_remaining = max(_rebalance_timeout(g) - self.initial_rebalance_delay, 0.0)
        self.new_member_added = False
        self.rebalance_deadline = now + self.initial_rebalance_delay

    def _extend_initial(self, now: float) -> bool:
        """The initial delay ran out: when a member joined during it and the rebalance timeout
        leaves time, wait once more (the delay, or what is left of the timeout) and say so; else
        the join completes (Kafka's tryCompleteInitialRebalanceElseSchedule)."""
        remaining = self.initial_remaining
        if not self.new_member_added or not remaining:
            return False
        self.new_member_added = False
        self.initial_remaining = max(remaining - self.initial_rebalance_delay, 0.0)
        self.rebalance_deadline = now + min(self.initial_rebalance_delay, remaining)
        return True

    def _try_complete_join(self, g: GroupDoc, now: float, fx: _Effects, *, deadline: bool = False) -> None:
        """The join barrier falls when every member has rejoined, or at the deadline; the first
        rebalance of an empty group falls at its delay's end only (Kafka's
        GroupMetadataManager.maybeCompleteJoinPhase: not while the previous state was Empty)."""
        if g.state != PREPARING_REBALANCE:
            return
        if not deadline:
            if self.pending or self.initial_remaining is not None:
                return
            if any(mid not in self.joining for mid in g.members):
                return
        self._complete_join(g, now, fx)

    def _complete_join(self, g: GroupDoc, now: float, fx: _Effects) -> None:
        """The join barrier falls: members that did not rejoin are out, a new generation starts."""
        for mid in [mid for mid in g.members if mid not in self.joining]:
            log.info("group %s: member %s did not rejoin in time; removed", g.group_id, mid)
            self._drop(g, mid, fx)
        g.generation += 1
        self.rebalance_deadline = None
        self.initial_remaining = None
        fx.save = True
        if not g.members:
            g.state, g.protocol, g.leader = EMPTY, None, None
            return
        g.protocol = _select_protocol(g)
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = COMPLETING_REBALANCE
        everyone = [JoinedMember(m.member_id, m.instance_id, m.metadata(g.protocol)) for m in g.members.values()]
        for mid, ticket in self._release(self.joining):
            fx.answer(
                ticket,
                JoinResult(
                    g.generation, g.protocol_type, g.protocol, g.leader, mid, everyone if mid == g.leader else []
                ),
            )
            self._touch(g.members[mid], now)
        log.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            g.group_id, g.generation, len(g.members), g.protocol, g.leader,
        )

    def _drop(self, g: GroupDoc, member_id: str, fx: _Effects) -> None:
        """Remove a member; whoever waits for it learns it is gone."""
        g.members.pop(member_id, None)
        self.sessions.pop(member_id, None)
        self._unpark_answering(member_id, GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID), fx)
        if g.leader == member_id:
            g.leader = next(iter(g.members), None)
        fx.save = True

    def _remove_and_rebalance(self, g: GroupDoc, now: float, member_id: str, fx: _Effects) -> None:
        self._drop(g, member_id, fx)
        if g.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(g, now, fx)
        self._try_complete_join(g, now, fx)


def describe(g: GroupDoc) -> GroupDescription:
    """DescribeGroups' view: metadata and assignments only once the group is stable."""
    stable = g.state == STABLE
    return GroupDescription(
        g.group_id,
        g.state,
        g.protocol_type or "",
        g.protocol or "" if g.state in (STABLE, COMPLETING_REBALANCE) else "",
        [
            MemberDescription(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.metadata(g.protocol) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in g.members.values()
        ],
    )


def _rebalance_timeout(g: GroupDoc) -> float:
    return max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000


def _check_member(g: GroupDoc, member_id: str, instance_id: str | None) -> MemberDoc:
    if instance_id:
        owner = g.instance_owner(instance_id)
        if owner is not None and owner != member_id:
            raise GroupError(GroupErrorKind.FENCED_INSTANCE_ID, f"instance {instance_id} has a newer member")
    m = g.members.get(member_id)
    if m is None:
        raise GroupError(GroupErrorKind.UNKNOWN_MEMBER_ID)
    return m


def _candidates(g: GroupDoc) -> set[str]:
    sets = [{n for n, _ in m.protocols} for m in g.members.values()]
    return set.intersection(*sets) if sets else set()


def _select_protocol(g: GroupDoc) -> str:
    """Each member votes for its most preferred protocol that every member supports."""
    candidates = _candidates(g)
    votes: dict[str, int] = {}
    for m in g.members.values():
        choice = next(n for n, _ in m.protocols if n in candidates)
        votes[choice] = votes.get(choice, 0) + 1
    return max(votes, key=lambda p: votes[p])


def _current(g: GroupDoc, member_id: str, leader: str | None = None) -> JoinResult:
    """The present generation, for a member whose join changes nothing."""
    leader = leader or g.leader or ""
    members = (
        [JoinedMember(m.member_id, m.instance_id, m.metadata(g.protocol)) for m in g.members.values()]
        if member_id == leader
        else []
    )
    return JoinResult(g.generation, g.protocol_type, g.protocol, leader, member_id, members)
