"""Online migration between the group protocols in the coordinator, on a real Redis: a classic group
upgraded by a ConsumerGroupHeartbeat, its classic members served from the consumer group (their
JoinGroup, SyncGroup, Heartbeat and offset commits), the downgrade when the last member of the
consumer protocol leaves, and `group.consumer.migration.policy` closing either way."""

from __future__ import annotations

import msgpack
import pytest

from gateway.domain.groups import (
    GroupCoordinator,
    GroupError,
    GroupErrorKind,
    JoinResult,
    consumer_assignment,
)
from gateway.domain.groups.consumer import ConsumerGroupConfig, HeartbeatRequest, HeartbeatResult
from gateway.domain.groups.offsets import encode_consumer_assignment, encode_consumer_subscription
from gateway.store import Store
from gateway.store.consumer_groups import ConsumerMemberDoc
from tests.conftest import eventually

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster

TOPICS = {"t": 4}
SUBSCRIPTION = [("range", encode_consumer_subscription(["t"]))]


async def coordinator(store: Store, policy: str = "bidirectional") -> GroupCoordinator:
    async def topics() -> dict[str, int]:
        return TOPICS

    c = GroupCoordinator(
        store.groups, min_session_timeout_ms=100, consumer_store=store.consumer_groups,
        consumer_config=ConsumerGroupConfig(migration_policy=policy), topics=topics,
    )
    c.start()
    return c


async def classic_join(c: GroupCoordinator, member_id: str = "", rebalance_timeout_ms: int = 10_000) -> JoinResult:
    return await c.join("g", member_id, protocol_type="consumer", protocols=SUBSCRIPTION,
                        session_timeout_ms=10_000, rebalance_timeout_ms=rebalance_timeout_ms)


async def stable_classic_member(c: GroupCoordinator, rebalance_timeout_ms: int = 10_000) -> JoinResult:
    """A one-member classic group, stable, owning every partition of t."""
    j = await classic_join(c, rebalance_timeout_ms=rebalance_timeout_ms)
    assignment = {"t": frozenset(range(4))}
    await c.sync("g", j.generation, j.member_id, assignments={j.member_id: encode_consumer_assignment(assignment)})
    return j


async def consumer_join(c: GroupCoordinator, member_id: str = "m-new") -> HeartbeatResult:
    return await c.consumer_heartbeat(
        "g", HeartbeatRequest(member_id, 0, rebalance_timeout_ms=10_000, subscribed_topics=["t"], owned={}), TOPICS
    )


async def group_type(c: GroupCoordinator) -> str:
    return {g.group_id: g.group_type for g in await c.list_groups()}["g"]


async def error_of(aw: object) -> GroupErrorKind | None:
    try:
        await aw  # type: ignore[misc]
    except GroupError as exc:
        return exc.kind
    return None


async def test_a_consumer_member_upgrades_the_group_and_the_classic_member_rejoins_to_revoke(store: Store) -> None:
    c = await coordinator(store)
    try:
        j = await stable_classic_member(c)
        await c.commit_offsets("g", j.generation, j.member_id, {("t", 0): (5, -1, "")}, api_version=8)
        r = await consumer_join(c)
        assert await group_type(c) == "consumer"
        assert r.assignment == {}  # every partition is still the classic member's
        d = await c.describe_consumer("g")
        assert d is not None and {m.member_id: m.classic for m in d.members} == {j.member_id: True, "m-new": False}
        # the classic member's heartbeat tells it to rejoin; its old generation still commits
        assert await error_of(c.heartbeat("g", j.generation, j.member_id)) is GroupErrorKind.REBALANCE_IN_PROGRESS
        await c.commit_offsets("g", j.generation, j.member_id, {("t", 1): (7, -1, "")}, api_version=8)
        again = await classic_join(c, j.member_id)  # eager: it gave up everything before rejoining
        assert again.generation > j.generation and again.leader == "" and again.protocol == "range"
        s = await c.sync("g", again.generation, j.member_id)
        kept = consumer_assignment(s.assignment)
        assert kept is not None and len(kept) == 2
        await c.heartbeat("g", again.generation, j.member_id)  # settled
        assert await error_of(
            c.commit_offsets("g", j.generation, j.member_id, {("t", 1): (8, -1, "")}, api_version=8)
        ) is GroupErrorKind.ILLEGAL_GENERATION
        r2 = await c.consumer_heartbeat("g", HeartbeatRequest("m-new", r.member_epoch, owned={}), TOPICS)
        assert r2.assignment is not None and {("t", p) for p in r2.assignment["t"]} == {("t", p) for p in range(4)} - kept
        offsets = await c.fetch_offsets("g", [("t", 0), ("t", 1)])
        assert offsets[("t", 0)] is not None and offsets[("t", 0)].offset == 5
        assert offsets[("t", 1)] is not None and offsets[("t", 1)].offset == 7
    finally:
        await c.close()


async def test_the_last_consumer_member_leaving_downgrades_the_group(store: Store) -> None:
    c = await coordinator(store)
    try:
        j = await stable_classic_member(c)
        r = await consumer_join(c)
        await c.consumer_heartbeat("g", HeartbeatRequest("m-new", -1), TOPICS)  # leaves
        assert await group_type(c) == "classic"
        described = await c.describe("g")
        assert described is not None and described.state == "PreparingRebalance"
        assert [m.member_id for m in described.members] == [j.member_id]
        # the generation is the group epoch, ahead of the member's: Kafka's classic heartbeat
        # answers ILLEGAL_GENERATION, and the member rejoins and leads its own group again
        assert described is not None and r.member_epoch > j.generation
        assert await error_of(c.heartbeat("g", j.generation, j.member_id)) is GroupErrorKind.ILLEGAL_GENERATION
        back = await classic_join(c, j.member_id)
        assert back.leader == j.member_id
    finally:
        await c.close()


async def test_a_classic_member_that_does_not_rejoin_is_fenced_at_its_rebalance_timeout(store: Store) -> None:
    c = await coordinator(store)
    try:
        j = await stable_classic_member(c, rebalance_timeout_ms=300)
        r = await consumer_join(c)
        assert await error_of(c.heartbeat("g", j.generation, j.member_id)) is GroupErrorKind.REBALANCE_IN_PROGRESS

        epoch = [r.member_epoch]

        async def all_partitions() -> bool:
            got = await c.consumer_heartbeat("g", HeartbeatRequest("m-new", epoch[0], owned={}), TOPICS)
            epoch[0] = got.member_epoch
            return got.assignment is not None and got.assignment.get("t") == frozenset(range(4))

        await eventually(all_partitions, what="the classic member fenced and its partitions given")
        assert await error_of(c.heartbeat("g", j.generation, j.member_id)) is GroupErrorKind.UNKNOWN_MEMBER_ID
    finally:
        await c.close()


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
async def test_a_policy_without_upgrade_keeps_the_classic_group(store: Store, policy: str) -> None:
    c = await coordinator(store, policy)
    try:
        await stable_classic_member(c)
        assert await error_of(consumer_join(c)) is GroupErrorKind.GROUP_ID_NOT_FOUND
        assert await group_type(c) == "classic"
    finally:
        await c.close()


async def test_a_policy_without_downgrade_keeps_the_consumer_group(store: Store) -> None:
    c = await coordinator(store, "upgrade")
    try:
        await stable_classic_member(c)
        await consumer_join(c)
        await c.consumer_heartbeat("g", HeartbeatRequest("m-new", -1), TOPICS)
        assert await group_type(c) == "consumer"
    finally:
        await c.close()


def test_a_member_stored_before_migration_reads_as_a_consumer_protocol_member() -> None:
    classic = ConsumerMemberDoc("m", classic_session_timeout_ms=6000, classic_protocols=(("range", b"x"),))
    assert ConsumerMemberDoc.unpack("m", classic.pack()) == classic and classic.classic
    old = msgpack.packb(msgpack.unpackb(ConsumerMemberDoc("m").pack())[:13])
    assert not ConsumerMemberDoc.unpack("m", old).classic
