"""The Prometheus metrics move with real traffic, by exactly what that traffic did, and the README's
table lists every family the gateway exports."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from pathlib import Path

import aiohttp
import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from gateway.client import Client
from gateway.errors import TopicNotFound
from tests.conftest import admin_url, eventually, kafka_bootstrap, native_url

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

RECORDS = 20
ROUNDS = 4  # each round's records are flushed before the next: one batch (and one request) per round
VALUE = b"m" * 100
COMMITTED = 15  # the group commits here: lag = high watermark - this


async def scrape(gw) -> str:
    async with aiohttp.ClientSession() as http, http.get(admin_url(gw) + "/metrics") as r:
        assert r.status == 200
        return await r.text()


def samples(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(got: Samples, name: str, **labels: str) -> float:
    return got.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


async def stored(gw, topic: str) -> list[bytes]:
    """The record batches of a one-partition topic as the log keeps them."""
    entries = (await gw.services.log.read(topic, 0, 0, 1000)).entries
    return [e.batch for e in entries]


def kafka_produce(bs: str, topic: str) -> None:
    producer = ck.Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for _ in range(ROUNDS):
        for _ in range(RECORDS // ROUNDS):
            producer.produce(topic, VALUE)
        assert producer.flush(20) == 0


def kafka_consume_and_commit(bs: str, topic: str, group: str) -> None:
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        got = 0
        while got < RECORDS:
            msg = consumer.poll(20)
            assert msg is not None and msg.error() is None
            got += 1
        consumer.commit(offsets=[ck.TopicPartition(topic, 0, COMMITTED)], asynchronous=False)
    finally:
        consumer.close()


def kafka_create_existing(bs: str, topic: str) -> None:
    """One CreateTopics request that fails with TOPIC_ALREADY_EXISTS. The client goes with this
    frame (no traceback kept holds it): librdkafka keeps a connection up for its telemetry
    (KIP-714) while a client lives."""
    admin = AdminClient({"bootstrap.servers": bs})
    future = admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=20)[topic]
    code = None
    try:
        future.result(20)
    except ck.KafkaException as exc:
        code = exc.args[0].code()
    assert code == ck.KafkaError.TOPIC_ALREADY_EXISTS


async def native_traffic(gw) -> None:
    """RECORDS messages sent and received on "native-metered", and one subscribe to a missing topic."""
    async with await Client.connect(native_url(gw)) as client:
        consumer = await client.subscribe("native-metered", "s", initial_position="earliest")
        producer = await client.create_producer("native-metered")
        for _ in range(ROUNDS):
            await asyncio.gather(*(producer.send(VALUE) for _ in range(RECORDS // ROUNDS)))
        for _ in range(RECORDS):
            await consumer.acknowledge(await consumer.receive(10))
        with pytest.raises(TopicNotFound):
            await client.subscribe("missing", "s")


async def open_connections(gw, listener: str, expected: float) -> bool:
    return value(samples(await scrape(gw)), "gateway_connections", listener=listener) == expected


async def test_traffic_moves_every_metric_by_what_it_did(gateway):
    gw = gateway
    gw.services.log.auto_create = False
    bs = kafka_bootstrap(gw)
    async with aiohttp.ClientSession() as http:
        async with http.post(admin_url(gw) + "/admin/v2/topics", json={"name": "metered", "partitions": 1}) as r:
            assert r.status == 201
    await gw.services.log.create_topic("native-metered", 1)
    before = samples(await scrape(gw))

    await asyncio.to_thread(kafka_produce, bs, "metered")
    await asyncio.to_thread(kafka_consume_and_commit, bs, "metered", "metered-group")
    await asyncio.to_thread(kafka_create_existing, bs, "metered")
    await native_traffic(gw)
    async with aiohttp.ClientSession() as http:
        async with http.get(admin_url(gw) + "/admin/v2/topics/nowhere") as r:
            assert r.status == 404
    # the clients have closed their sockets; the gateway sees it when it next reads them
    for listener in ("kafka", "native"):
        await eventually(lambda lst=listener: open_connections(gw, lst, value(before, "gateway_connections",
                                                                            listener=lst)),
                         what=f"{listener} connections closed")
    after = samples(await scrape(gw))

    kafka_batches, native_batches = await stored(gw, "metered"), await stored(gw, "native-metered")
    assert sum(b.count(VALUE) for b in kafka_batches) == RECORDS  # uncompressed: every value is there
    assert len(kafka_batches) == len(native_batches) == ROUNDS
    kafka_bytes, native_bytes = sum(map(len, kafka_batches)), sum(map(len, native_batches))

    # requests: one Produce per stored batch (one partition, no retries), one Send per native batch
    assert moved(before, after, "gateway_requests_total", face="kafka", api="Produce") == len(kafka_batches)
    assert moved(before, after, "gateway_requests_total", face="native", api="send") == len(native_batches)
    assert moved(before, after, "gateway_requests_total", face="kafka", api="CreateTopics") == 1
    assert moved(before, after, "gateway_requests_total", face="kafka", api="OffsetCommit") == 1
    assert moved(before, after, "gateway_requests_total", face="kafka", api="Fetch") >= 1
    assert moved(before, after, "gateway_requests_total", face="native", api="subscribe") == 2
    assert moved(before, after, "gateway_requests_total", face="native", api="create_producer") == 1
    assert moved(before, after, "gateway_requests_total", face="admin", api="GET /admin/v2/topics/{name}") == 1

    # errors, by code: exactly the failures made on purpose, and none on the data path
    assert moved(before, after, "gateway_request_errors_total", face="kafka", api="CreateTopics",
                 code="TOPIC_ALREADY_EXISTS") == 1
    assert moved(before, after, "gateway_request_errors_total", face="native", api="subscribe",
                 code="TOPIC_NOT_FOUND") == 1
    assert moved(before, after, "gateway_request_errors_total", face="admin", api="GET /admin/v2/topics/{name}",
                 code="TOPIC_NOT_FOUND") == 1
    errors = {dict(labels)["api"] for (name, labels), v in after.items()
              if name == "gateway_request_errors_total" and v != before.get((name, labels), 0.0)}
    assert not errors & {"Produce", "Fetch", "OffsetCommit", "send", "ack", "create_producer"}

    # latency: every request in the histogram, in its cumulative buckets
    apis = {labels for name, labels in after if name == "gateway_requests_total"}
    assert apis
    for labels in apis:
        lv = dict(labels)
        count = moved(before, after, "gateway_request_seconds_count", **lv)
        assert count == moved(before, after, "gateway_requests_total", **lv), lv
        assert moved(before, after, "gateway_request_seconds_bucket", **lv, le="+Inf") == count
        assert value(after, "gateway_request_seconds_sum", **lv) >= value(before, "gateway_request_seconds_sum", **lv)

    # bytes per topic and face: the batches as stored, in once and out once
    assert moved(before, after, "gateway_produced_bytes_total", face="kafka", topic="metered") == kafka_bytes
    assert moved(before, after, "gateway_fetched_bytes_total", face="kafka", topic="metered") == kafka_bytes
    assert moved(before, after, "gateway_produced_bytes_total", face="native", topic="native-metered") == native_bytes
    assert moved(before, after, "gateway_fetched_bytes_total", face="native", topic="native-metered") == native_bytes

    # connections: the native client's one, and at least one per Kafka client; all closed again
    assert moved(before, after, "gateway_connections_accepted_total", listener="native") == 1
    assert moved(before, after, "gateway_connections_accepted_total", listener="kafka") >= 3
    assert moved(before, after, "gateway_connections_refused_total", listener="kafka") == 0

    # lag: high watermark less the committed offset
    assert value(after, "gateway_consumer_group_lag", group="metered-group", topic="metered",
                 partition="0") == RECORDS - COMMITTED
    assert value(after, "gateway_partition_high_watermark", topic="metered", partition="0") == RECORDS


async def test_connections_gauge_counts_open_connections(gateway):
    before = samples(await scrape(gateway))
    async with await Client.connect(native_url(gateway)):
        during = samples(await scrape(gateway))
    assert moved(before, during, "gateway_connections", listener="native") == 1
    assert moved(before, during, "gateway_connections_accepted_total", listener="native") == 1
    await eventually(lambda: open_connections(gateway, "native", value(before, "gateway_connections",
                                                                       listener="native")),
                     what="native connection closed")


README = Path(__file__).resolve().parent.parent / "README.md"


def readme_metrics() -> list[str]:
    """The metric names in the README's metrics table, in order."""
    return re.findall(r"^\| `(gateway_[a-z_]+)` \|", README.read_text(), re.MULTILINE)


async def test_readme_table_lists_exactly_the_exported_families(gateway, client):
    producer = await client.create_producer("listed")
    await producer.send(b"x")
    exported = re.findall(r"^# HELP (\S+) ", await scrape(gateway), re.MULTILINE)
    listed = readme_metrics()
    assert [n for n, k in Counter(listed).items() if k > 1] == []
    assert sorted(listed) == sorted(set(exported))
