"""DescribeTopicPartitions (KIP-966): topics with their ids and partitions in name order, paged by
ResponsePartitionLimit and the cursor, with Kafka's error codes; kafka-python's admin client
pages through it. (confluent-kafka's describe_topics sends Metadata instead.)"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kafka import KafkaAdminClient
from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.security import Operation, ResourceType
from gateway.kafka.dispatch import ApiKey
from tests.conftest import kafka_bootstrap
from tests.kafka_clients import sasl
from tests.test_gateways import ask
from tests.test_kafka_topic_ids import topic_id
from tests.test_security import allow, secure  # noqa: F401 (the fixture)

pytestmark = pytest.mark.kafka

SIZES = {"alpha": 3, "beta": 1, "gamma": 2}


@pytest.fixture
async def topics(gateway) -> dict[str, uuid.UUID]:
    for name, n in SIZES.items():
        await gateway.services.log.create_topic(name, n)
    return {name: await topic_id(gateway, name) for name in SIZES}


async def describe(gw, names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None) -> object:
    return await ask(gw, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": n} for n in names], "response_partition_limit": limit,
        "cursor": None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]},
    })


def pages(resp) -> tuple[list[tuple[str, list[int]]], tuple[str, int] | None]:
    cursor = resp.next_cursor
    return ([(t.name, [p.partition_index for p in t.partitions]) for t in resp.topics],
            None if cursor is None else (cursor.topic_name, cursor.partition_index))


async def test_every_topic_in_name_order_with_its_id(gateway, topics):
    resp = await describe(gateway, [])
    assert pages(resp) == ([("alpha", [0, 1, 2]), ("beta", [0]), ("gamma", [0, 1])], None)
    assert {t.name: t.topic_id for t in resp.topics} == topics
    assert all(t.error_code == KafkaError.none and not t.is_internal for t in resp.topics)
    node = gateway.services.config.node_id
    p = resp.topics[0].partitions[0]
    assert (p.error_code, p.leader_id, p.replica_nodes, p.isr_nodes) == (KafkaError.none, node, (node,), (node,))


async def test_pages_by_partition_limit_and_cursor(gateway, topics):
    # the budget ends inside a topic: the cursor names the first partition left out
    assert pages(await describe(gateway, [], limit=2)) == ([("alpha", [0, 1])], ("alpha", 2))
    # it ends exactly at a topic's end: the cursor is the next topic's first partition
    assert pages(await describe(gateway, [], limit=1, cursor=("alpha", 2))) == ([("alpha", [2])], ("beta", 0))
    assert pages(await describe(gateway, [], limit=4)) == ([("alpha", [0, 1, 2]), ("beta", [0])], ("gamma", 0))
    assert pages(await describe(gateway, [], cursor=("beta", 0))) == ([("beta", [0]), ("gamma", [0, 1])], None)
    # named topics page the same way, from the cursor on
    assert pages(await describe(gateway, ["gamma", "alpha"], limit=4)) == (
        [("alpha", [0, 1, 2]), ("gamma", [0])], ("gamma", 1))
    assert pages(await describe(gateway, ["gamma", "alpha"], cursor=("gamma", 1))) == ([("gamma", [1])], None)


async def test_errors_as_kafka_answers_them(gateway, topics):
    resp = await describe(gateway, ["missing", "beta", "bad/name"])
    got = {t.name: (t.error_code, t.topic_id, len(t.partitions)) for t in resp.topics}
    assert got == {"bad/name": (KafkaError.invalid_topic_exception, None, 0),
                   "beta": (KafkaError.none, topics["beta"], 1),
                   "missing": (KafkaError.unknown_topic_or_partition, None, 0)}
    # a cursor on a topic not asked for fails the request
    resp = await describe(gateway, ["alpha", "beta"], cursor=("gamma", 0))
    assert [(t.name, t.error_code, t.partitions) for t in resp.topics] == [
        ("alpha", KafkaError.invalid_request, ()), ("beta", KafkaError.invalid_request, ())]
    # a topic deleted and made again answers its new id
    await gateway.services.log.delete_topic("beta")
    await gateway.services.log.create_topic("beta", 1)
    [t] = (await describe(gateway, ["beta"])).topics
    assert t.topic_id not in (None, topics["beta"]) and t.topic_id == await topic_id(gateway, "beta")


async def test_kafka_python_pages_through_the_topics(gateway, topics):
    def walk() -> list[tuple[str, str, int]]:
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap(gateway))
        try:
            seen, cursor = [], None
            while True:
                page = admin.describe_topic_partitions(list(SIZES), response_partition_limit=2, cursor=cursor)
                seen += [(t["name"], str(t["topic_id"]), p["partition_index"])
                         for t in page["topics"] for p in t["partitions"]]
                if (cursor := page["next_cursor"]) is None:
                    return seen
        finally:
            admin.close()

    assert await asyncio.to_thread(walk) == [
        (name, str(topics[name]), p) for name in sorted(SIZES) for p in range(SIZES[name])]


async def test_a_topic_the_principal_may_not_describe(secure):  # noqa: F811
    """Named: TOPIC_AUTHORIZATION_FAILED with the zero id, after the others and outside the paging;
    when listing every topic it is simply left out."""
    for name, n in SIZES.items():
        await secure.services.log.create_topic(name, n)
    await allow(secure, "User:alice", ResourceType.TOPIC, "alpha", Operation.DESCRIBE)
    await allow(secure, "User:alice", ResourceType.TOPIC, "gamma", Operation.DESCRIBE)

    def as_alice(names: list[str]) -> list[tuple[str, int, object, list[int]]]:
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap(secure),
                                 **sasl("kafka-python", "SCRAM-SHA-256", "alice", "alice-secret"))
        try:
            page = admin.describe_topic_partitions(names, response_partition_limit=4)
        finally:
            admin.close()
        return [(t["name"], t["error_code"], t["topic_id"], [p["partition_index"] for p in t["partitions"]])
                for t in page["topics"]]

    named = await asyncio.to_thread(as_alice, ["beta", "gamma", "alpha"])
    assert [(n, e, [*ps]) for n, e, _, ps in named] == [
        ("alpha", KafkaError.none, [0, 1, 2]), ("gamma", KafkaError.none, [0]),
        ("beta", KafkaError.topic_authorization_failed, [])]
    assert named[2][2] in (None, uuid.UUID(int=0))
    assert [n for n, *_ in await asyncio.to_thread(as_alice, [])] == ["alpha", "gamma"]
