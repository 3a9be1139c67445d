"""Metadata, InitProducerId, OffsetForLeaderEpoch and Fetch limits, checked on the raw responses."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode as KafkaError

from gateway.formats.records import BatchBuilder, build_batch
from gateway.kafka.dispatch import ApiKey, load_handlers
from tests.kafka_wire import call

load_handlers()


@pytest.fixture
async def conn(gateway):
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
    yield reader, writer
    writer.close()


def topics(names: list[str]) -> list[dict]:
    return [{"name": n, "topic_id": None} for n in names]


@pytest.mark.parametrize("version", [0, 1, 4, 5, 9, 12, 13])
async def test_metadata_advertises_this_gateway_and_auto_creates(gateway, conn, version):
    gateway.services.log.default_partitions = 3
    gateway.config.advertised_host = "gateway.internal"
    resp = await call(conn, ApiKey.METADATA, version, {"topics": topics(["fresh", "bad/name"]),
                                                        "allow_auto_topic_creation": True})
    [broker] = resp.brokers
    assert (broker.node_id, broker.host, broker.port) == (0, "gateway.internal", gateway.listeners["kafka"].port)
    fresh, bad = resp.topics
    assert fresh.error_code == KafkaError.none and fresh.name == "fresh"
    assert [(p.partition_index, p.leader_id, tuple(p.replica_nodes)) for p in fresh.partitions] == [
        (0, 0, (0,)), (1, 0, (0,)), (2, 0, (0,))]
    assert bad.error_code == KafkaError.invalid_topic_exception
    assert (await gateway.services.log.topic("fresh", create=False)).partitions == 3


async def test_metadata_auto_creation_can_be_refused(gateway, conn):
    resp = await call(conn, ApiKey.METADATA, 9, {"topics": topics(["a"]), "allow_auto_topic_creation": False})
    assert resp.topics[0].error_code == KafkaError.unknown_topic_or_partition
    gateway.config.auto_create_topics = False  # the gateway's setting (allow.auto.create.topics)
    resp = await call(conn, ApiKey.METADATA, 9, {"topics": topics(["a"]), "allow_auto_topic_creation": True})
    assert resp.topics[0].error_code == KafkaError.unknown_topic_or_partition
    await gateway.services.log.create_topic("b", 2)
    everything = await call(conn, ApiKey.METADATA, 9, {"topics": None})
    assert [(t.name, len(t.partitions)) for t in everything.topics] == [("b", 2)]
    nothing = await call(conn, ApiKey.METADATA, 9, {"topics": []})
    assert nothing.topics == ()


async def test_init_producer_id_allocates_a_new_id_every_time(conn):
    """Also for a request naming the producer's id and epoch: Kafka 4.4 hands an idempotent
    producer a new id at epoch 0 rather than bumping its epoch (the generated writes found it)."""
    first = await call(conn, ApiKey.INIT_PRODUCER_ID, 0, {"transactional_id": None, "transaction_timeout": 1000})
    second = await call(conn, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 1000,
                                                           "producer_id": -1, "producer_epoch": -1})
    assert first.error_code == second.error_code == KafkaError.none
    assert first.producer_id != second.producer_id and first.producer_epoch == second.producer_epoch == 0
    bumped = await call(conn, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 1000,
                                                           "producer_id": second.producer_id, "producer_epoch": 0})
    assert bumped.error_code == KafkaError.none and bumped.producer_epoch == 0
    assert bumped.producer_id not in (first.producer_id, second.producer_id)


async def test_offset_for_leader_epoch_answers_the_high_watermark(gateway, conn):
    await gateway.services.log.create_topic("ep", 1)
    await gateway.services.log.append([("ep", 0, build_batch([(None, b"x", [])] * 4))])
    resp = await call(conn, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
        {"topic": "ep", "partitions": [{"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0},
                                       {"partition": 7, "current_leader_epoch": 0, "leader_epoch": 0}]}]})
    ok, missing = resp.topics[0].partitions
    assert (ok.error_code, ok.leader_epoch, ok.end_offset) == (KafkaError.none, 0, 4)
    assert missing.error_code == KafkaError.unknown_topic_or_partition


def fetch_request(parts: list[tuple[str, int, int, int]], max_bytes: int, min_bytes: int = 0) -> dict:
    by_topic: dict[str, list[dict]] = {}
    for t, p, offset, part_max in parts:
        by_topic.setdefault(t, []).append({"partition": p, "fetch_offset": offset, "partition_max_bytes": part_max})
    return {"replica_id": -1, "max_wait": 0, "min_bytes": min_bytes, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}


async def test_fetch_respects_partition_and_response_byte_limits(gateway, conn):
    log = gateway.services.log
    await log.create_topic("lim", 2)
    batches = [build_batch([(None, bytes(100), [])] * 3) for _ in range(4)]
    size = len(batches[0])
    for p in (0, 1):
        for b in batches:
            await log.append([("lim", p, b)])

    def returned(resp) -> list[int]:
        return [len(p.records or b"") // size for t in resp.responses for p in t.partitions]

    # partition limit: two batches fit; as in Kafka, a batch over the limit goes only as the response's first
    resp = await call(conn, ApiKey.FETCH, 11, fetch_request([("lim", 0, 0, 2 * size + 1), ("lim", 1, 0, 1)], 10**6))
    assert returned(resp) == [2, 0]
    resp = await call(conn, ApiKey.FETCH, 11, fetch_request([("lim", 1, 0, 1)], 10**6))
    assert returned(resp) == [1]
    # response limit: counts across partitions; the first batch of the response always goes
    resp = await call(conn, ApiKey.FETCH, 11, fetch_request([("lim", 0, 0, 10**6), ("lim", 1, 0, 10**6)], 3 * size))
    assert returned(resp) == [3, 0]
    resp = await call(conn, ApiKey.FETCH, 4, fetch_request([("lim", 0, 0, 10**6)], 1))
    assert returned(resp) == [1]
    # from the middle of a batch: that whole batch comes back, its offsets intact
    resp = await call(conn, ApiKey.FETCH, 12, fetch_request([("lim", 1, 7, 10**6)], 10**6))
    p = resp.responses[0].partitions[0]
    assert int.from_bytes(p.records[:8], "big") == 6 and (p.high_watermark, p.log_start_offset) == (12, 0)


async def test_list_offsets_latest_is_the_last_stable_offset_for_read_committed(gateway, conn):
    log = gateway.services.log
    await log.create_topic("lso", 1)
    await log.append([("lso", 0, build_batch([(None, b"done", [])] * 2))])
    txn = BatchBuilder(producer_id=77, producer_epoch=0, base_sequence=0, transactional=True)
    txn.append(b"pending")
    await log.append([("lso", 0, txn.build())])

    async def latest(isolation: int) -> int:
        resp = await call(conn, ApiKey.LIST_OFFSETS, 4, {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": "lso", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        [p] = resp.topics[0].partitions
        assert p.error_code == KafkaError.none
        return p.offset

    assert await latest(0) == 3  # the high watermark
    assert await latest(1) == 2  # below the open transaction
