"""The classic group protocol's state machine alone: no Redis, no event loop, time passed in.

`Group` plays the driver's part: it hands the stored group to each event (a copy, as a fresh load
would be), keeps what a decision saves, and collects the answers to waiting requests by ticket.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TypeVar

import pytest

from gateway.domain.groups.classic import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    Answer,
    ClassicGroup,
    Decision,
    JoinRequest,
    JoinResult,
    Parked,
    SyncRequest,
    SyncResult,
    describe,
)
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.store.groups import GroupDoc

R = TypeVar("R")

PROTO = [("range", b"meta-r"), ("roundrobin", b"meta-rr")]


def request(
    *, session: int = 5000, rebalance: int = 5000, instance: str | None = None, protocols: list[tuple[str, bytes]] = PROTO
) -> JoinRequest:
    return JoinRequest("consumer", protocols, session, rebalance, instance, "c", "/127.0.0.1")


class Group:
    def __init__(self, initial_rebalance_delay: float = 0.0) -> None:
        self.machine = ClassicGroup("g", initial_rebalance_delay=initial_rebalance_delay)
        self.stored: GroupDoc | None = None
        self.now = 0.0
        self.answers: dict[int, Answer] = {}
        self.saves = 0

    def apply(self, event: Callable[[GroupDoc | None, float], Decision[R]]) -> R | Parked:
        decision = event(copy.deepcopy(self.stored), self.now)
        if decision.save:
            assert decision.group is not None
            self.stored = decision.group
            self.saves += 1
        for ticket, answer in decision.answers:
            assert ticket not in self.answers, "a waiting request is answered once"
            self.answers[ticket] = answer
        return decision.reply

    def refused(self, event: Callable[[GroupDoc | None, float], Decision[R]]) -> GroupErrorKind:
        saves = self.saves
        with pytest.raises(GroupError) as exc:
            self.apply(event)
        assert self.saves == saves
        return exc.value.kind

    def answer(self, reply: object) -> Answer | None:
        """What a request got: its reply, or the answer given so far to its ticket."""
        if isinstance(reply, Parked):
            return self.answers.get(reply.ticket)
        assert isinstance(reply, JoinResult | SyncResult)
        return reply

    def join(self, member_id: str = "", req: JoinRequest | None = None, **kw: bool) -> JoinResult | Parked:
        return self.apply(lambda g, now: self.machine.join(g, now, member_id, req or request(), **kw))

    def sync(self, generation: int, member_id: str, assignments: dict[str, bytes] | None = None,
             instance: str | None = None) -> SyncResult | Parked:
        req = SyncRequest(generation, member_id, instance, assignments=assignments)
        return self.apply(lambda g, now: self.machine.sync(g, now, req))

    def heartbeat(self, generation: int, member_id: str, instance: str | None = None) -> None:
        self.apply(lambda g, now: self.machine.heartbeat(g, now, generation, member_id, instance))

    def leave(self, *members: tuple[str, str | None]) -> list[GroupErrorKind | None]:
        reply = self.apply(lambda g, now: self.machine.leave(g, now, list(members)))
        assert isinstance(reply, list)
        return reply

    def expire(self) -> None:
        self.apply(lambda g, now: self.machine.expire(g, now))

    @property
    def state(self) -> str:
        return self.stored.state if self.stored else "Dead"

    def joined(self, reply: object) -> JoinResult:
        r = self.answer(reply)
        assert isinstance(r, JoinResult), r
        return r

    def synced(self, reply: object) -> SyncResult:
        r = self.answer(reply)
        assert isinstance(r, SyncResult), r
        return r

    def stable_one(self, req: JoinRequest | None = None) -> JoinResult:
        a = self.joined(self.join(req=req))
        self.synced(self.sync(a.generation, a.member_id, {a.member_id: b"A1"}))
        return a

    def joined_two(self) -> tuple[JoinResult, JoinResult]:
        """a leads generation 2 with b, which joined after a's first generation; neither synced."""
        a = self.joined(self.join())
        self.sync(a.generation, a.member_id, {a.member_id: b"A1"})
        b_join = self.join()
        a2 = self.joined(self.join(a.member_id))
        return a2, self.joined(b_join)

    def stable_two(self) -> tuple[JoinResult, JoinResult]:
        """a leads generation 2 with b; both synced."""
        a2, b = self.joined_two()
        b_sync = self.sync(2, b.member_id)
        self.sync(2, a2.member_id, {a2.member_id: b"pa", b.member_id: b"pb"})
        assert self.synced(b_sync).assignment == b"pb" and self.state == STABLE
        return a2, b


def kind(answer: Answer | None) -> GroupErrorKind:
    assert isinstance(answer, GroupError), answer
    return answer.kind


def test_a_lone_member_forms_a_generation_and_leads_it() -> None:
    grp = Group()
    parked = grp.join()
    assert isinstance(parked, Parked)  # it waited at the join barrier, which fell at once
    a = grp.joined(parked)
    assert (a.generation, a.leader, a.protocol, a.protocol_type) == (1, a.member_id, "range", "consumer")
    assert [(m.member_id, m.metadata) for m in a.members] == [(a.member_id, b"meta-r")]
    assert grp.state == COMPLETING_REBALANCE
    s = grp.synced(grp.sync(1, a.member_id, {a.member_id: b"mine"}))
    assert s.assignment == b"mine" and grp.state == STABLE
    # once stable, a sync is answered at once
    assert grp.synced(grp.sync(1, a.member_id)).assignment == b"mine"


def test_several_members_join_the_first_leads_and_the_leader_distributes_assignments() -> None:
    grp = Group()
    a = grp.stable_one()
    b_join, c_join = grp.join(), grp.join()
    assert grp.state == PREPARING_REBALANCE
    assert grp.answer(b_join) is None and grp.answer(c_join) is None  # a has not rejoined yet
    assert grp.stored is not None and all(m.assignment == b"" for m in grp.stored.members.values())
    a2 = grp.joined(grp.join(a.member_id))
    b, c = grp.joined(b_join), grp.joined(c_join)
    assert a2.generation == b.generation == c.generation == 2
    assert a2.leader == b.leader == c.leader == a.member_id
    assert [m.member_id for m in a2.members] == [a.member_id, b.member_id, c.member_id]  # join order
    assert b.members == [] and c.members == []
    b_sync, c_sync = grp.sync(2, b.member_id), grp.sync(2, c.member_id)
    assert grp.answer(b_sync) is None and grp.state == COMPLETING_REBALANCE
    mine = grp.synced(grp.sync(2, a.member_id, {a.member_id: b"p0", b.member_id: b"p1", c.member_id: b"p2"}))
    assert (mine.assignment, grp.synced(b_sync).assignment, grp.synced(c_sync).assignment) == (b"p0", b"p1", b"p2")
    assert grp.state == STABLE
    d = describe(grp.stored)
    assert [(m.member_id, m.assignment) for m in d.members] == [
        (a.member_id, b"p0"), (b.member_id, b"p1"), (c.member_id, b"p2"),
    ]


def test_when_the_leader_leaves_the_next_member_in_join_order_leads() -> None:
    grp = Group()
    a, b = grp.stable_two()
    assert grp.leave((a.member_id, None), ("nobody", None)) == [None, GroupErrorKind.UNKNOWN_MEMBER_ID]
    assert grp.state == PREPARING_REBALANCE
    b2 = grp.joined(grp.join(b.member_id))
    assert (b2.generation, b2.leader, [m.member_id for m in b2.members]) == (3, b.member_id, [b.member_id])
    assert grp.leave((b.member_id, None)) == [None]
    assert grp.stored is not None and (grp.state, grp.stored.members, grp.stored.protocol) == (EMPTY, {}, None)


def test_a_heartbeat_during_a_rebalance_says_rejoin_and_an_old_generation_is_illegal() -> None:
    grp = Group()
    a = grp.stable_one()
    grp.heartbeat(1, a.member_id)
    grp.join()
    grp.now = 3.0
    assert grp.refused(lambda g, now: grp.machine.heartbeat(g, now, 1, a.member_id)) is (
        GroupErrorKind.REBALANCE_IN_PROGRESS
    )
    assert grp.machine.sessions[a.member_id] == (3.0, 5.0)  # the heartbeat still kept its session
    assert grp.refused(lambda g, now: grp.machine.heartbeat(g, now, 0, a.member_id)) is (
        GroupErrorKind.ILLEGAL_GENERATION
    )
    assert grp.refused(lambda g, now: grp.machine.heartbeat(g, now, 1, "nobody")) is GroupErrorKind.UNKNOWN_MEMBER_ID


def test_a_silent_member_is_removed_at_its_session_end_and_the_group_rebalances() -> None:
    grp = Group()
    a, b = grp.stable_two()
    assert grp.machine.next_deadline() == 5.0  # both synced at time 0 with 5 s sessions
    grp.now = 4.0
    grp.heartbeat(2, a.member_id)
    assert grp.machine.next_deadline() == 5.0  # b's
    grp.now = 5.0
    grp.expire()
    assert grp.state == PREPARING_REBALANCE and grp.stored is not None and b.member_id not in grp.stored.members
    assert grp.refused(lambda g, now: grp.machine.heartbeat(g, now, 2, a.member_id)) is (
        GroupErrorKind.REBALANCE_IN_PROGRESS
    )
    a3 = grp.joined(grp.join(a.member_id))
    assert (a3.generation, a3.leader, [m.member_id for m in a3.members]) == (3, a.member_id, [a.member_id])
    assert grp.refused(lambda g, now: grp.machine.heartbeat(g, now, 3, b.member_id)) is GroupErrorKind.UNKNOWN_MEMBER_ID


def test_a_member_waiting_at_a_barrier_stays_alive_until_its_client_goes_away() -> None:
    grp = Group()
    a, b = grp.joined_two()
    assert (b.generation, b.leader, grp.state) == (2, a.member_id, COMPLETING_REBALANCE)
    waiting = grp.sync(2, b.member_id)  # the leader has not synced yet
    assert isinstance(waiting, Parked)
    grp.now = 4.0
    grp.heartbeat(2, a.member_id)
    grp.now = 5.0
    assert grp.machine.kept_alive(b.member_id) and grp.machine.next_deadline() == 9.0  # a's session, not b's
    grp.expire()
    assert grp.answer(waiting) is None and grp.state == COMPLETING_REBALANCE
    grp.machine.abandon(waiting.ticket)
    assert not grp.machine.kept_alive(b.member_id) and grp.machine.next_deadline() == 5.0
    grp.expire()
    assert kind(grp.answer(waiting)) is GroupErrorKind.UNKNOWN_MEMBER_ID
    assert grp.stored is not None and list(grp.stored.members) == [a.member_id]
    assert grp.state == PREPARING_REBALANCE


def test_a_follower_waiting_at_the_sync_barrier_learns_that_the_leader_died() -> None:
    grp = Group()
    _, b = grp.joined_two()
    grp.now = 1.0
    waiting = grp.sync(2, b.member_id)
    grp.now = 5.0  # the leader never syncs nor heartbeats
    grp.expire()
    assert kind(grp.answer(waiting)) is GroupErrorKind.REBALANCE_IN_PROGRESS
    b2 = grp.joined(grp.join(b.member_id))
    assert (b2.generation, b2.leader) == (3, b.member_id)


def test_members_that_do_not_rejoin_by_the_rebalance_deadline_are_removed() -> None:
    grp = Group()
    a = grp.stable_one(request(rebalance=400))
    b_join = grp.join(req=request(rebalance=400))  # a's session holds, but it never rejoins
    assert grp.machine.rebalance_deadline == pytest.approx(0.4)
    grp.now = 0.3
    grp.expire()
    assert grp.answer(b_join) is None
    grp.now = 0.4
    grp.expire()
    b = grp.joined(b_join)
    assert (b.generation, b.leader, [m.member_id for m in b.members]) == (2, b.member_id, [b.member_id])
    assert grp.refused(lambda g, now: grp.machine.heartbeat(g, now, 1, a.member_id)) is GroupErrorKind.UNKNOWN_MEMBER_ID


def test_a_newer_join_supersedes_a_waiting_one() -> None:
    grp = Group()
    a, _ = grp.stable_two()
    first = grp.join(a.member_id)
    assert grp.answer(first) is None  # b has not rejoined
    second = grp.join(a.member_id)
    assert kind(grp.answer(first)) is GroupErrorKind.REBALANCE_IN_PROGRESS
    assert grp.answer(second) is None


def test_a_first_join_may_be_asked_for_a_member_id_which_lapses_unused() -> None:
    grp = Group()
    with pytest.raises(GroupError) as exc:
        grp.join(require_known=True)
    assert exc.value.kind is GroupErrorKind.MEMBER_ID_REQUIRED and grp.stored is None
    mid = exc.value.member_id
    assert mid.startswith("c-") and grp.machine.next_deadline() == 5.0
    a = grp.joined(grp.join(mid, require_known=True))
    assert (a.member_id, a.generation) == (mid, 1)
    with pytest.raises(GroupError) as exc:
        grp.join(require_known=True)
    grp.now = 4.0
    grp.heartbeat(1, mid)
    grp.now = 5.0
    grp.expire()
    assert grp.machine.pending == {} and grp.stored is not None and list(grp.stored.members) == [mid]
    assert grp.refused(lambda g, now: grp.machine.join(g, now, exc.value.member_id, request())) is (
        GroupErrorKind.UNKNOWN_MEMBER_ID
    )


def test_a_static_member_back_under_a_new_id_takes_its_place_without_a_rebalance() -> None:
    grp = Group()
    a = grp.stable_one(request(instance="i-1"))
    assert a.member_id.startswith("i-1-")
    back = grp.join(req=request(instance="i-1"))
    assert isinstance(back, JoinResult)  # answered at once: nothing to rebalance
    assert back.member_id != a.member_id
    assert (back.generation, back.leader, back.members) == (1, a.member_id, [])
    assert grp.state == STABLE
    assert grp.synced(grp.sync(1, back.member_id, instance="i-1")).assignment == b"A1"
    assert grp.refused(lambda g, now: grp.machine.heartbeat(g, now, 1, a.member_id, "i-1")) is (
        GroupErrorKind.FENCED_INSTANCE_ID
    )
    grp.heartbeat(1, back.member_id, "i-1")
    assert grp.leave(("", "i-1")) == [None] and grp.state == EMPTY


def test_a_static_member_replaced_while_waiting_is_fenced() -> None:
    grp = Group()
    b = grp.stable_one()
    a_join = grp.join(req=request(instance="i-1"))
    grp.join(b.member_id)
    a = grp.joined(a_join)
    waiting = grp.sync(2, a.member_id, instance="i-1")
    back = grp.join(req=request(instance="i-1"))  # the group is not stable: it rebalances
    assert kind(grp.answer(waiting)) is GroupErrorKind.FENCED_INSTANCE_ID
    assert grp.answer(back) is None and grp.state == PREPARING_REBALANCE
    grp.join(b.member_id)
    r = grp.joined(back)
    assert (r.generation, r.leader) == (3, b.member_id) and r.member_id != a.member_id
    assert grp.stored is not None and list(grp.stored.members) == [b.member_id, r.member_id]


def test_a_static_member_back_with_another_protocol_rebalances() -> None:
    grp = Group()
    grp.stable_one(request(instance="i-1"))
    back = grp.joined(grp.join(req=request(instance="i-1", protocols=[("roundrobin", b"x")])))
    assert (back.generation, back.protocol, back.leader) == (2, "roundrobin", back.member_id)


def test_protocols_the_group_cannot_agree_on_are_refused() -> None:
    grp = Group()
    grp.stable_one()
    assert grp.refused(lambda g, now: grp.machine.join(g, now, "", request(protocols=[("sticky", b"")]))) is (
        GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL
    )
    other = JoinRequest("connect", PROTO, 5000, 5000, None, "c", "")
    assert grp.refused(lambda g, now: grp.machine.join(g, now, "", other)) is (
        GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL
    )


def test_forgetting_the_group_returns_the_waiting_requests_to_fail() -> None:
    grp = Group()
    a = grp.stable_one()
    b_join = grp.join()
    assert isinstance(b_join, Parked)
    assert grp.machine.reset() == [b_join.ticket]
    assert not grp.machine.active and grp.machine.next_deadline() is None and not grp.machine.armed
    assert grp.stored is not None
    b_id = next(m for m in grp.stored.members if m != a.member_id)
    grp.machine.arm(grp.stored, 10.0)  # seen afresh: every member gets a new session and deadline
    assert grp.machine.sessions == {a.member_id: (10.0, 5.0), b_id: (10.0, 5.0)}
    assert grp.machine.rebalance_deadline == 15.0


def test_members_starting_together_share_the_first_generation_after_the_initial_delay() -> None:
    """Kafka's group.initial.rebalance.delay.ms: the first rebalance of an empty group waits the
    delay, and once more for each window in which someone joined."""
    group = Group(initial_rebalance_delay=3.0)
    a_join = group.join(req=request(rebalance=10_000))
    assert group.state == PREPARING_REBALANCE and group.answer(a_join) is None
    group.now = 1.0
    b_join = group.join(req=request(rebalance=10_000))
    group.expire()
    assert group.answer(a_join) is None and group.answer(b_join) is None
    group.now = 3.0  # b joined during the delay: one more delay
    group.expire()
    assert group.answer(a_join) is None and group.machine.next_deadline() == 6.0
    group.now = 6.0
    group.expire()
    a, b = group.joined(a_join), group.joined(b_join)
    assert a.generation == b.generation == 1 and a.leader == b.leader == a.member_id
    assert {m.member_id for m in a.members} == {a.member_id, b.member_id}


def test_a_lone_first_member_waits_the_initial_delay_only() -> None:
    group = Group(initial_rebalance_delay=3.0)
    a_join = group.join(req=request(rebalance=10_000))
    group.now = 2.9
    group.expire()
    assert group.answer(a_join) is None
    group.now = 3.0
    group.expire()
    assert group.joined(a_join).generation == 1 and group.state == COMPLETING_REBALANCE


def test_the_initial_delay_is_capped_by_the_rebalance_timeout() -> None:
    group = Group(initial_rebalance_delay=3.0)
    a_join = group.join(req=request(rebalance=5_000))
    group.now = 1.0
    group.join(req=request(rebalance=5_000))
    group.now = 3.0
    group.expire()  # extended by what is left of the rebalance timeout: 2 s
    assert group.machine.next_deadline() == 5.0
    group.now = 4.0
    c_join = group.join(req=request(rebalance=5_000))
    group.now = 5.0
    group.expire()  # c joined, but the rebalance timeout is spent
    a, c = group.joined(a_join), group.joined(c_join)
    assert a.generation == c.generation == 1 and len(a.members) == 3


def test_only_the_first_rebalance_waits_for_the_initial_delay() -> None:
    group = Group(initial_rebalance_delay=3.0)
    a_join = group.join()
    group.now = 3.0
    group.expire()
    a = group.joined(a_join)
    group.synced(group.sync(a.generation, a.member_id, {a.member_id: b"A1"}))
    b_join = group.join()
    a2 = group.joined(group.join(a.member_id))  # everyone rejoined: no waiting
    assert a2.generation == group.joined(b_join).generation == 2


def test_the_driver_arming_a_group_begun_here_keeps_its_initial_delay() -> None:
    group = Group(initial_rebalance_delay=3.0)
    group.join(req=request(rebalance=300_000))
    assert group.stored is not None
    group.machine.arm(group.stored, 0.5)  # the next event's load: first sight of the stored group
    assert group.machine.next_deadline() == 3.0
