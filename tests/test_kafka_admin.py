"""Topic admin through confluent_kafka.admin.AdminClient and kafka-python's KafkaAdminClient."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewPartitions as KNewPartitions
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import TopicAlreadyExistsError

from gateway.formats.records import build_batch
from tests.conftest import kafka_bootstrap

pytestmark = pytest.mark.kafka
TIMEOUT = 20


def wait_all(futures: dict) -> dict:
    return {k: f.result(timeout=TIMEOUT) for k, f in futures.items()}


def _confluent_admin(bs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    # validate_only checks but creates nothing
    wait_all(admin.create_topics([NewTopic("ck-a", 2, config={"retention.ms": "1000"})], validate_only=True))
    assert "ck-a" not in admin.list_topics(timeout=TIMEOUT).topics
    wait_all(admin.create_topics([NewTopic("ck-a", 2, config={"retention.ms": "60000"})]))
    md = admin.list_topics(timeout=TIMEOUT)
    assert len(md.topics["ck-a"].partitions) == 2
    assert [b.id for b in md.brokers.values()] == [0]
    with pytest.raises(KafkaException) as exc:
        wait_all(admin.create_topics([NewTopic("ck-a", 1)]))
    assert exc.value.args[0].name() == "TOPIC_ALREADY_EXISTS"
    with pytest.raises(KafkaException) as exc:
        wait_all(admin.create_topics([NewTopic("ck-bad", 1, config={"no.such.config": "1"})]))
    assert exc.value.args[0].name() == "INVALID_CONFIG"

    wait_all(admin.create_partitions([NewPartitions("ck-a", 5)]))
    assert len(admin.list_topics("ck-a", timeout=TIMEOUT).topics["ck-a"].partitions) == 5

    res = ConfigResource(ResourceType.TOPIC, "ck-a")
    [configs] = wait_all(admin.describe_configs([res])).values()
    assert configs["retention.ms"].value == "60000" and not configs["retention.ms"].is_default
    assert configs["max.message.bytes"].is_default

    alter = ConfigResource(ResourceType.TOPIC, "ck-a", set_config={"retention.bytes": "12345"})
    wait_all(admin.alter_configs([alter]))  # replaces the whole set: retention.ms goes back to its default
    [configs] = wait_all(admin.describe_configs([res])).values()
    assert configs["retention.bytes"].value == "12345" and configs["retention.ms"].is_default

    inc = ConfigResource(ResourceType.TOPIC, "ck-a", incremental_configs=[
        ConfigEntry("retention.ms", "5000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    wait_all(admin.incremental_alter_configs([inc]))
    [configs] = wait_all(admin.describe_configs([res])).values()
    assert configs["retention.ms"].value == "5000" and configs["retention.bytes"].is_default

    [broker] = wait_all(admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")])).values()
    assert broker["broker.id"].value == "0" and broker["broker.id"].is_read_only

    cluster = admin.describe_cluster().result(timeout=TIMEOUT)
    assert [n.id for n in cluster.nodes] == [0] and cluster.controller.id == 0

    wait_all(admin.delete_topics(["ck-a"]))
    assert "ck-a" not in admin.list_topics(timeout=TIMEOUT).topics


async def test_confluent_admin_client(gateway):
    await asyncio.to_thread(_confluent_admin, kafka_bootstrap(gateway))


async def test_confluent_delete_records(gateway):
    log = gateway.services.log
    await log.create_topic("ck-del", 2)
    await log.append([("ck-del", 0, build_batch([(None, b"x", [])] * 5))])

    def delete() -> list:
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap(gateway)})
        futures = admin.delete_records([TopicPartition("ck-del", 0, 2), TopicPartition("ck-del", 1, 9)])
        out = []
        for tp, f in futures.items():
            try:
                out.append((tp.partition, f.result(timeout=TIMEOUT).low_watermark))
            except KafkaException as exc:
                out.append((tp.partition, exc.args[0].name()))
        return sorted(out)

    assert await asyncio.to_thread(delete) == [(0, 2), (1, "OFFSET_OUT_OF_RANGE")]
    assert await log.bounds("ck-del", 0) == (2, 5)


def _kafka_python_admin(bs: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=TIMEOUT * 1000)
    try:
        admin.create_topics([KNewTopic("kp-a", 3, 1, topic_configs={"retention.ms": "60000"})])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([KNewTopic("kp-a", 1, 1)])
        assert "kp-a" in admin.list_topics()
        admin.create_partitions({"kp-a": KNewPartitions(4)})
        [desc] = admin.describe_topics(["kp-a"])
        assert len(desc["partitions"]) == 4

        modified = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-a")])
        assert {k: v["value"] for k, v in modified["topic"]["kp-a"].items()} == {"retention.ms": "60000"}
        # both AlterConfigs (which replaces the set) and IncrementalAlterConfigs keep the other keys
        for incremental in (False, True):
            admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-a", configs={"retention.bytes": "7"})],
                                incremental=incremental)
            every = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-a")], config_filter="all")
            configs = every["topic"]["kp-a"]
            assert (configs["retention.ms"]["value"], configs["retention.bytes"]["value"]) == ("60000", "7")
            assert configs["max.message.bytes"]["config_source"] == "DEFAULT_CONFIG"
        result = admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-a", configs={"retention.ms": "x"})])
        assert "InvalidConfigurationError" in str(result["topic"]["kp-a"])
        admin.delete_topics(["kp-a"])
        assert "kp-a" not in admin.list_topics()
    finally:
        admin.close()


async def test_kafka_python_admin_client(gateway):
    await asyncio.to_thread(_kafka_python_admin, kafka_bootstrap(gateway))


async def test_kafka_python_delete_records(gateway):
    log = gateway.services.log
    await log.create_topic("kp-del", 1)
    await log.append([("kp-del", 0, build_batch([(None, b"x", [])] * 5))])

    def delete() -> object:
        from kafka.structs import TopicPartition as KTopicPartition

        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap(gateway))
        try:
            return admin.delete_records({KTopicPartition("kp-del", 0): 3})
        finally:
            admin.close()

    result = await asyncio.to_thread(delete)
    assert [v["low_watermark"] for v in result.values()] == [3]
    assert await log.bounds("kp-del", 0) == (3, 5)
