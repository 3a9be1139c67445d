"""Produce v13, OffsetCommit v10 and OffsetFetch v10 name topics by id: records and offsets land
on the topic the id names now, an id no topic has (a topic deleted, or made again under its name)
is UNKNOWN_TOPIC_ID, and what goes in by id comes out by name. No client of the suite sends these
versions (confluent-kafka 2.16 stops at Produce v10 and OffsetCommit/OffsetFetch v9, kafka-python
3.0 at Produce v9 and OffsetCommit v8; Kafka 4.2's Java clients send them), so these speak the wire."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode as KafkaError

from gateway.formats.records import build_batch
from gateway.kafka.dispatch import ApiKey
from tests.test_gateways import ask
from tests.test_kafka_topic_ids import topic_id

pytestmark = pytest.mark.kafka

GROUP = "by-id"


async def commit(gw, topics: list[tuple[uuid.UUID | None, list[tuple[int, int]]]], version: int = 10) -> list:
    """Commit (partition, offset) pairs per topic id as a group without members does (epoch -1)."""
    resp = await ask(gw, ApiKey.OFFSET_COMMIT, version, {
        "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"topic_id": tid, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": "m"}
            for p, o in parts]} for tid, parts in topics],
    })
    return [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in resp.topics]


async def fetch(gw, topics: list[tuple[uuid.UUID | None, list[int]]] | None, version: int = 10) -> object:
    resp = await ask(gw, ApiKey.OFFSET_FETCH, version, {"require_stable": False, "groups": [{
        "group_id": GROUP, "member_id": None, "member_epoch": -1,
        "topics": None if topics is None else [{"topic_id": tid, "name": "", "partition_indexes": ps}
                                               for tid, ps in topics]}]})
    [g] = resp.groups
    assert g.error_code == KafkaError.none
    return sorted((t.topic_id, [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions])
                  for t in g.topics)


async def test_offsets_committed_and_fetched_by_topic_id(gateway):
    log = gateway.services.log
    await log.create_topic("ids-a", 2)
    await log.create_topic("ids-b", 1)
    a, b, nobody = await topic_id(gateway, "ids-a"), await topic_id(gateway, "ids-b"), uuid.uuid4()

    assert await commit(gateway, [(a, [(0, 5), (1, 7)]), (nobody, [(0, 1)]), (b, [(0, 3)])]) == [
        (a, [(0, KafkaError.none), (1, KafkaError.none)]),
        (nobody, [(0, KafkaError.unknown_topic_id)]),
        (b, [(0, KafkaError.none)]),
    ]
    assert await fetch(gateway, [(a, [0, 1]), (nobody, [0])]) == sorted([
        (a, [(0, 5, KafkaError.none), (1, 7, KafkaError.none)]),
        (nobody, [(0, -1, KafkaError.unknown_topic_id)]),
    ])
    # every offset of the group, each topic by its id
    assert await fetch(gateway, None) == sorted([
        (a, [(0, 5, KafkaError.none), (1, 7, KafkaError.none)]), (b, [(0, 3, KafkaError.none)])])
    # v9 names the same offsets
    resp = await ask(gateway, ApiKey.OFFSET_FETCH, 9, {"require_stable": False, "groups": [{
        "group_id": GROUP, "member_id": None, "member_epoch": -1,
        "topics": [{"name": "ids-a", "partition_indexes": [1]}]}]})
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in resp.groups[0].topics] == [("ids-a", [7])]


async def test_the_id_of_a_topic_made_again_is_refused(gateway):
    log = gateway.services.log
    await log.create_topic("ids-again", 1)
    old = await topic_id(gateway, "ids-again")
    assert await commit(gateway, [(old, [(0, 4)])]) == [(old, [(0, KafkaError.none)])]
    await log.delete_topic("ids-again")
    await log.create_topic("ids-again", 1)
    new = await topic_id(gateway, "ids-again")

    assert await commit(gateway, [(old, [(0, 9)])]) == [(old, [(0, KafkaError.unknown_topic_id)])]
    assert await fetch(gateway, [(old, [0])]) == [(old, [(0, -1, KafkaError.unknown_topic_id)])]
    assert await commit(gateway, [(new, [(0, 2)])]) == [(new, [(0, KafkaError.none)])]
    assert await fetch(gateway, [(new, [0])]) == [(new, [(0, 2, KafkaError.none)])]
    assert await commit(gateway, [(None, [(0, 1)])]) == [(None, [(0, KafkaError.unknown_topic_id)])]


async def produce(gw, topics: list[tuple[uuid.UUID | None, list[int]]], value: bytes) -> list:
    resp = await ask(gw, ApiKey.PRODUCE, 13, {
        "transactional_id": None, "acks": -1, "timeout": 5000,
        "topic_data": [{"topic_id": tid, "partition_data": [
            {"index": p, "records": build_batch([(None, value, [])])} for p in ps]} for tid, ps in topics],
    })
    return [(t.topic_id, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses])
            for t in resp.responses]


async def test_produce_by_topic_id(gateway):
    log = gateway.services.log
    await log.create_topic("ids-p", 2)
    old, nobody = await topic_id(gateway, "ids-p"), uuid.uuid4()
    assert await produce(gateway, [(old, [1]), (nobody, [0]), (None, [0])], b"first") == [
        (old, [(1, KafkaError.none, 0)]),
        (nobody, [(0, KafkaError.unknown_topic_id, -1)]),
        (None, [(0, KafkaError.unknown_topic_id, -1)]),
    ]
    assert await produce(gateway, [(old, [1, 2])], b"second") == [
        (old, [(1, KafkaError.none, 1), (2, KafkaError.unknown_topic_or_partition, -1)])]
    assert await log.bounds("ids-p", 1) == (0, 2)

    await log.delete_topic("ids-p")
    await log.create_topic("ids-p", 2)
    new = await topic_id(gateway, "ids-p")
    assert await produce(gateway, [(old, [1])], b"stale") == [(old, [(1, KafkaError.unknown_topic_id, -1)])]
    assert await log.bounds("ids-p", 1) == (0, 0)  # the old incarnation's id wrote nothing to the new one
    assert await produce(gateway, [(new, [1])], b"fresh") == [(new, [(1, KafkaError.none, 0)])]
