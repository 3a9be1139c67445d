"""Watermark markers are control entries Kafka clients skip: aiokafka, kafka-python and
confluent-kafka, read_uncommitted and read_committed, see the records alone and move past every
marker, one at the very end of the partition included."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka as ck
import kafka
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from gateway.client import Client
from tests.conftest import kafka_bootstrap, native_url

pytestmark = pytest.mark.kafka

TIMEOUT = 20.0
Read = tuple[list[tuple[int, bytes]], int]  # (offset, value) of each record, and the position after


async def aio_read(bs: str, topic: str, isolation: str, count: int, end: int) -> Read:
    consumer = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, isolation_level=isolation)
    await consumer.start()
    out: list[tuple[int, bytes]] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + TIMEOUT
        while (len(out) < count or await consumer.position(tp) < end) and time.monotonic() < deadline:
            got = await consumer.getmany(tp, timeout_ms=200)
            out += [(r.offset, r.value) for r in got.get(tp, [])]
        return out, await consumer.position(tp)
    finally:
        await consumer.stop()


def kp_read(bs: str, topic: str, isolation: str, count: int, end: int) -> Read:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, isolation_level=isolation)
    out: list[tuple[int, bytes]] = []
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + TIMEOUT
        while (len(out) < count or consumer.position(tp) < end) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                out += [(r.offset, r.value) for r in records]
        return out, consumer.position(tp)
    finally:
        consumer.close()


def ck_read(bs: str, topic: str, isolation: str, count: int, end: int) -> Read:
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": "unused-manual-assignment",
                            "enable.auto.commit": False, "isolation.level": isolation})
    out: list[tuple[int, bytes]] = []

    def position() -> int:
        return int(consumer.position([ck.TopicPartition(topic, 0)])[0].offset)

    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT
        while (len(out) < count or position() < end) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out.append((msg.offset(), msg.value()))
        return out, position()
    finally:
        consumer.close()


READERS = {
    "aiokafka": aio_read,
    "kafka-python": lambda *a: asyncio.to_thread(kp_read, *a),
    "confluent": lambda *a: asyncio.to_thread(ck_read, *a),
}


async def test_kafka_clients_skip_watermark_markers_and_move_past_them(gateway):
    await gateway.services.log.create_topic("wm-kafka", 1)
    async with await Client.connect(native_url(gateway)) as client:
        a = await client.create_producer("wm-kafka", "a", batching=False)
        m0 = await a.send(b"m0", event_time=900)
        await a.send_watermark(1000)
        await a.send(b"m1", event_time=1500)
        async with await client.new_transaction(timeout=30) as committed:
            await a.send(b"m2", txn=committed, event_time=2100)
            await a.send_watermark(2000, txn=committed)
        aborted = await client.new_transaction(timeout=30)
        await a.send(b"aborted", txn=aborted, event_time=50)
        await a.send_watermark(100, txn=aborted)
        await aborted.abort()
        await a.send_watermark(3000)
        (last,) = await a.mark_idle()  # the very last entry of the partition
        end = last + 1
        assert m0.offset == 0 and end == 11
        assert await client.watermark("wm-kafka", {0: last}) == 3000
        assert await client.watermark("wm-kafka", {0: end}) is None

    bs = kafka_bootstrap(gateway)
    expected = {
        "read_uncommitted": [(0, b"m0"), (2, b"m1"), (3, b"m2"), (6, b"aborted")],
        "read_committed": [(0, b"m0"), (2, b"m1"), (3, b"m2")],
    }
    for name, read in READERS.items():
        for isolation, records in expected.items():
            got, position = await read(bs, "wm-kafka", isolation, len(records), end)
            assert (got, position) == (records, end), (name, isolation)
