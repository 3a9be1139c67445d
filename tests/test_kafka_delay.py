"""Delayed delivery through the Kafka face: delay headers on topics that enable it."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka as ck
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.conftest import kafka_bootstrap

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster

pytestmark = pytest.mark.kafka


async def read_all(bs: str, topic: str, count: int, timeout: float = 15.0) -> list[tuple[bytes, float]]:
    """(value, arrival time) of the first `count` records of partition 0."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    out: list[tuple[bytes, float]] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=100)
            out += [(r.value, time.monotonic()) for r in batch.get(tp, [])]
    finally:
        await consumer.stop()
    return out


async def test_delay_headers_hold_records_until_due(gateway):
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic("later", 1, {"delayed.delivery.enable": "true"})
    producer = AIOKafkaProducer(bootstrap_servers=bs)
    await producer.start()
    start = time.monotonic()
    try:
        now_ms = int(time.time() * 1000)
        # margins wide enough that a busy machine's slow send cannot make either record due on arrival
        held = await (await producer.send("later", b"after-2000", headers=[("x-deliver-after", b"2000")]))
        at = await (await producer.send("later", b"at-1500", headers=[("x-deliver-at", str(now_ms + 1500).encode())]))
        plain = await (await producer.send("later", b"now"))
    finally:
        await producer.stop()
    assert (held.offset, at.offset) == (-1, -1)  # not in the log yet: no offset to report
    assert plain.offset == 0
    got = await read_all(bs, "later", 3)
    assert [v for v, _ in got] == [b"now", b"at-1500", b"after-2000"]
    assert got[2][1] - start >= 1.95  # not delivered before its time
    stats = await gateway.services.delay.stats("later", 0)
    assert stats.messages == 0


async def test_other_topics_ignore_delay_headers(gateway):
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic("plain", 1)

    def produce() -> int:
        p = ck.Producer({"bootstrap.servers": bs})
        offsets: list[int] = []
        p.produce("plain", value=b"v", headers=[("x-deliver-after", b"60000")],
                  on_delivery=lambda err, msg: offsets.append(msg.offset()))
        p.flush(10)
        return offsets[0]

    assert await asyncio.to_thread(produce) == 0
    assert [v for v, _ in await read_all(bs, "plain", 1)] == [b"v"]


async def test_a_transactional_delayed_record_waits_for_the_commit(gateway):
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic("txlater", 1, {"delayed.delivery.enable": "true"})

    def run() -> None:
        p = ck.Producer({"bootstrap.servers": bs, "transactional.id": "delayed-tx"})
        p.init_transactions(20)
        p.begin_transaction()
        p.produce("txlater", value=b"dropped", headers=[("x-deliver-after", b"100")])
        p.flush(10)
        p.abort_transaction(20)
        p.begin_transaction()
        p.produce("txlater", value=b"kept", headers=[("x-deliver-after", b"100")])
        p.commit_transaction(20)

    await asyncio.to_thread(run)
    got = await read_all(bs, "txlater", 2, timeout=3)
    assert [v for v, _ in got] == [b"kept"]
