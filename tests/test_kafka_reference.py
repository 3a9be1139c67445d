"""The real Apache Kafka 4.4 broker (the `kafka_broker` fixture) beside the gateway: one Python client
scenario run against both gets the same answers."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import kafka_bootstrap
from tests.kafka_clients import consume, create_topic, produce

pytestmark = [pytest.mark.jvm, pytest.mark.kafka]


async def test_one_client_scenario_gets_the_same_answers_from_kafka_and_the_gateway(gateway, kafka_broker):
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    messages = [(f"key-{i % 7}".encode(), f"value-{i}".encode()) for i in range(30)]

    async def scenario(bs: str) -> tuple[list[tuple[int, int]], list[list[tuple]]]:
        await create_topic(bs, topic, 3)
        acks = await produce("confluent", bs, topic, messages)
        counts = [sum(1 for p, _ in acks if p == partition) for partition in range(3)]
        return acks, [await consume("confluent", bs, topic, p, 0, n) for p, n in enumerate(counts)]

    on_kafka = await scenario(kafka_broker.bootstrap)
    on_gateway = await scenario(kafka_bootstrap(gateway))
    assert on_gateway == on_kafka
    acks, records = on_kafka
    assert sorted(value for partition in records for *_, value in partition) == sorted(v for _, v in messages)
