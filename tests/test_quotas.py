"""Client quotas enforced (KIP-13, KIP-124, KIP-612): a producer_byte_rate held once across two
gateways, a consumer_byte_rate that throttles a consumer yet lets it read everything, a
request_percentage that throttles a producer and any other request, a connection_creation_rate that
holds and closes an ip's connections past it, real confluent-kafka clients seeing the responses'
throttle times, and Prometheus counting them per entity."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer

from gateway.domain.quotas import CONNECTIONS, FETCH, PRODUCE, REQUEST, Alteration, QuotaService
from gateway.kafka.dispatch import ApiKey
from gateway.server.gateway import Gateway
from gateway.store import Store
from tests import test_gateways
from tests.conftest import kafka_bootstrap, running_gateway, test_config
from tests.kafka_wire import call
from tests.test_gateways import ask
from tests.test_kafka_apis import fetch_request
from tests.test_kafka_share import group_configs
from tests.test_metrics import scrape

pytestmark = pytest.mark.kafka

VALUE = b"q" * 1000
two = test_gateways.two  # the fixture: two gateways over one Redis


async def set_quota(gw: Gateway, client_id: str, key: str, value: float, *others: Gateway,
                    entity_type: str = "client-id") -> None:
    """The quota set through AlterClientQuotas, then read by every gateway named (each reads the
    configuration at most a second late on its own)."""
    resp: Any = await ask(gw, ApiKey.ALTER_CLIENT_QUOTAS, 1, {"validate_only": False, "entries": [
        {"entity": [{"entity_type": entity_type, "entity_name": client_id}],
         "ops": [{"key": key, "value": value, "remove": False}]}]})
    assert [e.error_code for e in resp.entries] == [0]
    for g in (gw, *others):
        await g.services.quotas.load()


def metric(quota: str, client_id: str = "", ip: str = "") -> str:
    """The Prometheus line of an entity's throttles, as the gateway names it."""
    return f'gateway_quota_throttled_total{{client_id="{client_id}",ip="{ip}",quota="{quota}",user=""}}'


def produce(bootstrap: str, client_id: str, topic: str, partition: int, count: int) -> list[int]:
    """Send `count` records of 1000 bytes to one partition; the throttle times the broker answered."""
    throttled: list[int] = []
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 16384,
                  "throttle_cb": lambda e: throttled.append(e.throttle_time)})
    for _ in range(count):
        p.produce(topic, VALUE, partition=partition)
        p.poll(0)
    assert p.flush(60) == 0
    return [t for t in throttled if t > 0]


async def test_a_produce_quota_is_held_once_across_gateways(two: tuple[Gateway, Gateway]) -> None:
    """300 KB through each gateway under a 50 KB/s quota: alone, the first stays within the ten
    seconds' allowance the sampled rate gives; the second, adding to the same samples in Redis,
    exceeds it and is throttled (it would not be if each gateway counted on its own)."""
    a, b = two
    topic, client = f"q-{uuid.uuid4().hex[:8]}", f"q-producer-{uuid.uuid4().hex[:8]}"
    await a.services.log.create_topic(topic, 8)
    leaders = [a.services.registry.leader(topic, p).node_id for p in range(8)]
    on_a, on_b = leaders.index(a.config.node_id), leaders.index(b.config.node_id)
    await set_quota(a, client, PRODUCE, 50_000, b)
    assert await asyncio.to_thread(produce, kafka_bootstrap(a), client, topic, on_a, 300) == []
    later = await asyncio.to_thread(produce, kafka_bootstrap(b), client, topic, on_b, 300)
    assert later, "the second gateway's producer was never throttled"
    assert metric(PRODUCE, client) in await scrape(b)
    assert metric(PRODUCE, client) not in await scrape(a)


def consume(bootstrap: str, client_id: str, topic: str, count: int) -> tuple[list[bytes], list[int]]:
    throttled: list[int] = []
    c = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": client_id,
                  "auto.offset.reset": "earliest", "throttle_cb": lambda e: throttled.append(e.throttle_time)})
    c.subscribe([topic])
    got: list[bytes] = []
    try:
        while len(got) < count:
            m = c.poll(30)
            assert m is not None, f"only {len(got)} of {count} records consumed"
            assert m.error() is None, m.error()
            got.append(m.value() or b"")
    finally:
        c.close()
    return got, [t for t in throttled if t > 0]


@pytest.mark.slow  # Kafka's rate allows ten seconds' worth before it throttles: the test lasts that long
async def test_a_fetch_quota_throttles_a_consumer_that_still_reads_everything(
        two: tuple[Gateway, Gateway]) -> None:
    """240 KB under a 20 KB/s consumer quota: the first 200 KB (ten seconds' worth, the most one
    fetch is sent) come at once, then the consumer is throttled (its fetches answered empty) until
    the rate allows the rest, and every record arrives in order. Batches of 16 KB: a batch larger
    than ten seconds' worth could never be sent, on Kafka as here."""
    a, _ = two
    topic, client = f"q-{uuid.uuid4().hex[:8]}", f"q-consumer-{uuid.uuid4().hex[:8]}"
    await a.services.log.create_topic(topic, 1)
    bs = ",".join(kafka_bootstrap(g) for g in two)
    assert await asyncio.to_thread(produce, bs, "q-unlimited", topic, 0, 240) == []
    await set_quota(a, client, FETCH, 20_000, *two)
    got, throttled = await asyncio.to_thread(consume, bs, client, topic, 240)
    assert got == [VALUE] * 240
    assert throttled, "the consumer was never throttled"


def share_consume(bootstrap: str, client_id: str, topic: str, count: int) -> list[bytes]:
    """A share consumer of group `client_id`, accepting each record, until it has read `count`."""
    c = ShareConsumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": client_id,
                       "share.acknowledgement.mode": "explicit", "fetch.max.bytes": 8000})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} of {count} records consumed"
            for m in c.poll(0.5):
                assert m.error() is None, m.error()
                got.append(m.value() or b"")
                c.acknowledge(m)
            c.commit_sync(30)
    finally:
        c.close()
    return got


@pytest.mark.slow  # ten seconds' allowance, then the throttled records' lock
async def test_a_fetch_quota_throttles_a_share_consumer_that_still_reads_everything_once(redis_url: str) -> None:
    """130 KB in batches of 5 KB under a 10 KB/s consumer quota, read by confluent-kafka's share
    consumer: the first 100 KB or so come at once, then its ShareFetches are throttled (answered
    with no records, the records they acquired locked until their one-second lock runs out, as on
    Kafka) and Prometheus counts it; every record reaches it once, as written. Each throttle counts
    a delivery of what it acquired, as on Kafka: the group allows ten, Kafka's most."""
    async with running_gateway(test_config(redis_url, group_share_min_record_lock_duration_ms=1000)) as gw:
        topic, client = f"q-{uuid.uuid4().hex[:8]}", f"q-share-{uuid.uuid4().hex[:8]}"
        await gw.services.log.create_topic(topic, 1)
        await group_configs(kafka_bootstrap(gw), client, share_auto_offset_reset="earliest",
                            share_record_lock_duration_ms="1000", share_delivery_count_limit="10")
        values = [b"%04d" % i + VALUE[4:] for i in range(130)]
        p = Producer({"bootstrap.servers": kafka_bootstrap(gw), "linger.ms": 50, "batch.num.messages": 5})
        for v in values:
            p.produce(topic, v, partition=0)
        assert await asyncio.to_thread(p.flush, 30) == 0
        await set_quota(gw, client, FETCH, 10_000)
        got = await asyncio.to_thread(share_consume, kafka_bootstrap(gw), client, topic, len(values))
        assert sorted(got) == values
        assert metric(FETCH, client) in await scrape(gw)


async def test_request_time_is_counted_once_across_gateways(redis_url: str) -> None:
    """Two gateways' request time adds up in Redis as their byte rates do: 6 percent-seconds each is
    within a 1% quota's ten-second window alone, over it together, and the throttle it earns is
    bounded at one window (ClientRequestQuotaManager's boundedThrottleTime)."""
    stores = [Store.open(redis_url), Store.open(redis_url)]
    try:
        a, b = (QuotaService(s) for s in stores)
        client = f"c-{uuid.uuid4().hex[:6]}"
        await a.alter([Alteration([("client-id", client)], [(REQUEST, 1.0)])], False)
        await b.load()
        assert await a.record(REQUEST, None, client, 6.0) == 0
        took = await b.record(REQUEST, None, client, 6.0)
        assert 0 < took <= 1000
    finally:
        for s in stores:
            await s.close()


async def test_quota_precedence_is_kip_55s(redis_url: str) -> None:
    """Each quota key is looked up on its own, the first of KIP-55's eight levels that sets it wins,
    and the level names the counter: a default binds each user or client on its own."""
    store = Store.open(redis_url)
    try:
        quotas = QuotaService(store)
        u, c = f"u-{uuid.uuid4().hex[:6]}", f"c-{uuid.uuid4().hex[:6]}"
        levels: list[list[tuple[str, str | None]]] = [
            [("user", u), ("client-id", c)], [("user", u), ("client-id", None)], [("user", u)],
            [("user", None), ("client-id", c)], [("user", None), ("client-id", None)], [("user", None)],
            [("client-id", c)], [("client-id", None)]]
        tags = [(u, c), (u, c), (u, ""), (u, c), (u, c), (u, ""), ("", c), ("", c)]
        await quotas.alter([Alteration(e, [(PRODUCE, float(i + 1))]) for i, e in enumerate(levels)], False)
        await quotas.alter([Alteration([("client-id", c)], [(FETCH, 99.0)])], False)
        for i in range(len(levels)):
            assert quotas.applies(PRODUCE, u, c) == (float(i + 1), *tags[i])
            assert quotas.applies(FETCH, u, c) == (99.0, "", c)  # another key: its own lookup
            await quotas.alter([Alteration(levels[i], [(PRODUCE, None)])], False)
        assert quotas.applies(PRODUCE, u, c) is None
        assert quotas.applies(PRODUCE, "someone", "else") is None
    finally:
        await store.close()


async def test_a_tiny_request_percentage_throttles_a_producer_whose_records_all_arrive(gateway: Gateway) -> None:
    """KIP-124: a producer allowed 0.01% of a second's request time is throttled (its produce
    responses carry throttle times, bounded at one window), and every record it sent is there."""
    topic, client = f"q-{uuid.uuid4().hex[:8]}", f"q-requests-{uuid.uuid4().hex[:8]}"
    await gateway.services.log.create_topic(topic, 1)
    await set_quota(gateway, client, REQUEST, 0.01)
    throttled = await asyncio.to_thread(produce, kafka_bootstrap(gateway), client, topic, 0, 40)
    assert throttled, "the producer was never throttled"
    assert max(throttled) <= 1000  # ClientRequestQuotaManager: at most quota.window.size.seconds
    assert (await gateway.services.log.bounds(topic, 0))[1] == 40
    assert metric(REQUEST, client) in await scrape(gateway)


async def test_request_time_throttles_every_api_and_mutes_the_connection(gateway: Gateway) -> None:
    """Any request's time counts, and a response built for any API carries the throttle
    (RequestHandlerHelper.sendResponseMaybeThrottle); the next request on the connection is answered
    once the mute is over."""
    await set_quota(gateway, "test", REQUEST, 0.001)  # "test": tests.kafka_wire's client id
    conn = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
    try:
        first: Any = await call(conn, ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})
        second: Any = await call(conn, ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                                  "client_software_version": "1"})
    finally:
        conn[1].close()
    assert first.throttle_time.total_seconds() > 0
    assert second.error_code == 0 and second.throttle_time.total_seconds() > 0


async def test_requests_before_login_count_for_no_quota(redis_url: str) -> None:
    """With authentication on, what a client sends before it logs in (ApiVersions, SaslHandshake)
    is Kafka's authenticator's to answer, outside every quota: a `<default>` user's tiny
    request_percentage, which the ANONYMOUS principal would match, throttles none of it."""
    async with running_gateway(test_config(redis_url, auth=True, super_users="admin")) as gw:
        await gw.services.quotas.alter([Alteration([("user", None)], [(REQUEST, 0.001)])], False)
        conn = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
        try:
            answers: list[Any] = [await call(conn, ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                                            "client_software_version": "1"})
                                  for _ in range(3)]
        finally:
            conn[1].close()
    assert [a.throttle_time.total_seconds() for a in answers] == [0, 0, 0]


async def test_a_fetchs_wait_for_records_is_no_request_time(gateway: Gateway) -> None:
    """Two long polls of 400 ms on an empty partition at request_percentage 1 (a tenth of a second's
    work in ten): their waits would be eight times that, but Kafka counts a request handler's time,
    not its purgatory's, and so does the gateway: neither is throttled."""
    await gateway.services.log.create_topic("long-poll", 1)
    await set_quota(gateway, "test", REQUEST, 1)
    conn = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
    try:
        polls: list[Any] = [await call(conn, ApiKey.FETCH, 12, {**fetch_request([("long-poll", 0, 0, 1000)], 1000, 1),
                                                                "max_wait": 400}) for _ in range(2)]
    finally:
        conn[1].close()
    assert [p.throttle_time.total_seconds() for p in polls] == [0, 0]
    assert not any(p.responses[0].partitions[0].records for p in polls)


async def test_connections_past_an_ips_creation_rate_are_held_and_closed(gateway: Gateway) -> None:
    """KIP-612: at connection_creation_rate 1 the sampled rate (ten seconds' worth at first) lets ten
    connections in; the next ones are accepted, left unread for their throttle time and closed
    unanswered, as Kafka's ConnectionQuotas and acceptor do, and counted under the ip."""
    await set_quota(gateway, "127.0.0.1", CONNECTIONS, 1, entity_type="ip")
    answered = closed = 0
    for _ in range(12):
        conn = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
        try:
            await call(conn, ApiKey.API_VERSIONS, 0)
            answered += 1
        except (asyncio.IncompleteReadError, ConnectionResetError):
            closed += 1
        finally:
            conn[1].close()
    assert (answered, closed) == (10, 2)
    assert metric(CONNECTIONS, ip="127.0.0.1") in await scrape(gateway)
