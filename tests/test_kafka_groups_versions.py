"""Every advertised version of the group APIs on the wire, including the forms no client here sends:
FindCoordinator's batched keys (v4+), LeaveGroup's batched members (v3+), OffsetFetch's batched
groups (v8+), DescribeGroups v6's missing-group error and ListGroups' state and type filters."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.groups.offsets import encode_consumer_assignment
from gateway.kafka.dispatch import ApiKey, load_handlers, lookup
from tests.kafka_wire import call

load_handlers()

PROTOCOLS = [{"name": "range", "metadata": b"\x00\x01"}]


@pytest.fixture
async def conn(gateway):
    await gateway.services.log.create_topic("t", 2)
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
    yield reader, writer
    writer.close()


def test_advertised_ranges():
    expected = {
        ApiKey.FIND_COORDINATOR: (0, 6), ApiKey.JOIN_GROUP: (0, 9), ApiKey.SYNC_GROUP: (0, 5),
        ApiKey.HEARTBEAT: (0, 4), ApiKey.LEAVE_GROUP: (0, 5), ApiKey.OFFSET_COMMIT: (2, 10),
        ApiKey.OFFSET_FETCH: (1, 10), ApiKey.DESCRIBE_GROUPS: (0, 6), ApiKey.LIST_GROUPS: (0, 5),
        ApiKey.DELETE_GROUPS: (0, 2),
    }
    for key, (lo, hi) in expected.items():
        reg = lookup(key, lo)
        assert reg is not None and (reg.min_version, reg.max_version) == (lo, hi), key


@pytest.mark.parametrize("version", range(7))
async def test_find_coordinator_names_this_gateway(gateway, conn, version):
    port = gateway.listeners["kafka"].port
    if version < 4:
        r = await call(conn, ApiKey.FIND_COORDINATOR, version, {"key": "g", "key_type": 0})
        assert (r.error_code, r.node_id, r.host, r.port) == (KafkaError.none, 0, "127.0.0.1", port)
        return
    r = await call(conn, ApiKey.FIND_COORDINATOR, version, {"key_type": 1, "coordinator_keys": ["a", "b"]})
    assert [(c.key, c.error_code, c.port) for c in r.coordinators] == [
        ("a", KafkaError.none, port), ("b", KafkaError.none, port),
    ]
    r = await call(conn, ApiKey.FIND_COORDINATOR, version, {"key_type": 2, "coordinator_keys": ["s"]})
    assert r.coordinators[0].error_code == KafkaError.invalid_request


@pytest.mark.parametrize("version", range(10))
async def test_join_sync_heartbeat_leave_at_each_join_version(conn, version):
    group = f"g{version}"
    join = {"group_id": group, "session_timeout": 6000, "rebalance_timeout": 6000, "member_id": "",
            "protocol_type": "consumer", "protocols": PROTOCOLS}
    r = await call(conn, ApiKey.JOIN_GROUP, version, join)
    if version >= 4:  # a dynamic member's first join only earns it a member id
        assert r.error_code == KafkaError.member_id_required and r.member_id
        r = await call(conn, ApiKey.JOIN_GROUP, version, {**join, "member_id": r.member_id})
    assert r.error_code == KafkaError.none and r.leader == r.member_id and r.generation_id == 1
    assert r.protocol_name == "range" and [m.metadata for m in r.members] == [b"\x00\x01"]
    me = r.member_id
    sync_v, hb_v, leave_v = min(version, 5), min(version, 4), min(version, 5)
    s = await call(conn, ApiKey.SYNC_GROUP, sync_v, {
        "group_id": group, "generation_id": 1, "member_id": me, "protocol_type": "consumer",
        "protocol_name": "range", "assignments": [{"member_id": me, "assignment": b"mine"}],
    })
    assert (s.error_code, s.assignment) == (KafkaError.none, b"mine")
    h = await call(conn, ApiKey.HEARTBEAT, hb_v, {"group_id": group, "generation_id": 1, "member_id": me})
    assert h.error_code == KafkaError.none
    h = await call(conn, ApiKey.HEARTBEAT, hb_v, {"group_id": group, "generation_id": 0, "member_id": me})
    assert h.error_code == KafkaError.illegal_generation
    h = await call(conn, ApiKey.HEARTBEAT, hb_v, {"group_id": group, "generation_id": 1, "member_id": "x"})
    assert h.error_code == KafkaError.unknown_member_id
    if leave_v < 3:
        r = await call(conn, ApiKey.LEAVE_GROUP, leave_v, {"group_id": group, "member_id": me})
        assert r.error_code == KafkaError.none
    else:
        r = await call(conn, ApiKey.LEAVE_GROUP, leave_v, {"group_id": group, "members": [{"member_id": me}]})
        assert r.error_code == KafkaError.none and [m.error_code for m in r.members] == [KafkaError.none]
    d = await call(conn, ApiKey.DESCRIBE_GROUPS, 0, {"groups": [group]})
    assert d.groups[0].group_state == "Empty"


async def test_static_members_leave_in_one_batch(gateway, conn):
    join = {"group_id": "static", "session_timeout": 6000, "rebalance_timeout": 6000, "member_id": "",
            "protocol_type": "consumer", "protocols": PROTOCOLS}
    first = await call(conn, ApiKey.JOIN_GROUP, 5, {**join, "group_instance_id": "i-1"})
    other = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
    try:  # the second member's join opens a rebalance the first must rejoin: two connections at once
        second, again = await asyncio.gather(
            call(other, ApiKey.JOIN_GROUP, 5, {**join, "group_instance_id": "i-2"}),
            call(conn, ApiKey.JOIN_GROUP, 5, {**join, "group_instance_id": "i-1", "member_id": first.member_id}),
        )
    finally:
        other[1].close()
    assert second.error_code == again.error_code == KafkaError.none and second.generation_id == 2
    r = await call(conn, ApiKey.LEAVE_GROUP, 4, {"group_id": "static", "members": [
        {"member_id": "", "group_instance_id": "i-1"},
        {"member_id": "stale", "group_instance_id": "i-2"},
        {"member_id": "", "group_instance_id": "i-3"},
    ]})
    assert [m.error_code for m in r.members] == [
        KafkaError.none, KafkaError.fenced_instance_id, KafkaError.unknown_member_id,
    ]


@pytest.mark.parametrize("version", range(2, 10))
async def test_simple_commits_and_fetches_at_each_version(conn, version):
    group = f"c{version}"
    r = await call(conn, ApiKey.OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "retention_time": -1,
        "topics": [
            {"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": 2, "committed_metadata": "m"},
                {"partition_index": 5, "committed_offset": 1, "committed_metadata": None},
            ]},
            {"name": "nope", "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]},
        ],
    })
    codes = {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}
    assert codes == {("t", 0): KafkaError.none, ("t", 5): KafkaError.unknown_topic_or_partition,
                     ("nope", 0): KafkaError.unknown_topic_or_partition}
    for fetch_v in range(1, 10):
        asked = [{"name": "t", "partition_indexes": [0, 1]}]
        if fetch_v >= 8:
            f = await call(conn, ApiKey.OFFSET_FETCH, fetch_v, {"groups": [
                {"group_id": group, "topics": asked}, {"group_id": "other", "topics": None},
            ]})
            assert [g.group_id for g in f.groups] == [group, "other"] and f.groups[1].topics == ()
            topics = f.groups[0].topics
        else:
            f = await call(conn, ApiKey.OFFSET_FETCH, fetch_v, {"group_id": group, "topics": asked})
            topics = f.topics
        got = {(t.name, p.partition_index): (p.committed_offset, p.metadata) for t in topics for p in t.partitions}
        assert got == {("t", 0): (7, "m"), ("t", 1): (-1, "")}, fetch_v
    f = await call(conn, ApiKey.OFFSET_FETCH, 7, {"group_id": group, "topics": None})
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in f.topics] == [("t", [0])]
    assert f.topics[0].partitions[0].committed_leader_epoch == (2 if version >= 6 else -1)


async def test_a_member_commit_checks_generation_and_member(conn):
    r = await call(conn, ApiKey.JOIN_GROUP, 3, {"group_id": "m", "session_timeout": 6000, "rebalance_timeout": 6000,
                                                "member_id": "", "protocol_type": "consumer", "protocols": PROTOCOLS})
    me = r.member_id
    commit = {"group_id": "m", "member_id": me, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 3, "committed_metadata": ""}]},
    ]}

    async def commit_code(**changes: object) -> KafkaError:
        resp = await call(conn, ApiKey.OFFSET_COMMIT, 8, {**commit, **changes})
        return resp.topics[0].partitions[0].error_code

    assert await commit_code(generation_id_or_member_epoch=1) == KafkaError.rebalance_in_progress  # not synced
    await call(conn, ApiKey.SYNC_GROUP, 3, {"group_id": "m", "generation_id": 1, "member_id": me, "assignments": []})
    assert await commit_code(generation_id_or_member_epoch=1) == KafkaError.none
    assert await commit_code(generation_id_or_member_epoch=2) == KafkaError.illegal_generation
    assert await commit_code(generation_id_or_member_epoch=1, member_id="x") == KafkaError.unknown_member_id
    assert await commit_code(generation_id_or_member_epoch=-1, member_id="") == KafkaError.unknown_member_id


@pytest.mark.parametrize("version", range(7))
async def test_describe_groups_at_each_version(conn, version):
    await call(conn, ApiKey.JOIN_GROUP, 1, {"group_id": "d", "session_timeout": 6000, "rebalance_timeout": 6000,
                                            "member_id": "", "protocol_type": "consumer", "protocols": PROTOCOLS})
    r = await call(conn, ApiKey.DESCRIBE_GROUPS, version, {"groups": ["d", "missing"]})
    d, missing = r.groups
    # not yet Stable: no protocol named, as Kafka 4.4 answers (tests/test_kafka_differential.py, classic_group_life)
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (
        KafkaError.none, "CompletingRebalance", "consumer", "",
    )
    assert len(d.members) == 1 and d.members[0].client_id == "test"
    expected = KafkaError.group_id_not_found if version >= 6 else KafkaError.none
    assert (missing.error_code, missing.group_state) == (expected, "Dead")


@pytest.mark.parametrize("version", range(6))
async def test_list_and_delete_groups_at_each_version(conn, version):
    for g in ("a", "b"):
        await call(conn, ApiKey.OFFSET_COMMIT, 2, {"group_id": g, "generation_id_or_member_epoch": -1, "member_id": "",
                                                   "topics": [{"name": "t", "partitions": [
                                                       {"partition_index": 0, "committed_offset": 1}]}]})
    r = await call(conn, ApiKey.LIST_GROUPS, version, {"states_filter": ["Empty"], "types_filter": ["classic"]})
    assert r.error_code == KafkaError.none and sorted(g.group_id for g in r.groups) == ["a", "b"]
    if version >= 4:
        r = await call(conn, ApiKey.LIST_GROUPS, version, {"states_filter": ["Stable"]})
        assert r.groups == ()
    if version >= 5:
        r = await call(conn, ApiKey.LIST_GROUPS, version, {"types_filter": ["consumer"]})
        assert r.groups == ()
    r = await call(conn, ApiKey.DELETE_GROUPS, min(version, 2), {"groups_names": ["a", "zzz"]})
    assert [(x.group_id, x.error_code) for x in r.results] == [
        ("a", KafkaError.none), ("zzz", KafkaError.group_id_not_found),
    ]
    r = await call(conn, ApiKey.LIST_GROUPS, version)
    assert [g.group_id for g in r.groups] == ["b"]


async def test_a_member_commits_a_partition_it_was_not_assigned(conn):
    """Kafka's ClassicGroup.validateOffsetCommit checks the member id and the generation only: a
    member's commit for a partition the leader gave nobody (or another member) is accepted."""
    r = await call(conn, ApiKey.JOIN_GROUP, 3, {"group_id": "u", "session_timeout": 6000, "rebalance_timeout": 6000,
                                                "member_id": "", "protocol_type": "consumer", "protocols": PROTOCOLS})
    me, generation = r.member_id, r.generation_id
    s = await call(conn, ApiKey.SYNC_GROUP, 3, {"group_id": "u", "generation_id": generation, "member_id": me,
                                                "assignments": [{"member_id": me, "assignment": encode_consumer_assignment({"t": frozenset({0})})}]})
    assert s.error_code == KafkaError.none
    resp = await call(conn, ApiKey.OFFSET_COMMIT, 8, {
        "group_id": "u", "generation_id_or_member_epoch": generation, "member_id": me, "topics": [
            {"name": "t", "partitions": [{"partition_index": p, "committed_offset": 5 + p, "committed_metadata": ""}
                                         for p in (0, 1)]}]})
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [
        (0, KafkaError.none), (1, KafkaError.none)]
    f = await call(conn, ApiKey.OFFSET_FETCH, 7, {"group_id": "u", "topics": None})
    assert [(p.partition_index, p.committed_offset) for p in f.topics[0].partitions] == [(0, 5), (1, 6)]
