"""Several gateways over one Redis (and over a Redis Cluster): each is listed while its lease runs,
partition leadership and coordinators are spread over them, and a fetch waiting on one gateway
wakes for an append made through another."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from kio.schema.errors import ErrorCode as KafkaError

from gateway.client import Client
from gateway.domain.registry import Registry
from gateway.kafka.dispatch import ApiKey, load_handlers
from gateway.server.gateway import Gateway
from gateway.store import Store, keys
from gateway.store.embedded import EmbeddedRedis
from tests.conftest import kafka_bootstrap, native_url, test_config
from tests.kafka_wire import call
from tests.test_kafka_groups import eventually

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster

pytestmark = pytest.mark.kafka
LEASE_MS = 1500  # renewed every half second: a stopped gateway leaves the others' view quickly

load_handlers()


def listed(gw: Gateway) -> set[int]:
    return listed_in(gw.services.registry)


def listed_in(registry: Registry) -> set[int]:
    return {p.node_id for p in registry.live()}


@pytest.fixture
async def two(redis_url: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    a, b = Gateway(test_config(redis_url, lease_ms=LEASE_MS)), Gateway(test_config(redis_url, lease_ms=LEASE_MS))
    await a.start()
    await b.start()
    try:
        assert (a.config.node_id, b.config.node_id) == (0, 1)  # handed out by Redis, none configured
        await eventually(lambda: listed(a) == listed(b) == {0, 1}, what="each gateway seeing the other")
        yield a, b
    finally:
        await b.stop()
        await a.stop()


async def ask(gw: Gateway, api_key: int, version: int, values: dict) -> object:
    conn = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
    try:
        return await call(conn, api_key, version, values)
    finally:
        conn[1].close()


async def metadata(gw: Gateway, topic: str) -> tuple[set[tuple[int, int]], list[int]]:
    """(node id, port) of every broker listed, and the leader of each partition of `topic`."""
    resp = await ask(gw, ApiKey.METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                               "allow_auto_topic_creation": False})
    [t] = resp.topics
    return {(br.node_id, br.port) for br in resp.brokers}, [p.leader_id for p in t.partitions]


async def coordinators(gw: Gateway, key_type: int, keys_: list[str]) -> list[int]:
    resp = await ask(gw, ApiKey.FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": keys_})
    assert {c.error_code for c in resp.coordinators} == {KafkaError.none}
    return [c.node_id for c in resp.coordinators]


async def test_metadata_lists_both_and_spreads_leaders_and_coordinators(two):
    a, b = two
    await a.services.log.create_topic("spread", 16)
    ports = {(0, a.listeners["kafka"].port), (1, b.listeners["kafka"].port)}
    (brokers_a, leaders_a), (brokers_b, leaders_b) = await metadata(a, "spread"), await metadata(b, "spread")
    assert brokers_a == brokers_b == ports
    assert leaders_a == leaders_b and set(leaders_a) == {0, 1}  # the same spread, told by either
    groups, txns = [f"group-{i}" for i in range(16)], [f"txn-{i}" for i in range(16)]
    for key_type, names in ((0, groups), (1, txns)):
        told = await coordinators(a, key_type, names)
        assert told == await coordinators(b, key_type, names) and set(told) == {0, 1}

    await b.stop()  # a clean stop gives the lease up: b leaves a's view at a's next renewal
    await eventually(lambda: listed(a) == {0}, what="the stopped gateway dropping out")
    brokers, leaders = await metadata(a, "spread")
    assert brokers == {(0, a.listeners["kafka"].port)} and set(leaders) == {0}
    # only what b led moved: a keeps every partition it led
    assert all(now == 0 for now, before in zip(leaders, leaders_a, strict=True) if before == 0)
    assert set(await coordinators(a, 0, groups)) == {0}


async def test_a_fetch_waiting_on_one_gateway_wakes_for_an_append_through_the_other(two, raw_redis):
    a, b = two
    await a.services.log.create_topic("wake", 8)
    _, leaders = await metadata(b, "wake")
    p = leaders.index(1)  # a partition the consumer fetches from b
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap(b), fetch_max_wait_ms=20_000,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition("wake", p)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = asyncio.ensure_future(consumer.getone())
        flag = keys.wake("wake", p)
        redis = raw_redis
        deadline = time.monotonic() + 10
        while not await redis.exists(flag):  # b's long poll is parked and has raised the log's flag
            assert time.monotonic() < deadline, "the fetch on b never waited"
            await asyncio.sleep(0.02)
        async with await Client.connect(native_url(a)) as client:  # appended through a
            producer = await client.create_producer("wake")
            sent = time.monotonic()
            await producer.send(b"across", partition=p)
        msg = await asyncio.wait_for(got, 10)
        # the long poll may wait 20 s: only the wake-up from a's append ends it this soon
        assert msg.value == b"across" and time.monotonic() - sent < 5
        assert not await redis.exists(flag)  # the append lowered the flag it published for
    finally:
        await consumer.stop()


async def test_a_gateway_that_lapsed_while_this_one_could_not_renew_keeps_a_lease_more(store):
    """A gateway that cannot renew (Redis away in a failover, or cut off from it) keeps listing the
    others it last read, as a Kafka broker cut off from its controller answers from its last
    metadata image: dropped from Metadata, a live gateway was decommissioned by librdkafka, and a
    transactional producer waited on it for ever (soak sentinel:863862518). The first to renew after
    the outage keeps the others listed for one lease more, for them to renew, as Kafka's new
    controller gives each broker a whole session again; one that does not renew then drops out
    (see Registry._grace). Here a does not renew while b's lease runs out in Redis (c sees it go),
    then a renews."""
    lease_ms = 300
    a, b, c = (Registry(store, lease_ms=lease_ms) for _ in range(3))
    for r, port in ((a, 9001), (b, 9002), (c, 9003)):
        await r.claim(-1, "127.0.0.1", port)
        await r.advertise("127.0.0.1", port, 0, 0)
    await a.renew()
    assert {a.node_id, b.node_id} <= listed_in(a)

    async def lapsed_in_redis() -> bool:
        await c.renew()
        return b.node_id not in listed_in(c)

    await eventually(lapsed_in_redis, what="b's lease running out unrenewed")
    assert {a.node_id, b.node_id} <= listed_in(a)  # a read nothing newer: b is as it last saw it
    await a.renew()  # the first renewal after the outage: b's lease lapsed in Redis meanwhile
    assert {a.node_id, b.node_id} <= listed_in(a)
    await b.renew()
    await a.renew()
    assert {a.node_id, b.node_id} <= listed_in(a)  # renewed: listed as ever

    async def dropped_while_renewing() -> bool:  # a renews on time: a lapse of b's is b's alone
        await a.renew()
        return listed_in(a) == {a.node_id}

    await eventually(dropped_while_renewing, what="b dropping out while a renews on time")


async def test_find_coordinator_passes_over_a_holder_metadata_no_longer_lists(gateway):
    """A killed gateway's group leases outlive its registration by up to a lease: named as the
    coordinator, it was added by librdkafka from the answer, dropped again at the next Metadata, and
    a transactional producer's send_offsets_to_transaction waited on it for ever (soak
    cluster:520419567). Kafka names only a live broker; the group goes to a live gateway."""
    await gateway.store.groups.lease("orphaned", 99, "127.0.0.1 9", 60_000)  # node 99: not registered
    assert await coordinators(gateway, 0, ["orphaned"]) == [gateway.config.node_id]


class _Counted(Registry):
    """A registry that counts its renewals, so a test can await a few failing ones."""

    tries = 0

    async def renew(self, ttl_ms: int | None = None) -> None:
        self.tries += 1
        await super().renew(ttl_ms)


async def test_a_registration_failing_while_redis_is_away_is_warned_of_once_and_its_return_said(tmp_path, caplog):
    node = EmbeddedRedis(tmp_path / "redis")
    node.start()
    port = node.port
    store = Store.open(node.url)
    try:
        registry = _Counted(store, lease_ms=300)
        await registry.claim(-1, "127.0.0.1", 9001)
        caplog.set_level(logging.INFO, "gateway.domain.registry")
        running = asyncio.create_task(registry.run())
        node.stop()
        tried = registry.tries
        await eventually(lambda: registry.tries >= tried + 3, what="renewals tried with Redis away")
        node = EmbeddedRedis(tmp_path / "redis", port=port)
        node.start()
        await eventually(lambda: "registration renewed again" in caplog.text, what="a renewal with Redis back")
        registry.stop()
        await running
        said = [r.levelname for r in caplog.records if r.name == "gateway.domain.registry"]
        assert said == ["WARNING", "INFO"]
    finally:
        await store.close()
        node.stop()
