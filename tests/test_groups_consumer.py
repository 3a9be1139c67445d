"""KIP-848's consumer group protocol alone: the state machine (consumer.py), the assignors and the
topic regex dialect, with no Redis and no event loop; time is passed in.

`Coordinator` plays the driver: it hands the stored group to each event (a deep copy, as a fresh
load would be), keeps it only when the step says to save, and checks that a step which does not
save changed nothing. `Consumer` plays a client that obeys its assignment at once: it drops the
partitions a response takes away and reports what it owns on every heartbeat. After every single
heartbeat or expiry the tests check that no partition is owned by two live consumers, nor held
(assigned or pending revocation) by two members in the coordinator.
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from dataclasses import dataclass, field

import pytest

from gateway.domain.groups.assignors import ASSIGNORS, MemberSpec, RangeAssignor, UniformAssignor
from gateway.domain.groups.consumer import (
    ConsumerGroup,
    ConsumerGroupConfig,
    GroupState,
    HeartbeatRequest,
    HeartbeatResult,
    MemberState,
    describe,
    group_state,
    owners,
    validate_offset_commit,
    validate_offset_fetch,
)
from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.topic_regex import matching, translate
from gateway.store.consumer_groups import Assignment, ConsumerGroupDoc, ConsumerMemberDoc

SESSION_MS = 10_000
REBALANCE_MS = 30_000


class Coordinator:
    def __init__(self, topics: dict[str, int], *, session_timeout_ms: int = SESSION_MS, max_size: int = 1000) -> None:
        self.topics = dict(topics)
        self.config = ConsumerGroupConfig(session_timeout_ms=session_timeout_ms, max_size=max_size)
        self.group = ConsumerGroup("g", self.config)
        self.doc: ConsumerGroupDoc | None = None
        self.now = 0.0
        self.consumers: list[Consumer] = []

    def heartbeat(self, req: HeartbeatRequest, api_version: int = 1) -> HeartbeatResult:
        before = copy.deepcopy(self.doc)
        step = self.group.heartbeat(copy.deepcopy(self.doc), self.now, req, self.topics, api_version=api_version)
        self._keep(before, step.group, step.save)
        return step.reply

    def expire(self) -> None:
        before = copy.deepcopy(self.doc)
        step = self.group.expire(copy.deepcopy(self.doc), self.now)
        self._keep(before, step.group, step.save)
        self.check()

    def _keep(self, before: ConsumerGroupDoc | None, after: ConsumerGroupDoc | None, save: bool) -> None:
        if save:
            self.doc = after
        else:
            assert after == before, "a step that changed the group must say so"

    def join(self, name: str, topics: list[str] | None = None, **kw: object) -> Consumer:
        """A consumer subscribing to `topics` (all of them when neither they nor a regex are given)."""
        names = topics if topics is not None or "regex" in kw else sorted(self.topics)
        c = Consumer(self, name, names, **kw)  # type: ignore[arg-type]
        self.consumers.append(c)
        c.heartbeat()
        return c

    def check(self) -> None:
        """No partition owned twice: by the live consumers, nor held twice in the coordinator."""
        seen: Counter[tuple[str, int]] = Counter()
        for c in self.consumers:
            if c.alive:
                seen.update((t, p) for t, ps in c.owned.items() for p in ps)
        assert not [tp for tp, n in seen.items() if n > 1], "a partition is owned by two consumers"
        held: Counter[tuple[str, int]] = Counter()
        for m in (self.doc.members.values() if self.doc else []):
            for a in (m.assigned, m.pending_revocation):
                held.update((t, p) for t, ps in a.items() for p in ps)
        assert not [tp for tp, n in held.items() if n > 1], "a partition is held by two members"

    def settle(self, rounds: int = 20, rng: random.Random | None = None) -> None:
        """Heartbeat every live consumer, in random order when `rng`, until the group is stable."""
        for _ in range(rounds):
            live = [c for c in self.consumers if c.alive]
            if rng is not None:
                rng.shuffle(live)
            for c in live:
                c.heartbeat()
            if group_state(self.doc) == GroupState.STABLE and all(c.owned == c.assigned() for c in live):
                return
        raise AssertionError(f"the group did not settle: {group_state(self.doc)}")

    def state(self, c: Consumer) -> str:
        assert self.doc is not None
        return self.doc.members[c.member_id].state


@dataclass
class Consumer:
    coordinator: Coordinator
    member_id: str
    topics: list[str] | None
    regex: str | None = None
    instance_id: str | None = None
    assignor: str | None = None
    epoch: int = 0
    owned: Assignment = field(default_factory=dict)
    alive: bool = True
    revokes: bool = True  # False: keeps consuming what it is told to give up
    terse: bool = False  # True: reports what it owns only when that changed, as the Java client does
    reported: Assignment | None = None

    def request(self) -> HeartbeatRequest:
        joining = self.epoch == 0
        return HeartbeatRequest(
            self.member_id,
            self.epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=REBALANCE_MS if joining else -1,
            subscribed_topics=self.topics if joining else None,
            subscribed_regex=self.regex if joining else None,
            server_assignor=self.assignor if joining else None,
            owned={} if joining else None if self.terse and self.owned == self.reported else dict(self.owned),
        )

    def heartbeat(self) -> HeartbeatResult:
        req = self.request()
        res = self.coordinator.heartbeat(req)
        if req.owned is not None:
            self.reported = req.owned
        self.epoch = res.member_epoch
        if res.assignment is not None:
            if self.revokes:
                self.owned = dict(res.assignment)
            else:  # takes what it is given, gives nothing back
                self.owned = {
                    t: self.owned.get(t, frozenset()) | res.assignment.get(t, frozenset())
                    for t in set(self.owned) | set(res.assignment)
                }
        self.coordinator.check()
        return res

    def leave(self, epoch: int = -1) -> HeartbeatResult:
        res = self.coordinator.heartbeat(HeartbeatRequest(self.member_id, epoch, instance_id=self.instance_id))
        self.alive = False
        self.owned = {}
        self.coordinator.check()
        return res

    def assigned(self) -> Assignment:
        doc = self.coordinator.doc
        assert doc is not None
        return doc.members[self.member_id].assigned

    def count(self) -> int:
        return sum(len(ps) for ps in self.owned.values())


def parts(**topics: list[int]) -> Assignment:
    return {t: frozenset(ps) for t, ps in topics.items()}


class refused:  # a condition, read as `with refused(UNKNOWN_MEMBER_ID):`
    """The block must raise GroupError of `kind`."""

    def __init__(self, kind: GroupErrorKind) -> None:
        self.kind = kind

    def __enter__(self) -> None:
        return None

    def __exit__(self, tp: object, exc: BaseException | None, tb: object) -> bool:
        assert isinstance(exc, GroupError), f"expected {self.kind.name}, got {exc!r}"
        assert exc.kind == self.kind, f"expected {self.kind.name}, got {exc.kind.name}: {exc}"
        return True


# -- joining and reconciling ----------------------------------------------------------------------


def test_a_first_member_gets_every_partition_at_a_new_epoch() -> None:
    co = Coordinator({"t": 4})
    a = co.join("a")
    assert a.epoch == 2, "a new group's first epoch is 2 (KAFKA-20268)"
    assert a.owned == parts(t=[0, 1, 2, 3])
    assert group_state(co.doc) == GroupState.STABLE
    res = a.heartbeat()
    assert res.assignment is None, "an unchanged assignment is not sent again"
    assert res.heartbeat_interval_ms == 5000
    assert co.doc is not None
    d = describe(co.doc, co.group.assignor(co.doc))
    assert (d.state, d.group_epoch, d.assignment_epoch, d.assignor) == ("Stable", 2, 2, "uniform")
    assert d.members[0].assignment == d.members[0].target_assignment == parts(t=[0, 1, 2, 3])


def test_a_partition_moves_only_after_its_owner_revoked_it() -> None:
    co = Coordinator({"t": 4})
    a = co.join("a")
    b = co.join("b")
    assert b.epoch == 3 and b.owned == {}, "b waits: a still owns everything"
    assert co.state(b) == MemberState.UNRELEASED_PARTITIONS
    res = a.heartbeat()
    assert res.member_epoch == 2, "a keeps its epoch while it revokes"
    assert co.state(a) == MemberState.UNREVOKED_PARTITIONS
    assert a.count() == 2
    b.heartbeat()
    assert b.owned == {}, "a has not acknowledged the revocation yet"
    a.heartbeat()  # a reports it no longer owns them
    assert a.epoch == 3 and co.state(a) == MemberState.STABLE
    b.heartbeat()
    assert b.count() == 2 and co.state(b) == MemberState.STABLE
    assert group_state(co.doc) == GroupState.STABLE


@pytest.mark.parametrize("seed", range(12))
def test_members_coming_and_going_in_any_order_never_share_a_partition(seed: int) -> None:
    rng = random.Random(seed)
    co = Coordinator({"a": 5, "b": 3, "c": 7})
    names = iter(f"m{i}" for i in range(100))
    co.join(next(names))
    for _ in range(25):
        live = [c for c in co.consumers if c.alive]
        roll = rng.random()
        if roll < 0.2 and len(live) < 6:
            co.join(next(names), rng.sample(sorted(co.topics), rng.randint(1, 3)), terse=rng.random() < 0.5)
        elif roll < 0.3 and len(live) > 1:
            rng.choice(live).leave()
        else:
            for c in rng.sample(live, rng.randint(1, len(live))):
                c.heartbeat()
    co.settle(rng=rng)
    live = [c for c in co.consumers if c.alive]
    union: set[tuple[str, int]] = set()
    for c in live:
        union |= {(t, p) for t, ps in c.owned.items() for p in ps}
    subscribed = {t for c in live for t in c.topics or []}
    assert union == {(t, p) for t in subscribed for p in range(co.topics[t])}, "every subscribed partition is owned"


def test_a_member_leaving_hands_its_partitions_over() -> None:
    co = Coordinator({"t": 6})
    a, b, c = co.join("a"), co.join("b"), co.join("c")
    co.settle()
    res = b.leave()
    assert res.member_epoch == -1
    co.settle()
    assert a.count() + c.count() == 6 and {a.count(), c.count()} == {3}
    with refused(GroupErrorKind.UNKNOWN_MEMBER_ID):
        co.heartbeat(b.request())


def test_a_silent_member_is_fenced_when_its_session_ends() -> None:
    co = Coordinator({"t": 4})
    a, b = co.join("a"), co.join("b")
    co.settle()
    epoch = co.doc.group_epoch if co.doc else 0
    co.now = 6.0
    a.heartbeat()
    co.expire()
    assert co.doc is not None and "b" in co.doc.members, "b's session has not ended yet"
    co.now = SESSION_MS / 1000 + 0.5
    assert co.group.next_deadline() == pytest.approx(SESSION_MS / 1000)
    co.expire()
    b.alive = False
    assert "b" not in co.doc.members and co.doc.group_epoch == epoch + 1
    co.settle()
    assert a.count() == 4
    with refused(GroupErrorKind.UNKNOWN_MEMBER_ID):
        co.heartbeat(b.request())


def test_a_member_that_does_not_revoke_is_fenced_at_its_rebalance_timeout() -> None:
    co = Coordinator({"t": 4}, session_timeout_ms=60_000)
    a = co.join("a")
    a.revokes = False
    b = co.join("b")
    for t in (1.0, 10.0, 20.0):
        co.now = t
        a.heartbeat()
        b.heartbeat()
        co.expire()
        assert b.owned == {}, "nothing is given while a still owns it"
    assert co.state(a) == MemberState.UNREVOKED_PARTITIONS
    co.now = 1.0 + REBALANCE_MS / 1000  # a was asked to revoke at t=1
    co.expire()
    a.alive = False
    assert co.doc is not None and "a" not in co.doc.members
    with refused(GroupErrorKind.UNKNOWN_MEMBER_ID):
        co.heartbeat(a.request())
    with refused(GroupErrorKind.UNKNOWN_MEMBER_ID):
        validate_offset_commit(co.doc, "a", a.epoch)
    co.settle()
    assert b.count() == 4


def test_a_lost_response_is_forgiven_but_a_wrong_epoch_fences() -> None:
    co = Coordinator({"t": 2})
    a = co.join("a")
    co.join("b")
    a.heartbeat()  # revokes one partition
    a.heartbeat()  # epoch 3 now; suppose this response was lost: a retries with epoch 2
    assert co.doc is not None and co.doc.members["a"].member_epoch == 3
    res = co.heartbeat(HeartbeatRequest("a", 2, owned=dict(a.owned)))
    assert res.member_epoch == 3
    with refused(GroupErrorKind.FENCED_MEMBER_EPOCH):
        co.heartbeat(HeartbeatRequest("a", 2, owned=parts(t=[0, 1])))  # owns more than it has
    with refused(GroupErrorKind.FENCED_MEMBER_EPOCH):
        co.heartbeat(HeartbeatRequest("a", 4, owned=dict(a.owned)))
    with refused(GroupErrorKind.FENCED_MEMBER_EPOCH):
        co.heartbeat(HeartbeatRequest("b", 7))
    # a fenced client lets go of everything and rejoins with epoch 0 under the same id
    res = co.heartbeat(HeartbeatRequest("a", 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topics=["t"], owned={}))
    assert res.member_epoch == 3 and res.assignment == co.doc.members["a"].assigned


# -- static membership --------------------------------------------------------------------------


def test_a_static_member_coming_back_keeps_its_assignment_without_a_rebalance() -> None:
    co = Coordinator({"t": 6})
    s1 = co.join("s1-a", instance_id="i1")
    s2 = co.join("s2", instance_id="i2")
    co.settle()
    mine = dict(s1.owned)
    epoch = co.doc.group_epoch if co.doc else 0
    assert s1.leave(-2).member_epoch == -2
    s2.heartbeat()
    assert s2.count() == 3, "the partitions of a static member that left stay its own"
    with refused(GroupErrorKind.UNRELEASED_INSTANCE_ID):
        co.heartbeat(Consumer(co, "intruder", ["t"], instance_id="i2").request())
    back = co.join("s1-b", instance_id="i1")
    assert back.owned == mine and co.doc is not None and co.doc.group_epoch == epoch
    assert "s1-a" not in co.doc.members
    with refused(GroupErrorKind.FENCED_INSTANCE_ID):
        co.heartbeat(HeartbeatRequest("s1-a", 3, instance_id="i1"))
    co.settle()
    assert back.owned == mine


def test_a_static_member_that_does_not_come_back_is_removed_at_its_session_end() -> None:
    co = Coordinator({"t": 4})
    s1, s2 = co.join("s1", instance_id="i1"), co.join("s2", instance_id="i2")
    co.settle()
    s1.leave(-2)
    co.now = SESSION_MS / 1000 - 1
    s2.heartbeat()
    co.now = SESSION_MS / 1000 + 1
    co.expire()
    assert co.doc is not None and list(co.doc.members) == ["s2"]
    co.settle()
    assert s2.count() == 4


# -- subscriptions --------------------------------------------------------------------------------


def test_a_regex_subscription_gains_a_topic_created_later() -> None:
    """Kafka resolves regexes off the heartbeat that brings them (GroupMetadataManager's
    maybeUpdateRegularExpressions): literal topics come in the first answer, a regex's matches in a
    later heartbeat, and a topic created later once the last refresh is 10 s old."""
    co = Coordinator({"orders-eu": 2, "audit": 1})
    b = co.join("b", ["audit"])
    a = co.join("a", None, regex="orders-.*")
    assert (a.owned, b.owned) == ({}, parts(audit=[0]))
    assert co.doc is not None and co.doc.regexes == {}
    b.heartbeat()  # any member's heartbeat lands the resolution; the epoch moves
    a.heartbeat()
    assert a.owned == parts(**{"orders-eu": [0, 1]})
    co.topics["orders-us"] = 3
    co.topics["orders"] = 1  # the whole name must match: "orders" is not "orders-.*"
    co.now += 5
    a.heartbeat()
    a.heartbeat()  # the last refresh is 5 s old: the new topic waits
    assert a.owned == parts(**{"orders-eu": [0, 1]})
    co.now += 5.5
    a.heartbeat()  # schedules the refresh ...
    a.heartbeat()  # ... which this one lands
    assert a.owned == parts(**{"orders-eu": [0, 1], "orders-us": [0, 1, 2]})
    assert co.doc.regexes == {"orders-.*": ("orders-eu", "orders-us")}
    a.leave()
    b.heartbeat()  # the last member of the regex left: its resolution goes
    assert co.doc.regexes == {}


def test_a_regex_matching_nothing_is_kept_without_a_rebalance() -> None:
    co = Coordinator({"audit": 1})
    a = co.join("a", None, regex="orders-.*")
    assert co.doc is not None
    epoch = co.doc.group_epoch
    a.heartbeat()  # the resolution lands: stored, though it names no topic, and the epoch stays
    assert (co.doc.regexes, co.doc.group_epoch) == ({"orders-.*": ()}, epoch)


def test_a_topic_gaining_partitions_is_reassigned() -> None:
    co = Coordinator({"t": 2})
    a, b = co.join("a"), co.join("b")
    co.settle()
    co.topics["t"] = 4
    co.settle()
    assert a.count() == b.count() == 2


def test_changing_the_subscription_revokes_the_dropped_topic() -> None:
    co = Coordinator({"x": 2, "y": 2})
    a = co.join("a")
    res = co.heartbeat(HeartbeatRequest("a", a.epoch, subscribed_topics=["y"], owned=dict(a.owned)))
    assert res.assignment == parts(y=[0, 1]) and res.member_epoch == a.epoch
    a.owned = dict(res.assignment)
    a.heartbeat()
    assert a.epoch == 3 and co.state(a) == MemberState.STABLE


def test_the_members_assignor_is_used() -> None:
    co = Coordinator({"x": 4, "y": 4})
    a = co.join("a", assignor="range")
    b = co.join("b", assignor="range")
    co.settle()
    assert co.doc is not None and co.group.assignor(co.doc) == "range"
    assert a.owned == parts(x=[0, 1], y=[0, 1]) and b.owned == parts(x=[2, 3], y=[2, 3])


# -- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("req", "version", "kind", "message"),
    [
        (HeartbeatRequest("", 0, rebalance_timeout_ms=1, subscribed_topics=["t"], owned={}), 1,
         GroupErrorKind.INVALID_REQUEST, "MemberId can't be empty."),
        (HeartbeatRequest("m", 0, subscribed_topics=["t"], owned={}), 1,
         GroupErrorKind.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."),
        (HeartbeatRequest("m", 0, rebalance_timeout_ms=1, subscribed_topics=["t"]), 1,
         GroupErrorKind.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."),
        (HeartbeatRequest("m", 0, rebalance_timeout_ms=1, owned={}), 1,
         GroupErrorKind.INVALID_REQUEST, "Either SubscribedTopicNames or SubscribedTopicRegex"),
        (HeartbeatRequest("m", 0, instance_id=" ", rebalance_timeout_ms=1, subscribed_topics=["t"], owned={}), 1,
         GroupErrorKind.INVALID_REQUEST, "InstanceId can't be empty."),
        (HeartbeatRequest("m", -2), 1, GroupErrorKind.INVALID_REQUEST, "InstanceId can't be null."),
        (HeartbeatRequest("m", -3), 1, GroupErrorKind.INVALID_REQUEST, "MemberEpoch is invalid."),
        (HeartbeatRequest("m", 0, rebalance_timeout_ms=1, subscribed_topics=["t"], owned={}, server_assignor="sticky"),
         1, GroupErrorKind.UNSUPPORTED_ASSIGNOR, "ServerAssignor sticky is not supported"),
        (HeartbeatRequest("m", 0, rebalance_timeout_ms=1, subscribed_regex="(a)\\1", owned={}), 1,
         GroupErrorKind.INVALID_REGULAR_EXPRESSION, "backreferences"),
        (HeartbeatRequest("m", 3), 1, GroupErrorKind.GROUP_ID_NOT_FOUND, "not found"),
    ],
)
def test_bad_heartbeats_are_refused_as_kafka_refuses_them(
    req: HeartbeatRequest, version: int, kind: GroupErrorKind, message: str
) -> None:
    co = Coordinator({"t": 1})
    with pytest.raises(GroupError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        co.heartbeat(req, api_version=version)
    assert info.value.kind == kind
    assert co.doc is None


def test_version_0_lets_the_coordinator_name_the_member() -> None:
    co = Coordinator({"t": 1})
    res = co.heartbeat(HeartbeatRequest("", 0, rebalance_timeout_ms=1, subscribed_topics=["t"], owned={}), 0)
    assert len(res.member_id) == 36 and res.assignment == parts(t=[0])


def test_a_full_group_refuses_a_new_member() -> None:
    co = Coordinator({"t": 2}, max_size=1)
    a = co.join("a")
    with refused(GroupErrorKind.GROUP_MAX_SIZE_REACHED):
        co.join("b")
    a.heartbeat()


# -- offsets --------------------------------------------------------------------------------------


def test_offset_commits_and_fetches_are_fenced_by_member_epoch() -> None:
    co = Coordinator({"t": 2})
    a = co.join("a")
    assert co.doc is not None
    validate_offset_commit(co.doc, "a", a.epoch)
    validate_offset_fetch(co.doc, "a", a.epoch)
    validate_offset_fetch(co.doc, None, -1)  # the admin client
    with refused(GroupErrorKind.STALE_MEMBER_EPOCH):
        validate_offset_commit(co.doc, "a", a.epoch - 1)
    with refused(GroupErrorKind.STALE_MEMBER_EPOCH):
        validate_offset_fetch(co.doc, "a", a.epoch + 1)
    with refused(GroupErrorKind.UNKNOWN_MEMBER_ID):
        validate_offset_commit(co.doc, "nobody", 1)
    with refused(GroupErrorKind.UNKNOWN_MEMBER_ID):
        validate_offset_commit(co.doc, "", -1)  # a group with members takes no anonymous commit
    with refused(GroupErrorKind.UNSUPPORTED_VERSION):
        validate_offset_commit(co.doc, "a", a.epoch, api_version=8)
    validate_offset_commit(co.doc, "a", a.epoch, transactional=True, api_version=3)
    a.leave()
    assert co.doc is not None and group_state(co.doc) == GroupState.EMPTY
    validate_offset_commit(co.doc, "", -1)


# -- another coordinator takes over -----------------------------------------------------------------


def test_a_new_coordinator_arms_fresh_sessions_and_carries_on() -> None:
    co = Coordinator({"t": 4})
    a, b = co.join("a"), co.join("b")
    a.heartbeat()  # a is asked to revoke
    assert co.state(a) == MemberState.UNREVOKED_PARTITIONS
    co.group = ConsumerGroup("g", co.config)  # the gateway died; another loads the group from Redis
    co.now = 100.0
    assert co.doc is not None
    co.group.arm(co.doc, co.now)
    assert co.group.next_deadline() == pytest.approx(100.0 + SESSION_MS / 1000)
    assert co.group.revocations["a"] == (100.0 + REBALANCE_MS / 1000, 2)
    co.expire()
    assert set(co.doc.members) == {"a", "b"}
    co.settle()
    assert a.count() == b.count() == 2


def test_the_group_document_round_trips() -> None:
    co = Coordinator({"t": 4, "u": 1})
    co.join("a", instance_id="i", regex="u")
    co.join("b")
    g = co.doc
    assert g is not None
    again = ConsumerGroupDoc.unpack(
        g.group_id, g.pack_meta(), {mid: m.pack() for mid, m in g.members.items()}, g.version
    )
    assert again == g
    assert ConsumerMemberDoc.unpack("x", ConsumerMemberDoc("x").pack()) == ConsumerMemberDoc("x")


def test_owners_lists_pending_revocations_too() -> None:
    co = Coordinator({"t": 2})
    a = co.join("a")
    co.join("b")
    a.heartbeat()
    assert co.doc is not None
    held = owners(co.doc)
    assert held == {("t", 0): "a", ("t", 1): "a"}


# -- assignors ------------------------------------------------------------------------------------


def _check_complete(result: dict[str, Assignment], members: dict[str, MemberSpec], counts: dict[str, int]) -> None:
    seen: Counter[tuple[str, int]] = Counter()
    for mid, a in result.items():
        for t, ps in a.items():
            assert t in members[mid].topics, "only subscribed topics are assigned"
            seen.update((t, p) for p in ps)
    subscribed = {t for m in members.values() for t in m.topics if t in counts}
    assert dict(seen) == {(t, p): 1 for t in subscribed for p in range(counts[t])}


@pytest.mark.parametrize("seed", range(30))
def test_uniform_is_balanced_and_sticky(seed: int) -> None:
    rng = random.Random(seed)
    counts = {f"t{i}": rng.randint(1, 9) for i in range(rng.randint(1, 4))}
    ids = [f"m{i}" for i in range(rng.randint(1, 7))]
    members = {m: MemberSpec(frozenset(counts)) for m in ids}
    first = UniformAssignor().assign(members, counts)
    _check_complete(first, members, counts)
    loads = [sum(len(ps) for ps in a.values()) for a in first.values()]
    assert max(loads) - min(loads) <= 1
    assert UniformAssignor().assign(members, counts) == first, "deterministic"
    # one member more: only what the newcomer needs moves
    grown = {m: MemberSpec(frozenset(counts), first[m]) for m in ids} | {"new": MemberSpec(frozenset(counts))}
    second = UniformAssignor().assign(grown, counts)
    _check_complete(second, grown, counts)
    loads = [sum(len(ps) for ps in a.values()) for a in second.values()]
    assert max(loads) - min(loads) <= 1
    moved = sum(len(ps - second[m].get(t, frozenset())) for m in ids for t, ps in first[m].items())
    assert moved == sum(len(ps) for ps in second["new"].values())
    # one member less: the others keep everything they had
    gone = ids[0]
    shrunk = {m: MemberSpec(frozenset(counts), first[m]) for m in ids[1:]}
    if shrunk:
        third = UniformAssignor().assign(shrunk, counts)
        for m in ids[1:]:
            for t, ps in first[m].items():
                assert ps <= third[m].get(t, frozenset()), f"{m} lost partitions when {gone} left"


@pytest.mark.parametrize("seed", range(30))
def test_uniform_with_differing_subscriptions_assigns_only_subscribed_topics(seed: int) -> None:
    rng = random.Random(seed)
    counts = {f"t{i}": rng.randint(1, 6) for i in range(4)}
    members = {f"m{i}": MemberSpec(frozenset(rng.sample(sorted(counts), rng.randint(1, 4)))) for i in range(5)}
    result = UniformAssignor().assign(members, counts)
    _check_complete(result, members, counts)
    # no single move would improve balance
    load = {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}
    for m, a in result.items():
        for t in a:
            assert all(load[o] >= load[m] - 1 for o in members if t in members[o].topics)


def test_range_gives_co_partitioned_topics_the_same_partitions() -> None:
    counts = {"orders": 7, "payments": 7, "other": 3}
    members = {m: MemberSpec(frozenset(counts)) for m in ("a", "b", "c")}
    result = RangeAssignor().assign(members, counts)
    _check_complete(result, members, counts)
    for a in result.values():
        assert a["orders"] == a["payments"]
    assert result["a"]["orders"] == frozenset({0, 1, 2}), "ranges are contiguous, extras first"
    assert result["c"]["orders"] == frozenset({5, 6})


def test_range_is_sticky() -> None:
    counts = {"t": 6}
    first = RangeAssignor().assign({m: MemberSpec(frozenset(counts)) for m in ("a", "b")}, counts)
    grown = {m: MemberSpec(frozenset(counts), first[m]) for m in ("a", "b")} | {"c": MemberSpec(frozenset(counts))}
    second = RangeAssignor().assign(grown, counts)
    _check_complete(second, grown, counts)
    assert second["a"]["t"] <= first["a"]["t"] and second["b"]["t"] <= first["b"]["t"]
    assert [len(second[m]["t"]) for m in ("a", "b", "c")] == [2, 2, 2]


def test_the_assignors_are_named_as_kafka_names_them() -> None:
    assert list(ASSIGNORS) == ["uniform", "range"]


# -- the regex dialect ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "regex",
    ["(a)\\1", "a(?=b)", "a(?!b)", "(?<=a)b", "(?<!a)b", "(?>a)", "a*+", "(?(1)a|b)", "\\pL", "a\\Z", "(?U)a*",
     "(?P=x)", "[[:^alpha:]]", "(?#note)a"],
)
def test_constructs_re2_lacks_are_refused(regex: str) -> None:
    with refused(GroupErrorKind.INVALID_REGULAR_EXPRESSION):
        translate(regex)


def test_re2_syntax_is_translated_and_matched_whole() -> None:
    topics = ["orders", "orders-eu", "orders.x", "ORDERS-EU", "b]c", "t1"]
    assert matching("orders-.*", topics) == ("orders-eu",)
    assert matching("(?i)orders-eu", topics) == ("ORDERS-EU", "orders-eu")
    assert matching("\\Qorders.x\\E", topics) == ("orders.x",)
    assert matching("[[:alpha:]]+", topics) == ("orders",)
    assert matching("(?<name>t)\\d\\z", topics) == ("t1",)
    assert matching("b[]]c", topics) == ("b]c",)
    with refused(GroupErrorKind.INVALID_REGULAR_EXPRESSION):
        matching("orders(", topics)
