"""The group coordinator's state machine on a real Redis: joins, barriers, sessions, static members,
offset commits and a coordinator restart."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable

import pytest

from gateway.domain.groups import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupCoordinator,
    GroupError,
    GroupErrorKind,
    JoinResult,
)
from gateway.store import Store, keys
from tests.conftest import eventually

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster

PROTO = [("range", b"meta-r"), ("roundrobin", b"meta-rr")]


def make(store: Store, **kw) -> GroupCoordinator:
    kw.setdefault("min_session_timeout_ms", 100)
    c = GroupCoordinator(store.groups, **kw)
    c.start()
    return c


@pytest.fixture
async def coord(store):
    c = make(store)
    yield c
    await c.close()


async def kind_of(aw: Awaitable[object]) -> GroupErrorKind | None:
    try:
        await aw
    except GroupError as exc:
        return exc.kind
    return None


def join(coord: GroupCoordinator, member_id: str = "", *, session: int = 5000, rebalance: int = 5000,
         protocols=PROTO, instance: str | None = None, **kw) -> Awaitable[JoinResult]:
    return coord.join(
        "g", member_id, protocol_type="consumer", protocols=protocols, session_timeout_ms=session,
        rebalance_timeout_ms=rebalance, instance_id=instance, client_id="c", **kw,
    )


async def stable_one(coord: GroupCoordinator, **kw) -> JoinResult:
    r = await join(coord, **kw)
    await coord.sync("g", r.generation, r.member_id, assignments={r.member_id: b"A1"})
    return r


async def state(coord: GroupCoordinator) -> str:
    d = await coord.describe("g")
    return d.state if d else "Dead"


async def test_first_join_needs_a_member_id_then_forms_a_generation(coord):
    with pytest.raises(GroupError) as exc:
        await join(coord, require_known_member_id=True)
    assert exc.value.kind is GroupErrorKind.MEMBER_ID_REQUIRED
    mid = exc.value.member_id
    assert mid.startswith("c-")
    r = await join(coord, mid, require_known_member_id=True)
    assert (r.generation, r.leader, r.member_id, r.protocol) == (1, mid, mid, "range")
    assert [(m.member_id, m.metadata) for m in r.members] == [(mid, b"meta-r")]
    assert await state(coord) == COMPLETING_REBALANCE
    s = await coord.sync("g", 1, mid, protocol_type="consumer", protocol="range", assignments={mid: b"mine"})
    assert s.assignment == b"mine"
    assert await state(coord) == STABLE
    assert await kind_of(join(coord, "bogus")) is GroupErrorKind.UNKNOWN_MEMBER_ID


async def test_second_member_triggers_a_rebalance_and_followers_wait_for_the_leader(coord):
    a = await stable_one(coord)
    b_join = asyncio.ensure_future(join(coord))
    await eventually(lambda: _is(coord, PREPARING_REBALANCE))
    assert await kind_of(coord.heartbeat("g", a.generation, a.member_id)) is GroupErrorKind.REBALANCE_IN_PROGRESS
    # a member may still commit what it consumed before it rejoins
    await coord.commit_offsets("g", a.generation, a.member_id, {("t", 0): (5, -1, "")})
    a2 = await join(coord, a.member_id)
    b = await b_join
    assert a2.generation == b.generation == 2
    assert a2.leader == b.leader == a.member_id
    assert {m.member_id for m in a2.members} == {a.member_id, b.member_id} and b.members == []
    b_sync = asyncio.ensure_future(coord.sync("g", 2, b.member_id))
    assert await kind_of(coord.commit_offsets("g", 2, b.member_id, {("t", 1): (1, -1, "")})) is (
        GroupErrorKind.REBALANCE_IN_PROGRESS
    )
    await asyncio.sleep(0)
    assert not b_sync.done()
    mine = await coord.sync("g", 2, a.member_id, assignments={a.member_id: b"p0", b.member_id: b"p1"})
    assert mine.assignment == b"p0" and (await b_sync).assignment == b"p1"
    assert await kind_of(coord.heartbeat("g", 1, b.member_id)) is GroupErrorKind.ILLEGAL_GENERATION
    await coord.heartbeat("g", 2, b.member_id)


async def _is(coord: GroupCoordinator, expected: str) -> bool:
    return await state(coord) == expected


async def test_a_member_that_stops_heartbeating_is_removed(coord):
    a = await stable_one(coord, session=5000)
    b_join = asyncio.ensure_future(join(coord, session=300))
    await eventually(lambda: _is(coord, PREPARING_REBALANCE))
    a2 = await join(coord, a.member_id, session=5000)
    b = await b_join
    await asyncio.gather(coord.sync("g", 2, a.member_id, assignments={}), coord.sync("g", 2, b.member_id))
    # b goes silent; a keeps heartbeating until told to rejoin
    async def a_must_rejoin() -> bool:
        return await kind_of(coord.heartbeat("g", 2, a2.member_id)) is GroupErrorKind.REBALANCE_IN_PROGRESS

    await eventually(a_must_rejoin)
    a3 = await join(coord, a.member_id, session=5000)
    assert a3.generation == 3 and [m.member_id for m in a3.members] == [a.member_id]
    assert await kind_of(coord.heartbeat("g", 2, b.member_id)) is GroupErrorKind.UNKNOWN_MEMBER_ID


async def test_members_that_do_not_rejoin_in_time_are_removed_at_the_deadline(coord):
    a = await stable_one(coord, rebalance=400)
    b_join = asyncio.ensure_future(join(coord, rebalance=400))
    await eventually(lambda: _is(coord, PREPARING_REBALANCE))
    # a heartbeats (so its session holds) but never rejoins: the barrier falls without it
    b = await b_join
    assert b.generation == 2 and b.leader == b.member_id and [m.member_id for m in b.members] == [b.member_id]
    assert await kind_of(coord.heartbeat("g", 1, a.member_id)) is GroupErrorKind.UNKNOWN_MEMBER_ID


async def test_static_member_rejoins_without_a_rebalance_and_fences_the_old_id(coord):
    a = await stable_one(coord, instance="i-1")
    assert a.member_id.startswith("i-1-")
    back = await join(coord, instance="i-1")
    assert back.member_id != a.member_id
    assert back.generation == 1 and back.leader == a.member_id and back.members == []
    assert await state(coord) == STABLE
    s = await coord.sync("g", 1, back.member_id, instance_id="i-1")
    assert s.assignment == b"A1"
    assert await kind_of(coord.heartbeat("g", 1, a.member_id, "i-1")) is GroupErrorKind.FENCED_INSTANCE_ID
    assert await kind_of(
        coord.commit_offsets("g", 1, a.member_id, {("t", 0): (1, -1, None)}, instance_id="i-1")
    ) is GroupErrorKind.FENCED_INSTANCE_ID
    await coord.heartbeat("g", 1, back.member_id, "i-1")
    await coord.commit_offsets("g", 1, back.member_id, {("t", 0): (1, -1, None)}, instance_id="i-1")


async def test_static_member_with_a_protocol_change_rebalances(coord):
    await stable_one(coord, instance="i-1")
    back = await join(coord, instance="i-1", protocols=[("roundrobin", b"x")])
    assert back.generation == 2 and back.protocol == "roundrobin" and back.leader == back.member_id


async def test_leaving_rebalances_and_the_last_one_out_empties_the_group(coord):
    a = await stable_one(coord)
    b_join = asyncio.ensure_future(join(coord))
    await eventually(lambda: _is(coord, PREPARING_REBALANCE))
    await join(coord, a.member_id)
    b = await b_join
    await asyncio.gather(coord.sync("g", 2, a.member_id, assignments={}), coord.sync("g", 2, b.member_id))
    assert await coord.leave("g", [(a.member_id, None), ("nobody", None)]) == [
        None, GroupErrorKind.UNKNOWN_MEMBER_ID,
    ]
    assert await state(coord) == PREPARING_REBALANCE
    b2 = await join(coord, b.member_id)
    assert b2.generation == 3 and b2.leader == b.member_id
    assert await coord.leave("g", [(b.member_id, None)]) == [None]
    d = await coord.describe("g")
    assert (d.state, d.members, d.protocol_type) == (EMPTY, [], "consumer")


async def test_inconsistent_protocols_are_refused(coord):
    await stable_one(coord)
    assert await kind_of(join(coord, protocols=[("sticky", b"")])) is GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL
    assert await kind_of(
        coord.join("g", "", protocol_type="connect", protocols=PROTO, session_timeout_ms=5000)
    ) is GroupErrorKind.INCONSISTENT_GROUP_PROTOCOL
    assert await kind_of(join(coord, session=10)) is GroupErrorKind.INVALID_SESSION_TIMEOUT


async def test_a_commit_is_checked_for_its_generation_before_the_group_state(coord):
    """Kafka's ClassicGroup.validateOffsetCommit: the member, then its generation, then the state, so
    a stale commit during a rebalance is ILLEGAL_GENERATION (the client drops its generation) and
    only a current one waiting for its assignment is REBALANCE_IN_PROGRESS."""
    one = {("t", 0): (1, -1, "")}
    a = await stable_one(coord)
    b_join = asyncio.ensure_future(join(coord))
    await eventually(lambda: _is(coord, PREPARING_REBALANCE))
    assert await kind_of(coord.commit_offsets("g", 0, a.member_id, one)) is GroupErrorKind.ILLEGAL_GENERATION
    await coord.commit_offsets("g", 1, a.member_id, one)  # the current generation goes on, as Kafka's
    await join(coord, a.member_id)
    b = await b_join
    assert await state(coord) == COMPLETING_REBALANCE
    assert await kind_of(coord.commit_offsets("g", 1, b.member_id, one)) is GroupErrorKind.ILLEGAL_GENERATION
    assert await kind_of(coord.commit_offsets("g", 2, b.member_id, one)) is GroupErrorKind.REBALANCE_IN_PROGRESS
    assert await kind_of(coord.commit_offsets("g", 2, "gone", one)) is GroupErrorKind.UNKNOWN_MEMBER_ID
    assert await kind_of(coord.commit_offsets("g", -1, "", one)) is GroupErrorKind.UNKNOWN_MEMBER_ID


async def test_a_members_commit_to_a_group_that_does_not_exist(coord):
    """Kafka's OffsetMetadataManager.validateOffsetCommit: GROUP_ID_NOT_FOUND from v9, and
    ILLEGAL_GENERATION before; without a generation the commit creates the group."""
    one = {("t", 0): (1, -1, "")}
    assert await kind_of(coord.commit_offsets("new", 3, "m", one)) is GroupErrorKind.GROUP_ID_NOT_FOUND
    assert await kind_of(coord.commit_offsets("new", 3, "m", one, api_version=8)) is GroupErrorKind.ILLEGAL_GENERATION
    await coord.commit_offsets("new", -1, "m", one)  # a member id with no generation: fine while Empty
    assert (await coord.fetch_offsets("new", [("t", 0)]))[("t", 0)].offset == 1


async def test_commits_follow_kafkas_rules_and_are_durable(coord, store):
    await coord.commit_offsets("g", -1, "", {("t", 0): (10, 3, "meta"), ("t", 1): (20, -1, None)})
    fetched = await coord.fetch_offsets("g", [("t", 0), ("t", 1), ("t", 2)])
    assert fetched[("t", 0)].offset == 10 and fetched[("t", 0)].leader_epoch == 3
    assert fetched[("t", 0)].metadata == "meta" and fetched[("t", 2)] is None
    assert list(await coord.fetch_offsets("g")) == [("t", 0), ("t", 1)]
    a = await stable_one(coord)
    assert await kind_of(coord.commit_offsets("g", -1, "", {("t", 0): (1, -1, "")})) is GroupErrorKind.UNKNOWN_MEMBER_ID
    assert await kind_of(coord.commit_offsets("g", 7, a.member_id, {("t", 0): (1, -1, "")})) is (
        GroupErrorKind.ILLEGAL_GENERATION
    )
    out = await coord.commit_offsets("g", 1, a.member_id, {("t", 0): (11, -1, ""), ("t", 9): (1, -1, "x" * 5000)})
    assert out == {("t", 0): None, ("t", 9): GroupErrorKind.OFFSET_METADATA_TOO_LARGE}
    other = make(store)
    try:
        assert (await other.fetch_offsets("g", [("t", 0)]))[("t", 0)].offset == 11
    finally:
        await other.close()


async def test_commits_to_unknown_partitions_are_refused_when_topics_are_known(store):
    async def partitions(topic: str) -> int:
        return 2 if topic == "t" else 0

    c = make(store, partitions=partitions)
    try:
        out = await c.commit_offsets("g", -1, "", {("t", 1): (1, -1, ""), ("t", 2): (1, -1, ""), ("u", 0): (1, -1, "")})
        assert out == {
            ("t", 1): None,
            ("t", 2): GroupErrorKind.UNKNOWN_TOPIC_OR_PARTITION,
            ("u", 0): GroupErrorKind.UNKNOWN_TOPIC_OR_PARTITION,
        }
    finally:
        await c.close()


async def test_a_new_coordinator_keeps_the_group_and_expires_members_that_never_return(coord, store):
    a = await stable_one(coord, session=400)
    await coord.commit_offsets("g", 1, a.member_id, {("t", 0): (42, -1, "")})
    await coord.close()
    successor = make(store)
    try:
        d = await successor.describe("g")
        assert d.state == STABLE and [m.member_id for m in d.members] == [a.member_id]
        await successor.heartbeat("g", 1, a.member_id)  # the member carries on where it was
        assert (await successor.fetch_offsets("g", [("t", 0)]))[("t", 0)].offset == 42
        await eventually(lambda: _is(successor, EMPTY))  # then stops heartbeating
        assert (await successor.fetch_offsets("g", [("t", 0)]))[("t", 0)].offset == 42
    finally:
        await successor.close()


async def test_list_describe_and_delete(coord):
    assert await coord.describe("g") is None
    a = await stable_one(coord)
    await coord.commit_offsets("g", 1, a.member_id, {("t", 0): (1, -1, "")})
    d = await coord.describe("g")
    assert (d.state, d.protocol, d.members[0].assignment, d.members[0].metadata) == (STABLE, "range", b"A1", b"meta-r")
    listed = await coord.list_groups()
    assert [(g.group_id, g.protocol_type, g.state) for g in listed] == [("g", "consumer", STABLE)]
    assert await coord.list_groups({EMPTY}) == []
    assert await kind_of(coord.delete("g")) is GroupErrorKind.NON_EMPTY_GROUP
    assert await kind_of(coord.delete("nope")) is GroupErrorKind.GROUP_ID_NOT_FOUND
    await coord.leave("g", [(a.member_id, None)])
    await coord.delete("g")
    assert await coord.list_groups() == [] and await coord.fetch_offsets("g") == {}


async def test_a_follower_parked_at_sync_learns_that_the_leader_died(coord):
    a = await join(coord, session=300)
    b_join = asyncio.ensure_future(join(coord))
    await eventually(lambda: _is(coord, PREPARING_REBALANCE))
    await join(coord, a.member_id, session=300)
    b = await b_join
    assert b.leader == a.member_id and b.generation == 2
    # the leader never syncs nor heartbeats: its session ends and the parked follower is told to rejoin
    assert await kind_of(coord.sync("g", 2, b.member_id)) is GroupErrorKind.REBALANCE_IN_PROGRESS
    b2 = await join(coord, b.member_id)
    assert b2.generation == 3 and b2.leader == b.member_id


async def test_one_gateway_coordinates_a_group_and_hands_it_over_on_close(store):
    a, b = make(store, node_id=0), make(store, node_id=1)
    a.advertise("gw-a", 9092)
    b.advertise("gw-b", 9093)
    try:
        r = await stable_one(a)
        assert await a.locate("g") == await b.locate("g") == (0, "gw-a", 9092)
        assert await kind_of(b.heartbeat("g", 1, r.member_id)) is GroupErrorKind.NOT_COORDINATOR
        assert await kind_of(b.commit_offsets("g", 1, r.member_id, {("t", 0): (1, -1, "")})) is (
            GroupErrorKind.NOT_COORDINATOR
        )
        await a.close()
        assert await b.locate("g") is None  # handed over: nobody coordinates it until a member comes
        await b.heartbeat("g", 1, r.member_id)  # the member carries on with the other gateway
        assert await a.locate("g") == (1, "gw-b", 9093)
    finally:
        await a.close()
        await b.close()


async def test_a_lapsed_lease_is_taken_over_and_members_that_never_come_expire(store):
    crashed = GroupCoordinator(store.groups, min_session_timeout_ms=100, lease_ms=300)
    r = await stable_one(crashed, session=400)  # then it stops: no renewals, no timers, no release
    survivor = make(store, node_id=1, lease_ms=300)
    try:
        await eventually(lambda: _is(survivor, EMPTY))
        assert await survivor.locate("g") == (1, "127.0.0.1", 0)
        assert (await survivor.describe("g")).members == [] and r.member_id
    finally:
        await survivor.close()


async def test_a_coordinator_whose_lease_was_taken_cannot_save(coord, raw_redis):
    a = await stable_one(coord)
    # another gateway took the lease (this one's lapsed unnoticed, say in a long pause)
    await raw_redis.set(keys.group_owner("g"), "7 elsewhere 9092")
    assert await kind_of(coord.leave("g", [(a.member_id, None)])) is GroupErrorKind.NOT_COORDINATOR
    assert [m.member_id for m in (await coord.describe("g")).members] == [a.member_id]
    assert await coord.locate("g") == (7, "elsewhere", 9092)


def consumer_assignment_bytes(parts: dict[str, list[int]]) -> bytes:
    """A ConsumerProtocolAssignment v0, as the group leader's client encodes it."""
    out = struct.pack(">hi", 0, len(parts))
    for topic, ps in parts.items():
        out += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return out + struct.pack(">i", -1)


async def test_a_commit_for_a_partition_another_member_owns_now_is_accepted(coord):
    """Kafka's ClassicGroup.validateOffsetCommit checks only the member id and the generation: a
    member commits a partition the last rebalance gave another member (a record it fetched before),
    and commits what it consumed while a rebalance is under way."""
    a = await stable_one(coord)
    b_join = asyncio.ensure_future(join(coord))
    await eventually(lambda: _is(coord, PREPARING_REBALANCE))
    await coord.commit_offsets("g", a.generation, a.member_id, {("t", 1): (3, -1, "")})  # before rejoining
    a2 = await join(coord, a.member_id)
    b = await b_join
    b_sync = asyncio.ensure_future(coord.sync("g", 2, b.member_id))
    await coord.sync("g", 2, a.member_id, assignments={
        a.member_id: consumer_assignment_bytes({"t": [0]}), b.member_id: consumer_assignment_bytes({"t": [1]})})
    await b_sync
    out = await coord.commit_offsets("g", a2.generation, a.member_id, {("t", 0): (7, -1, ""), ("t", 1): (9, -1, "")})
    assert out == {("t", 0): None, ("t", 1): None}
    assert (await coord.fetch_offsets("g", [("t", 1)]))[("t", 1)].offset == 9
    assert await coord.commit_offsets("g", 2, b.member_id, {("t", 1): (4, -1, "")}) == {("t", 1): None}
    committed = await coord.fetch_offsets("g", [("t", 0), ("t", 1)])
    assert (committed[("t", 0)].offset, committed[("t", 1)].offset) == (7, 4)
    # the generation and the member are still checked
    assert await kind_of(coord.commit_offsets("g", 1, b.member_id, {("t", 1): (5, -1, "")})) is (
        GroupErrorKind.ILLEGAL_GENERATION)
    assert await kind_of(coord.commit_offsets("g", 2, "nobody", {("t", 1): (5, -1, "")})) is (
        GroupErrorKind.UNKNOWN_MEMBER_ID)
