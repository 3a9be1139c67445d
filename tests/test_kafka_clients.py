"""Real Kafka clients (aiokafka, kafka-python, confluent-kafka) against the in-process gateway."""

from __future__ import annotations

import os

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError

from gateway.formats.partitioner import partition_for_key
from gateway.formats.records import Compression, iter_records
from gateway.kafka.dispatch import ApiKey, lookup
from gateway.store.resp import BIG
from tests.conftest import kafka_bootstrap
from tests.kafka_clients import CLIENTS, IDEMPOTENT, compression, consume, produce

pytestmark = pytest.mark.kafka

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def keyed(n: int, tag: str) -> list[tuple[bytes | None, bytes]]:
    """Compressible values, so every client really compresses (librdkafka skips it when it would not pay)."""
    return [(f"key-{i % 7}".encode(), f"{tag}-{i}-".encode() + b"payload " * 40) for i in range(n)]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
async def test_round_trip_with_each_compression(gateway, client, codec):
    """Keys land where Kafka puts them, offsets are contiguous, the codec is stored as sent."""
    bs = kafka_bootstrap(gateway)
    topic = f"rt-{client}-{codec}"
    await gateway.services.log.create_topic(topic, 3)
    messages = keyed(30, codec)
    placed = await produce(client, bs, topic, messages, **compression(client, codec))
    for (key, _), (partition, _) in zip(messages, placed, strict=True):
        assert partition == partition_for_key(key, 3)
    for p in range(3):
        mine = [(off, m) for m, (part, off) in zip(messages, placed, strict=True) if part == p]
        assert [off for off, _ in mine] == list(range(len(mine)))
        got = await consume(client, bs, topic, p, 0, len(mine))
        assert [(o, k, v) for _, o, k, v in got] == [(o, k, v) for o, (k, v) in mine]
        # a fetch from the middle of a (compressed) batch starts at the asked offset
        if len(mine) > 2:
            got = await consume(client, bs, topic, p, 2, len(mine) - 2)
            assert [o for _, o, _, _ in got] == list(range(2, len(mine)))
    sl = await gateway.services.log.read(topic, 0, 0, 1000)
    stored = {Compression(e.batch[22] & 0x07) for e in sl.entries}
    assert stored == {expected_codec(client, codec)}


def expected_codec(client: str, codec: str) -> Compression:
    """librdkafka uses lz4 only with brokers that advertise FindCoordinator (its proxy for Kafka 0.8.2+)."""
    if client == "confluent" and codec == "lz4" and lookup(ApiKey.FIND_COORDINATOR, 0) is None:
        return Compression.NONE
    return Compression.parse(codec)


async def test_across_clients_same_offsets_and_partitions(gateway):
    """What one client produced, every other reads back identically."""
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic("shared", 4)
    expected: dict[int, list[tuple[int, bytes | None, bytes]]] = {p: [] for p in range(4)}
    for client in CLIENTS:
        messages = keyed(20, client)
        for (key, value), (p, off) in zip(messages, await produce(client, bs, "shared", messages), strict=True):
            expected[p].append((off, key, value))
    for client in CLIENTS:
        for p, records in expected.items():
            got = await consume(client, bs, "shared", p, 0, len(records))
            assert [(o, k, v) for _, o, k, v in got] == records, client


@pytest.mark.parametrize("client", CLIENTS)
async def test_idempotent_retry_is_not_duplicated(gateway, client):
    """The gateway stores a batch, then drops the connection before answering: the retry dedupes."""
    bs = kafka_bootstrap(gateway)
    log = gateway.services.log
    await log.create_topic("once", 1)
    append = log.append
    dropped = []

    async def store_then_drop(items, **options):
        results = await append(items, **options)
        if not dropped:
            dropped.append(items)
            raise ConnectionResetError("injected: reply lost after the append")
        return results

    log.append = store_then_drop
    try:
        messages = [(None, f"m{i}".encode()) for i in range(10)]
        placed = await produce(client, bs, "once", messages, **IDEMPOTENT[client])
    finally:
        log.append = append
    assert dropped, "the fault was never injected"
    assert sorted(off for _, off in placed) == list(range(10))
    start, hw = await log.bounds("once", 0)
    assert (start, hw) == (0, 10)
    sl = await log.read("once", 0, 0, 1000)
    values = [r.value for e in sl.entries for r in iter_records(e.batch, e.base_offset)]
    assert values == [v for _, v in messages]


async def test_large_batches_and_max_message_bytes(gateway):
    """A batch near max.message.bytes goes through whole; one over it is refused, not stored."""
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic("big", 1, {"max.message.bytes": "2000000"})
    producer = AIOKafkaProducer(bootstrap_servers=bs, max_request_size=8 * 1024 * 1024)
    await producer.start()
    try:
        big = bytes(range(256)) * (1_900_000 // 256)
        assert (await producer.send_and_wait("big", big)).offset == 0
        with pytest.raises(MessageSizeTooLargeError):
            await producer.send_and_wait("big", big * 2)
    finally:
        await producer.stop()
    [(_, offset, _, value)] = await consume("aiokafka", bs, "big", 0, 0, 1)
    assert (offset, value) == (0, big)
    assert await gateway.services.log.bounds("big", 0) == (0, 1)


@pytest.mark.parametrize("consumer", CLIENTS)
async def test_kafka_consumers_read_large_batches_whole(gateway, consumer):
    """Batches past the direct-read size, from the start and from the middle of one, read-committed
    or not: every record, in order, once."""
    bs = kafka_bootstrap(gateway)
    messages = [(None, os.urandom(1000) + i.to_bytes(4, "big")) for i in range(3000)]
    placed = await produce("confluent", bs, "large", messages, **{"linger.ms": 200, "batch.size": 1 << 20})
    assert [o for _, o in placed] == list(range(3000))
    assert max(len(e.batch) for e in (await gateway.store.log.read("large", 0, 0, 64)).entries) > BIG
    for start, options in [(0, {}), (1234, {}), (0, isolation(consumer))]:
        got = await consume(consumer, bs, "large", 0, start, 3000 - start, **options)
        assert [(o, v) for _, o, _, v in got] == [(i, messages[i][1]) for i in range(start, 3000)]
    assert gateway.store.log.direct._conns  # the large batches went the direct way


def isolation(client: str) -> dict[str, object]:
    return {"isolation_level": "read_committed"} if client != "confluent" else {"isolation.level": "read_committed"}
