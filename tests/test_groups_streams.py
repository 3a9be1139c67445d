"""KIP-1071's streams group protocol alone: the state machine (streams.py), its configured
topology and its sticky task assignor, with no Redis and no event loop; time is passed in. After
every heartbeat the tests check that no active task is held (assigned or pending revocation) by two
members, and that a standby never sits on the process of its task's active."""

from __future__ import annotations

import copy

from gateway.domain.groups.errors import GroupError, GroupErrorKind
from gateway.domain.groups.streams import (
    GroupState,
    HeartbeatRequest,
    MemberState,
    Status,
    StreamsGroup,
    StreamsGroupConfig,
    configure,
    group_state,
)
from gateway.domain.groups.streams_assignor import assign as sticky_assign
from gateway.store.streams_groups import (
    InternalTopic,
    StreamsGroupDoc,
    StreamsMemberDoc,
    Subtopology,
    TasksTuple,
    Topology,
)

TOPICS = {"in": 4, "table": 4}
TOPOLOGY = Topology(1, (
    Subtopology("0", ("in",), changelogs=(InternalTopic("app-count-changelog"),),
                repartition_sinks=("app-rekey-repartition",)),
    Subtopology("1", ("table",), repartition_sources=(InternalTopic("app-rekey-repartition"),),
                changelogs=(InternalTopic("app-join-changelog"),)),
))
READY = TOPICS | {"app-count-changelog": 4, "app-join-changelog": 4, "app-rekey-repartition": 4}


class Client:
    """A streams client that obeys its assignment at once and reports what it owns."""

    def __init__(self, member_id: str, process: str) -> None:
        self.member_id, self.process, self.epoch = member_id, process, 0
        self.owned = TasksTuple()

    def request(self, **extra: object) -> HeartbeatRequest:
        fields: dict[str, object] = {"member_id": self.member_id, "member_epoch": self.epoch, "owned": self.owned}
        if self.epoch == 0:
            fields |= {"rebalance_timeout_ms": 30_000, "topology": TOPOLOGY, "process_id": self.process}
        return HeartbeatRequest(**(fields | extra))  # type: ignore[arg-type]


class Coordinator:
    def __init__(self, standbys: int = 0) -> None:
        self.machine = StreamsGroup("app", StreamsGroupConfig(
            num_standby_replicas=standbys, initial_rebalance_delay_ms=0, assignment_interval_ms=0))
        self.doc: StreamsGroupDoc | None = None

    def beat(self, c: Client, topics: dict[str, int] = READY, now: float = 0.0, **extra: object):  # type: ignore[no-untyped-def]
        step = self.machine.heartbeat(copy.deepcopy(self.doc), now, c.request(**extra), topics)
        if step.save:
            self.doc = step.group
        r = step.reply
        c.epoch = r.member_epoch
        if r.assignment is not None:
            c.owned = r.assignment
        self.check()
        return r

    def check(self) -> None:
        assert self.doc is not None
        held: dict[tuple[str, int], str] = {}
        for m in self.doc.members.values():
            for tt in (m.assigned, m.pending_revocation):
                for s, ps in tt.active.items():
                    for p in ps:
                        assert held.setdefault((s, p), m.member_id) == m.member_id, f"task {s}_{p} held twice"
        for mid, t in self.doc.target.items():
            process = self.doc.members[mid].process_id
            for s, ps in t.standby.items():
                for p in ps:
                    owner = next(o for o, tt in self.doc.target.items() if p in tt.active.get(s, frozenset()))
                    assert self.doc.members[owner].process_id != process


def test_topology_configured_as_kafka_does():
    missing = configure(TOPOLOGY, {"in": 4})
    assert missing.status == (Status.MISSING_SOURCE_TOPICS, "Source topics table are missing.")
    internal = configure(TOPOLOGY, TOPICS)
    assert internal.status is not None and internal.status[0] == Status.MISSING_INTERNAL_TOPICS
    assert [(t.name, t.partitions) for t in internal.missing_internal] == [
        ("app-count-changelog", 4), ("app-join-changelog", 4), ("app-rekey-repartition", 4)]
    assert configure(TOPOLOGY, READY).tasks == {"0": 4, "1": 4}


def test_join_reconcile_revoke_first_and_leave():
    co = Coordinator()
    a, b = Client("a", "pa"), Client("b", "pb")
    r = co.beat(a, TOPICS)
    assert [s for s, _ in r.statuses] == [Status.MISSING_INTERNAL_TOPICS] and r.assignment == TasksTuple()
    assert [t.name for t in r.create] == ["app-count-changelog", "app-join-changelog", "app-rekey-repartition"]
    co.beat(a)
    assert a.owned.active == {"0": frozenset(range(4)), "1": frozenset(range(4))}
    co.beat(b)
    assert b.owned.active == {}  # every task still held by a
    epoch = a.epoch
    co.beat(a)
    assert co.doc is not None and co.doc.members["a"].state == MemberState.UNREVOKED_TASKS and a.epoch == epoch
    co.beat(a)  # it reports the revoked tasks gone
    assert a.epoch > epoch
    co.beat(b)
    assert sum(len(ps) for ps in b.owned.active.values()) == 4
    assert group_state(co.doc, READY) == GroupState.STABLE
    co.beat(b, member_epoch=-1)
    co.beat(a)
    assert a.owned.active == {"0": frozenset(range(4)), "1": frozenset(range(4))}


def test_standbys_on_other_processes():
    co = Coordinator(standbys=1)
    clients = [Client("a", "p1"), Client("b", "p1"), Client("c", "p2")]
    for _ in range(4):
        for c in clients:
            co.beat(c)
    assert co.doc is not None
    standbys = sum(len(ps) for t in co.doc.target.values() for ps in t.standby.values())
    assert standbys == 8  # every task has one standby, off its active's process


def test_refusals():
    co = Coordinator()
    a = Client("a", "pa")
    co.beat(a)
    for extra, kind in (({"member_epoch": 0, "topology": None}, GroupErrorKind.INVALID_REQUEST),
                        ({"member_epoch": a.epoch + 1}, GroupErrorKind.FENCED_MEMBER_EPOCH),
                        ({"member_id": "x", "member_epoch": 3}, GroupErrorKind.UNKNOWN_MEMBER_ID)):
        try:
            co.beat(a, **extra)
        except GroupError as exc:
            assert exc.kind == kind
        else:
            raise AssertionError(f"{extra} accepted")


def test_session_expiry_fences():
    co = Coordinator()
    a, b = Client("a", "pa"), Client("b", "pb")
    co.beat(a)
    co.beat(b, now=40.0)
    step = co.machine.expire(copy.deepcopy(co.doc), 46.0)
    assert step.save and step.group is not None and set(step.group.members) == {"b"}


def test_assignment_delayed_as_kafka_4_4_delays_it():
    """A new group's first target waits the initial rebalance delay, later ones the interval."""
    co = Coordinator()
    co.machine.config = StreamsGroupConfig(initial_rebalance_delay_ms=3000, assignment_interval_ms=1000)
    a, b = Client("a", "pa"), Client("b", "pb")
    r = co.beat(a, now=0.0)
    assert (Status.ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance delay.") in r.statuses
    assert co.beat(a, now=3.0).assignment is not None and a.owned.active
    r = co.beat(b, now=3.5)
    assert [s for s, _ in r.statuses] == [Status.ASSIGNMENT_DELAYED] and not b.owned.active
    assert co.beat(a, now=4.0).statuses == [] and co.doc is not None
    assert co.doc.assignment_epoch == co.doc.group_epoch


def test_interactive_queries_endpoint_map_as_kafka_4_4_builds_it():
    """PartitionsByUserEndpoint as Kafka 4.4's GroupMetadataManager and EndpointToPartitionsManager
    give it: the endpoint epoch moves when a member's endpoint is set or its tasks change while it
    has one; a member whose epoch is behind gets every member's entry (its own last), each naming
    the partitions of the source and repartition source topics of the tasks it holds now."""
    co = Coordinator()
    a, b = Client("a", "pa"), Client("b", "pb")
    r = co.beat(a, user_endpoint=("host-a", 7001))
    assert r.endpoint_information_epoch == 1 and r.partitions_by_endpoint is not None
    assert [(e.endpoint, e.active) for e in r.partitions_by_endpoint] == [
        (("host-a", 7001), [("in", [0, 1, 2, 3]), ("app-rekey-repartition", [0, 1, 2, 3]), ("table", [0, 1, 2, 3])])]
    r = co.beat(a, endpoint_information_epoch=1)
    assert r.partitions_by_endpoint is None  # current: nothing sent
    for _ in range(3):  # b joins; a revokes, b takes its half
        co.beat(b, user_endpoint=("host-b", 7002) if b.epoch == 0 else None)
        r = co.beat(a, endpoint_information_epoch=1)
    assert co.doc is not None
    assert r.partitions_by_endpoint is not None and r.endpoint_information_epoch == co.doc.endpoint_epoch > 1
    entries = {e.endpoint: e for e in r.partitions_by_endpoint}
    assert [e.endpoint for e in r.partitions_by_endpoint][-1] == ("host-a", 7001)
    held = {("in", p) for e in entries.values() for t, ps in e.active if t == "in" for p in ps}
    assert held == {("in", p) for p in range(4)} and all(e.standby == [] for e in entries.values())
    assert sum(len(ps) for e in entries.values() for t, ps in e.active if t == "in") == 4


def _group(*members: tuple[str, str, dict[str, set[int]]]) -> dict[str, StreamsMemberDoc]:
    """Members of (member id, process, active tasks it held) for the assignor alone."""
    return {mid: _member(mid, process, held) for mid, process, held in members}


def _member(mid: str, process: str, active: dict[str, set[int]] | None = None,
            standby: dict[str, set[int]] | None = None,
            offsets: dict[str, dict[int, int]] | None = None) -> StreamsMemberDoc:
    return StreamsMemberDoc(mid, process_id=process, member_epoch=2, task_offsets=offsets or {}, assigned=TasksTuple(
        {s: frozenset(ps) for s, ps in (active or {}).items()}, {s: frozenset(ps) for s, ps in (standby or {}).items()}))


def assign(members: dict[str, StreamsMemberDoc], tasks: dict[str, int], standbys: int) -> dict[str, TasksTuple]:
    """The assignor with every subtopology stateful, as 4.4's tests describe their topologies."""
    return sticky_assign(members, tasks, set(tasks), standbys)


def _active(result: dict[str, TasksTuple], mid: str, subtopology: str = "s") -> set[int]:
    return set(result[mid].active.get(subtopology, frozenset()))


def test_sticky_assignor_cases_of_kafka_4_4():
    """Cases of Kafka 4.4's StickyTaskAssignorTest (group-coordinator's streams/assignor), each
    with what that test asserts. 4.4's StickyTaskAssignor assigns no warm-up tasks and reads no
    rack or client tag (its only inputs are processes, previous tasks, task offsets and
    num.standby.replicas), so neither does this one."""
    # shouldAssignBasedOnCapacity: one task per member, whichever process it runs in
    r = assign(_group(("m1", "p1", {}), ("m2_1", "p2", {}), ("m2_2", "p2", {})), {"s": 3}, 0)
    assert [len(_active(r, m)) for m in ("m1", "m2_1", "m2_2")] == [1, 1, 1]
    # shouldNotMigrateActiveTaskToOtherProcess
    r = assign(_group(("m2", "p2", {"s": {1}}), ("m3", "p1", {"s": {2}})), {"s": 3}, 0)
    assert 1 in _active(r, "m2") and 2 in _active(r, "m3") and len(_active(r, "m2") | _active(r, "m3")) == 3
    # shouldMigrateActiveTasksToNewProcessWithoutChangingAllAssignments
    r = assign(_group(("m1", "p1", {"s": {0, 2}}), ("m2", "p2", {"s": {1}}), ("m3", "p3", {})), {"s": 3}, 0)
    assert _active(r, "m1") in ({0}, {2}) and _active(r, "m2") == {1} and _active(r, "m3") in ({0}, {2})
    # shouldAssignTasksEvenlyWithUnequalTopicGroupSizes: 6 + 1 tasks, all held by m1 before
    r = assign(_group(("m1", "p1", {"s1": set(range(6)), "s2": {0}}), ("m2", "p2", {})), {"s1": 6, "s2": 1}, 0)
    assert [sum(len(ps) for ps in r[m].active.values()) for m in ("m1", "m2")] == [4, 3]
    # shouldKeepActiveTaskStickinessWhenMoreClientThanActiveTasks
    r = assign(_group(("m1", "p1", {"s": {0}}), ("m2", "p2", {"s": {2}}), ("m3", "p3", {"s": {1}}),
                      ("m4", "p4", {}), ("m5", "p5", {})), {"s": 3}, 0)
    assert [_active(r, m) for m in ("m1", "m2", "m3", "m4", "m5")] == [{0}, {2}, {1}, set(), set()]
    # shouldAssignTopicGroupIdEvenlyAcrossClientsWithStandByTasks: two members in each of three processes
    members = [(f"m{p}_{i}", f"p{p}", {}) for p in (1, 2, 3) for i in (1, 2)]
    r = assign(_group(*members), {"s1": 3, "s2": 3}, 1)
    assert all(sum(len(ps) for ps in r[m].active.values()) == 1 for m, _, _ in members)
    assert all(not t.warmup for t in r.values())
    owner = {(s, p): m for m, t in r.items() for s, ps in t.active.items() for p in ps}
    standbys = [(m, (s, p)) for m, t in r.items() for s, ps in t.standby.items() for p in ps]
    assert sorted(task for _, task in standbys) == sorted(owner)  # one standby per task
    assert all(m[:2] != owner[task][:2] for m, task in standbys)  # each off its active's process


def test_sticky_assignor_offset_cases_of_kafka_4_4():
    """The cases of Kafka 4.4's StickyTaskAssignorTest where reported task offsets decide
    (KAFKA-20719: a member restarted under a new id holds no tasks, but its local state shows in its
    offsets), and the one that pins where standbys go."""
    # shouldAssignTasksToMembersReportingTaskOffsetsOnColdStart
    r = assign({"m1": _member("m1", "p1", offsets={"s": {0: 100, 1: 100}}),
                "m2": _member("m2", "p2", offsets={"s": {2: 100, 3: 100}})}, {"s": 4}, 0)
    assert (_active(r, "m1"), _active(r, "m2")) == ({0, 1}, {2, 3})
    # shouldAssignTasksToProcessesReportingTaskOffsetsOnColdStartWithMultipleMembersPerProcess
    one, two = {"s": {0: 100, 1: 100}}, {"s": {2: 100, 3: 100}}
    r = assign({"m1_1": _member("m1_1", "p1", offsets=one), "m1_2": _member("m1_2", "p1", offsets=one),
                "m2_1": _member("m2_1", "p2", offsets=two), "m2_2": _member("m2_2", "p2", offsets=two)}, {"s": 4}, 0)
    assert _active(r, "m1_1") | _active(r, "m1_2") == {0, 1} and _active(r, "m2_1") | _active(r, "m2_2") == {2, 3}
    # shouldRankCurrentOwnersAheadOfReportedTaskOffsetsAndMostCaughtUpFirst
    r = assign({"m1": _member("m1", "p1", active={"s": {0}}), "m2": _member("m2", "p2", standby={"s": {0, 1}}),
                "m3": _member("m3", "p3", offsets={"s": {0: 1_000_000, 1: 1_000_000, 2: 100}}),
                "m4": _member("m4", "p4", offsets={"s": {2: 50}})}, {"s": 4}, 0)
    assert [_active(r, m) for m in ("m1", "m2", "m3", "m4")] == [{0}, {1}, {2}, {3}]
    # shouldAssignStandbysAwayFromProcessHoldingStateOnColdStart
    r = assign({"m1": _member("m1", "p1", offsets={"s": {0: 100}}),
                "m2": _member("m2", "p2", offsets={"s": {1: 100}})}, {"s": 2}, 1)
    assert [(_active(r, m), set(r[m].standby.get("s", ()))) for m in ("m1", "m2")] == [({0}, {1}), ({1}, {0})]
    # shouldAssignStandbyToPreviousStandbyThatDoesNotHoldTheActiveTask: one of the outcomes it allows
    r = assign({"m1": _member("m1", "p1", standby={"s": {2}}),
                "m2": _member("m2", "p2", active={"s": {0}}, standby={"s": {2}}),
                "m3": _member("m3", "p3", active={"s": {1}}), "m4": _member("m4", "p4")}, {"s": 3}, 1)
    assert [_active(r, m) for m in ("m1", "m2", "m3", "m4")] == [{2}, {0}, {1}, set()]
    standbys = [set(r[m].standby.get("s", ())) for m in ("m1", "m2", "m3", "m4")]
    assert standbys in ([set(), {2}, {0}, {1}], [{1}, {2}, set(), {0}], [{0}, {2}, set(), {1}])


def test_task_offsets_kept_with_the_member_and_deciding_its_tasks():
    """Kafka 4.4's MemberTaskOffsets: offsets sent replace the member's last, offsets not sent keep
    them, a task reported twice is an invalid request; members restarted under new ids get the
    tasks whose state they report."""
    co = Coordinator()
    a, b = Client("a", "pa"), Client("b", "pb")
    for _ in range(4):
        co.beat(a)
        co.beat(b)
    assert co.doc is not None
    held = {c.member_id: c.owned.active["0"] for c in (a, b)}
    reported = {m: tuple(("0", p, 10 + p) for p in sorted(ps)) for m, ps in held.items()}
    co.beat(a, task_offsets=reported["a"], task_end_offsets=reported["b"])
    co.beat(a)
    assert co.doc.members["a"].task_offsets == {"0": {p: 10 + p for p in held["a"]}}
    assert co.doc.members["a"].task_end_offsets == {"0": {p: 10 + p for p in held["b"]}}
    try:
        co.beat(a, task_offsets=(("0", 0, 1), ("0", 0, 2)))
    except GroupError as exc:
        assert exc.kind == GroupErrorKind.INVALID_REQUEST
        assert str(exc) == "Task offsets contain a duplicate entry for subtopology 0 and partition 0."
    else:
        raise AssertionError("a task reported twice accepted")
    # both restart under new ids within the initial delay, each on the other's old state
    co.beat(a, member_epoch=-1)
    co.beat(b, member_epoch=-1)
    co.machine.config = StreamsGroupConfig(initial_rebalance_delay_ms=3000, assignment_interval_ms=0)
    a2, b2 = Client("a2", "pa"), Client("b2", "pb")
    co.beat(a2, now=100.0, task_offsets=reported["b"])
    co.beat(b2, now=100.0, task_offsets=reported["a"])
    for _ in range(3):
        co.beat(a2, now=104.0)
        co.beat(b2, now=104.0)
    assert (a2.owned.active["0"], b2.owned.active["0"]) == (held["b"], held["a"])
