"""Real Kafka clients (aiokafka, kafka-python, confluent-kafka) against the in-process gateway."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.conftest import kafka_bootstrap

pytestmark = pytest.mark.kafka


async def test_aiokafka_produce_and_consume_from_the_middle_of_a_batch(gateway):
    bs = kafka_bootstrap(gateway)
    producer = AIOKafkaProducer(bootstrap_servers=bs, linger_ms=50)
    await producer.start()
    try:
        futs = [await producer.send("mid", f"v{i}".encode(), key=b"k") for i in range(10)]
        offsets = [(await f).offset for f in futs]
    finally:
        await producer.stop()
    assert offsets == list(range(10))
    consumer = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition("mid", 0)
        consumer.assign([tp])
        consumer.seek(tp, 4)
        got = []
        while len(got) < 6:
            batch = await consumer.getmany(tp, timeout_ms=5000)
            assert batch, "no records within the timeout"
            got += batch[tp]
    finally:
        await consumer.stop()
    assert [(r.offset, r.value) for r in got] == [(i, f"v{i}".encode()) for i in range(4, 10)]
