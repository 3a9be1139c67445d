"""One topic, two faces: what the native client writes Kafka clients read, and the other way round."""

from __future__ import annotations

import asyncio

import pytest

from gateway.client import Client
from gateway.formats.partitioner import partition_for_key
from tests.conftest import kafka_bootstrap, native_url
from tests.kafka_clients import CLIENTS, consume, produce

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("client", CLIENTS)
async def test_native_and_kafka_share_partitions_offsets_and_records(gateway, client):
    await gateway.services.log.create_topic("both", 3)
    keys = [f"k{i}".encode() for i in range(12)]
    async with await Client.connect(native_url(gateway)) as native:
        async with await native.create_producer("both", linger_ms=2) as producer:
            ids = await asyncio.gather(*(producer.send(b"native-" + k, key=k) for k in keys))
    for k, mid in zip(keys, ids, strict=True):
        assert mid.partition == partition_for_key(k, 3)  # the same key -> partition as every Kafka client
    placed = await produce(client, kafka_bootstrap(gateway), "both", [(k, b"kafka-" + k) for k in keys])
    expected: dict[int, list[tuple[int, bytes, bytes]]] = {p: [] for p in range(3)}
    for k, mid in zip(keys, ids, strict=True):
        expected[mid.partition].append((mid.offset, k, b"native-" + k))
    for k, (p, off) in zip(keys, placed, strict=True):
        assert p == partition_for_key(k, 3)
        expected[p].append((off, k, b"kafka-" + k))
    for p, records in expected.items():
        records.sort()
        assert [o for o, _, _ in records] == list(range(len(records)))  # one offset sequence per partition
        got = await consume(client, kafka_bootstrap(gateway), "both", p, 0, len(records))
        assert [(o, k, v) for _, o, k, v in got] == records

    # the native face reads back the Kafka clients' records too
    async with await Client.connect(native_url(gateway)) as native:
        async with await native.subscribe("both", "reader", initial_position="earliest") as consumer:
            seen = set()
            for _ in range(2 * len(keys)):
                msg = await consumer.receive(timeout=10)
                seen.add((msg.partition, msg.offset, msg.key, msg.value))
                await consumer.acknowledge(msg)
    assert seen == {(p, o, k, v) for p, rs in expected.items() for o, k, v in rs}
