"""Topic and broker configs, replication factors, ListOffsets' special timestamps and LogAppendTime,
through confluent-kafka's AdminClient, kafka-python's KafkaAdminClient and the raw protocol."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka as ck
import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic
from kio.schema.errors import ErrorCode as KafkaError

from gateway.clock import now_ms
from gateway.domain.topic_configs import LONG_MAX, TOPIC_CONFIGS, Change, Op
from gateway.errors import MessageTooLarge
from gateway.formats.records import ATTR_TIMESTAMP_LOG_APPEND, build_batch, parse_header
from gateway.kafka.dispatch import ApiKey, load_handlers
from gateway.server.gateway import Gateway
from tests import test_gateways
from tests.conftest import kafka_bootstrap
from tests.kafka_wire import call
from tests.test_gateways import ask

pytestmark = pytest.mark.kafka
TIMEOUT = 20

load_handlers()
two = test_gateways.two  # the fixture: two gateways on one Redis, each seeing the other

# What real programs send when they create their topics (partitions, configs). Their replication
# factors (3 in production) are left to the cluster's default here: one gateway, as a one-broker
# Kafka, refuses more than one (test_a_replication_factor_up_to_the_live_gateways_is_accepted).
REAL_WORLD: dict[str, tuple[int, dict[str, str]]] = {
    # Kafka Streams' repartition topics (RepartitionTopicConfig)
    "app-KSTREAM-AGGREGATE-repartition": (4, {"cleanup.policy": "delete", "segment.bytes": "52428800",
                                               "retention.ms": "-1", "message.timestamp.type": "CreateTime"}),
    # Debezium's schema history topic
    "dbhistory.inventory": (1, {"cleanup.policy": "delete", "retention.ms": str(LONG_MAX),
                                "retention.bytes": "-1"}),
    # a managed-cloud default set
    "orders": (6, {"min.insync.replicas": "2", "retention.ms": "604800000", "max.message.bytes": "2097164",
                   "compression.type": "producer", "unclean.leader.election.enable": "false"}),
    # log ingestion tuned for size
    "logs.ingest": (3, {"compression.type": "zstd", "compression.zstd.level": "6", "segment.bytes": "1073741824",
                        "segment.ms": "3600000", "retention.bytes": "10737418240"}),
    # an audit trail stamped by the broker
    "audit": (1, {"message.timestamp.type": "LogAppendTime", "min.insync.replicas": "2",
                  "message.timestamp.after.max.ms": "3600000"}),
    # MirrorMaker-style copies of a source topic's full config
    "mirror.events": (2, {
        "local.retention.ms": "-2", "local.retention.bytes": "-2", "flush.messages": "10000", "flush.ms": "1000",
        "preallocate": "true", "index.interval.bytes": "4096", "segment.index.bytes": "10485760",
        "segment.jitter.ms": "0", "file.delete.delay.ms": "60000",
        "message.timestamp.before.max.ms": str(LONG_MAX), "delete.retention.ms": "86400000",
        "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "0", "max.compaction.lag.ms": str(LONG_MAX),
        "leader.replication.throttled.replicas": "0:0,1:0", "follower.replication.throttled.replicas": "*",
        "compression.gzip.level": "5", "compression.lz4.level": "9", "remote.log.copy.disable": "false",
        "remote.log.delete.on.disable": "false", "remote.storage.enable": "false"}),
}
# ...and those that ask for compaction
COMPACTED: dict[str, tuple[int, dict[str, str]]] = {
    "connect-configs": (1, {"cleanup.policy": "compact"}),  # Kafka Connect's config topic
    "connect-offsets": (25, {"cleanup.policy": "compact"}),
    "connect-status": (5, {"cleanup.policy": "compact"}),
    "app-store-changelog": (4, {"cleanup.policy": "compact", "message.timestamp.type": "CreateTime"}),
    "app-window-changelog": (4, {"cleanup.policy": "compact,delete", "retention.ms": "86400000"}),
    "_schemas": (1, {"cleanup.policy": "compact"}),  # Schema Registry's store
}


def wait_all(futures: dict) -> dict:
    return {k: f.result(timeout=TIMEOUT) for k, f in futures.items()}


def _describe(admin: AdminClient, topic: str) -> dict:
    [configs] = wait_all(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])).values()
    return configs


def _real_world(bs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    wait_all(admin.create_topics([NewTopic(n, p, config=c) for n, (p, c) in REAL_WORLD.items()]))
    for name, (_, given) in REAL_WORLD.items():
        configs = _describe(admin, name)
        assert set(configs) == set(TOPIC_CONFIGS)
        for key, entry in configs.items():
            if key in given:
                assert (entry.value, entry.source) == (given[key], ConfigSource.DYNAMIC_TOPIC_CONFIG.value), key
            else:
                assert (entry.value, entry.source) == (TOPIC_CONFIGS[key].default, ConfigSource.DEFAULT_CONFIG.value)
        # log.retention.ms has no default of its own (log.retention.hours has): Kafka lists no synonym
        # for it unless set
        retention = configs["retention.ms"]
        assert [(s.name, s.source) for s in retention.synonyms.values()] == (
            [("retention.ms", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)] if "retention.ms" in given else [])

    wait_all(admin.create_topics([NewTopic(n, p, config=c) for n, (p, c) in COMPACTED.items()]))
    for name, (_, given) in COMPACTED.items():
        assert _describe(admin, name)["cleanup.policy"].value == given["cleanup.policy"], name


async def test_real_world_topic_config_sets(gateway):
    await asyncio.to_thread(_real_world, kafka_bootstrap(gateway))


def _incremental(admin: AdminClient, topic: str, *ops: tuple[str, str | None, AlterConfigOpType]) -> None:
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in ops])
    wait_all(admin.incremental_alter_configs([res]))


def _list_configs(bs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    wait_all(admin.create_topics([NewTopic("lists", 1)]))

    def policy() -> tuple[str, int]:
        entry = _describe(admin, "lists")["cleanup.policy"]
        return entry.value, entry.source

    _incremental(admin, "lists", ("cleanup.policy", "delete", AlterConfigOpType.APPEND))
    assert policy() == ("delete", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)  # already there: nothing added
    _incremental(admin, "lists", ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    assert policy() == ("", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)  # an empty policy keeps everything
    _incremental(admin, "lists", ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))  # absent: no error
    _incremental(admin, "lists", ("cleanup.policy", "delete", AlterConfigOpType.APPEND))
    assert policy() == ("delete", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    _incremental(admin, "lists", ("follower.replication.throttled.replicas", "0:0", AlterConfigOpType.APPEND),
                 ("leader.replication.throttled.replicas", "0:0,1:0", AlterConfigOpType.SET))
    _incremental(admin, "lists", ("follower.replication.throttled.replicas", "1:0", AlterConfigOpType.APPEND),
                 ("leader.replication.throttled.replicas", "0:0", AlterConfigOpType.SUBTRACT))
    configs = _describe(admin, "lists")
    assert configs["follower.replication.throttled.replicas"].value == "0:0,1:0"
    assert configs["leader.replication.throttled.replicas"].value == "1:0"

    _incremental(admin, "lists", ("cleanup.policy", "compact", AlterConfigOpType.APPEND))
    assert policy() == ("delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    _incremental(admin, "lists", ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    assert policy() == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    _incremental(admin, "lists", ("cleanup.policy", "delete", AlterConfigOpType.SET))
    for op, expected in [(("cleanup.policy", "compact,compact", AlterConfigOpType.SET), "duplicate values"),
                         (("retention.ms", "5", AlterConfigOpType.APPEND), "type is not LIST"),
                         (("cleanup.policy", "shred", AlterConfigOpType.SET), "must be one of"),
                         (("remote.storage.enable", "true", AlterConfigOpType.SET), "Tiered Storage")]:
        with pytest.raises(KafkaException) as exc:
            _incremental(admin, "lists", op)
        assert exc.value.args[0].name() == "INVALID_CONFIG" and expected in exc.value.args[0].str()
    assert policy() == ("delete", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)  # refused changes changed nothing
    _incremental(admin, "lists", ("cleanup.policy", None, AlterConfigOpType.DELETE))
    assert policy() == ("delete", ConfigSource.DEFAULT_CONFIG.value)


async def test_append_and_subtract_on_list_configs(gateway):
    await asyncio.to_thread(_list_configs, kafka_bootstrap(gateway))


async def test_retention_follows_the_cleanup_policy(gateway):
    log = gateway.services.log
    await log.create_topic("keep-all", 1, {"retention.ms": "1", "cleanup.policy": ""})
    await log.create_topic("drop-old", 1, {"retention.ms": "1"})
    for topic in ("keep-all", "drop-old"):
        await log.append([(topic, 0, build_batch([(None, b"x", [])], timestamp=1000))])
    await log.enforce_retention()
    assert await log.bounds("keep-all", 0) == (0, 1)
    assert await log.bounds("drop-old", 0) == (1, 1)


@pytest.fixture
async def timed(gateway) -> str:
    """Partition 0 of "timed": offsets 0-2 at t=1000, 3-5 at t=5000 (the largest), 6-8 at t=2000."""
    log = gateway.services.log
    await log.create_topic("timed", 1)
    for ts in (1000, 5000, 2000):
        await log.append([("timed", 0, build_batch([(None, b"v", [])] * 3, timestamp=ts))])
    await log.create_topic("empty", 1)
    return kafka_bootstrap(gateway)


def _confluent_offsets(bs: str) -> dict[str, tuple[int, int]]:
    admin = AdminClient({"bootstrap.servers": bs})
    specs = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(),
             "max": OffsetSpec.max_timestamp(), "at-1500": OffsetSpec.for_timestamp(1500)}
    out = {}
    for name, spec in specs.items():
        [info] = wait_all(admin.list_offsets({TopicPartition("timed", 0): spec})).values()
        out[name] = (info.offset, info.timestamp)
    [info] = wait_all(admin.list_offsets({TopicPartition("empty", 0): OffsetSpec.max_timestamp()})).values()
    out["empty-max"] = (info.offset, info.timestamp)
    return out


async def test_list_offsets_special_timestamps_through_confluent(timed):
    found = await asyncio.to_thread(_confluent_offsets, timed)
    assert found["earliest"][0] == 0 and found["latest"][0] == 9
    assert found["max"] == (3, 5000)  # the first record with the largest timestamp
    assert found["at-1500"] == (3, 5000)
    assert found["empty-max"] == (-1, -1)


@pytest.mark.parametrize("version", [1, 4, 6, 7, 8, 9, 10])
async def test_list_offsets_every_special_timestamp_at_every_version(gateway, timed, version):
    await gateway.services.log.delete_records("timed", 0, 1)
    conn = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
    wanted = {-2: (1, -1), -1: (9, -1), -3: (3, 5000), -4: (1, -1), -5: (-1, -1), 1500: (3, 5000)}
    try:
        resp = await call(conn, ApiKey.LIST_OFFSETS, version, {
            "replica_id": -1, "isolation_level": 0, "timeout": 1000,
            "topics": [{"name": "timed", "partitions": [{"partition_index": 0, "timestamp": ts}
                                                        for ts in wanted]}]})
    finally:
        conn[1].close()
    # one partition per request is what clients send; the gateway answers each entry in order. A
    # special timestamp asked below the version that brought it (-3 v7, -4 v8, -5 v9) is refused
    # for its partition, as Kafka 4.4 refuses it (tests/test_kafka_differential.py compares them)
    since = {-3: 7, -4: 8, -5: 9}
    got = [(p.error_code, p.offset, p.timestamp) for p in resp.topics[0].partitions]
    assert got == [(KafkaError.none, off, ts) if version >= since.get(asked, 0)
                   else (KafkaError.unsupported_version, -1, -1) for asked, (off, ts) in wanted.items()]


async def alter_cluster_defaults(gw: Gateway, *ops: tuple[str, int, str | None]) -> tuple[int, str | None]:
    """IncrementalAlterConfigs on the default broker resource (name "", kafka-configs' --entity-default),
    which the Python clients cannot name."""
    resp = await ask(gw, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": 4, "resource_name": "", "configs": [
            {"name": n, "config_operation": op, "value": v} for n, op, v in ops]}]})
    [res] = resp.responses  # type: ignore[attr-defined]
    return res.error_code, res.error_message


def _broker_configs(bs_a: str, bs_b: str) -> None:
    a, b = AdminClient({"bootstrap.servers": bs_a}), AdminClient({"bootstrap.servers": bs_b})
    [broker] = wait_all(b.describe_configs([ConfigResource(ResourceType.BROKER, "1")])).values()
    assert (broker["log.retention.ms"].value, broker["log.retention.ms"].source) == (
        "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert broker["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert broker["num.partitions"].is_read_only
    assert broker["node.id"].value == "1"

    wait_all(b.create_topics([NewTopic("inherits", 1)]))
    configs = _describe(a, "inherits")
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)



def _per_broker_configs(bs_a: str, bs_b: str) -> None:
    """Gateway 0's own configs through confluent-kafka's AdminClient, which sends a broker's configs
    requests to that broker."""
    a, b = AdminClient({"bootstrap.servers": bs_a}), AdminClient({"bootstrap.servers": bs_b})
    zero = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry("log.retention.ms", "60000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("message.max.bytes", "5000", incremental_operation=AlterConfigOpType.SET)])
    wait_all(b.incremental_alter_configs([zero]))
    [broker] = wait_all(a.describe_configs([ConfigResource(ResourceType.BROKER, "0")],
                                           request_timeout=TIMEOUT)).values()
    retention = broker["log.retention.ms"]
    assert (retention.value, retention.source) == ("60000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert broker["log.cleanup.policy"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    [other] = wait_all(b.describe_configs([ConfigResource(ResourceType.BROKER, "1")])).values()
    assert (other["log.retention.ms"].value, other["log.retention.ms"].source) == (
        "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)  # gateway 1 keeps the cluster's
    # AlterConfigs replaces the broker's whole set: message.max.bytes goes back to the cluster's
    wait_all(a.alter_configs([ConfigResource(ResourceType.BROKER, "0", set_config={"log.retention.ms": "120000"})]))
    [broker] = wait_all(a.describe_configs([ConfigResource(ResourceType.BROKER, "0")])).values()
    assert (broker["log.retention.ms"].value, broker["log.retention.ms"].source) == (
        "120000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert broker["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    # a read-only config is refused per broker as cluster-wide
    static = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        wait_all(a.incremental_alter_configs([static]))
    err = refused.value.args[0]
    assert err.code() == ck.KafkaError.INVALID_REQUEST and "Cannot update these configs dynamically" in err.str()


async def test_broker_configs_are_shared_by_every_gateway(two):
    a, b = two
    assert await alter_cluster_defaults(a, ("log.retention.ms", Op.SET, "3600000"),
                                        ("log.cleanup.policy", Op.APPEND, "delete")) == (KafkaError.none, None)
    for name, value in [("num.partitions", "3"), ("auto.create.topics.enable", "false")]:
        error, message = await alter_cluster_defaults(a, (name, Op.SET, value))
        assert error == KafkaError.invalid_request and "dynamically" in (message or "")
    error, message = await alter_cluster_defaults(a, ("log.message.timestamp.type", Op.SET, "Never"))
    assert error == KafkaError.invalid_config and "CreateTime" in (message or "")
    await asyncio.to_thread(_broker_configs, kafka_bootstrap(a), kafka_bootstrap(b))
    resp = await ask(b, ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 4, "resource_name": "", "configuration_keys": None}], "include_synonyms": True})
    [res] = resp.results  # type: ignore[attr-defined]
    assert {(c.name, c.value, c.config_source) for c in res.configs} == {
        ("log.retention.ms", "3600000", 3), ("log.cleanup.policy", "delete", 3)}  # DYNAMIC_DEFAULT_BROKER_CONFIG
    resp = await ask(a, ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 2, "resource_name": "inherits", "configuration_keys": ["retention.ms"]}],
        "include_synonyms": True, "include_documentation": True})
    [res] = resp.results  # type: ignore[attr-defined]
    [retention] = res.configs
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("log.retention.ms", "3600000", 3), ("log.retention.hours", "168", 5)]  # the cluster's, then Kafka's
    assert retention.documentation and retention.config_type == 5  # LONG
    await asyncio.to_thread(_per_broker_configs, kafka_bootstrap(a), kafka_bootstrap(b))
    # synonyms in Kafka's order (confluent-kafka keeps one synonym per name): a topic's, then the broker's own
    # (DYNAMIC_BROKER_CONFIG), the cluster-wide default, Kafka's default
    for resource_type, name, key in [(4, "0", "log.retention.ms"), (2, "inherits", "retention.ms")]:
        resp = await ask(a, ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": resource_type, "resource_name": name, "configuration_keys": [key]}],
            "include_synonyms": True})
        [res] = resp.results  # type: ignore[attr-defined]
        [entry] = res.configs
        assert (entry.value, entry.config_source) == ("120000", 2)
        assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
            ("log.retention.ms", "120000", 2), ("log.retention.ms", "3600000", 3), ("log.retention.hours", "168", 5)]
    # topics resolve with the configs of the gateway they are on: gateway 1 keeps the cluster-wide ones
    assert (await b.services.log.topic_config("inherits"))["retention.ms"] == "3600000"
    # deleting the broker's own value falls back to the cluster-wide one
    resp = await ask(a, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": 4, "resource_name": "0", "configs": [
            {"name": "log.retention.ms", "config_operation": Op.DELETE, "value": None}]}]})
    assert resp.responses[0].error_code == KafkaError.none  # type: ignore[attr-defined]
    assert (await a.services.log.topic_config("inherits"))["retention.ms"] == "3600000"
    # a broker resource names the gateway the request reached (ConfigAdminManager, ConfigHelper)
    for name, message in [("1", "Unexpected broker id, expected 0, but received 1"),
                          ("7", "Unexpected broker id, expected 0, but received 7"),
                          ("x", "Node id must be an integer, but it is: x")]:
        resp = await ask(a, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
            {"resource_type": 4, "resource_name": name, "configs": [
                {"name": "log.retention.ms", "config_operation": Op.SET, "value": "1"}]}]})
        [res] = resp.responses  # type: ignore[attr-defined]
        assert (res.error_code, res.error_message) == (KafkaError.invalid_request, message)
    for name, message in [("7", "Unexpected broker id, expected 1 or empty string, but received 7"),
                          ("x", "Broker id must be an integer, but it is: x")]:
        resp = await ask(b, ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": 4, "resource_name": name, "configuration_keys": None}]})
        [res] = resp.results  # type: ignore[attr-defined]
        assert (res.error_code, res.error_message) == (KafkaError.invalid_request, message)
    # the cluster-wide max.message.bytes applies on the other gateway's produce path too
    await a.services.log.alter_cluster_config([Change("message.max.bytes", Op.SET, "100")])
    await b.services.log.cluster_config(fresh=True)
    [done] = await b.services.log.append([("inherits", 0, build_batch([(None, b"x" * 200, [])]))])
    assert isinstance(done.result, MessageTooLarge)


def _kafka_python_brokers(bs: str, node_id: int, txn_max: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=TIMEOUT * 1000)
    try:
        described = admin.describe_configs([KConfigResource(ConfigResourceType.BROKER, str(node_id))],
                                           config_filter="all")
        values = {k: v["value"] for k, v in described["broker"][str(node_id)].items()}
        assert values["transaction.max.timeout.ms"] == str(txn_max)
        # unset, as on Kafka: its default is log.retention.hours'
        assert values["log.retention.ms"] is None and values["message.max.bytes"] == "1048588"
        admin.create_topics([KNewTopic("kp-rf1", 2, 1)])
        [desc] = admin.describe_topics(["kp-rf1"])
        assert [(p["replica_nodes"], p["isr_nodes"]) for p in desc["partitions"]] == [([node_id], [node_id])] * 2
        admin.create_topics([KNewTopic("kp-assigned", -1, -1, replica_assignments={0: [node_id], 1: [node_id]})])
        [desc] = admin.describe_topics(["kp-assigned"])
        assert len(desc["partitions"]) == 2
    finally:
        admin.close()


async def test_kafka_python_broker_configs_and_replication_factor(gateway):
    cfg = gateway.config
    await asyncio.to_thread(_kafka_python_brokers, kafka_bootstrap(gateway), cfg.node_id, cfg.txn_max_timeout_ms)


def _replication(bs: str) -> dict[str, object]:
    admin = AdminClient({"bootstrap.servers": bs})
    wait_all(admin.create_topics([NewTopic("rf2", 3, replication_factor=2)]))
    out: dict[str, object] = {}
    for name, factor in (("zero", 0), ("rf3", 3)):
        with pytest.raises(KafkaException) as exc:
            wait_all(admin.create_topics([NewTopic(name, 1, replication_factor=factor)]))
        out[name] = exc.value.args[0].name()
    desc = wait_all(admin.describe_topics(ck.TopicCollection(["rf2"])))
    out["rf2"] = [([r.id for r in p.replicas], [r.id for r in p.isr]) for p in desc["rf2"].partitions]
    return out


async def test_a_replication_factor_up_to_the_live_gateways_is_accepted(two):
    """Two gateways are a two-broker cluster: a factor of 2 is taken and lists both as every
    partition's replicas, 3 is refused as Kafka refuses a factor its brokers cannot reach."""
    a, _ = two
    out = await asyncio.to_thread(_replication, kafka_bootstrap(a))
    assert out["zero"] == out["rf3"] == "INVALID_REPLICATION_FACTOR"
    for replicas, isr in out["rf2"]:  # type: ignore[attr-defined]
        assert sorted(replicas) == [0, 1] and replicas == isr


def _log_append_time(bs: str, topic: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]], int, int]:
    admin = AdminClient({"bootstrap.servers": bs})
    wait_all(admin.create_topics([NewTopic(topic, 1, config={"message.timestamp.type": "LogAppendTime"})]))
    delivered: list[tuple[int, int]] = []
    before = now_ms()  # the in-process gateway's own clock: Redis's (gateway/clock.py)
    producer = ck.Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for i in range(3):
        producer.produce(topic, f"v{i}".encode(), timestamp=1000,
                         on_delivery=lambda err, msg: delivered.append(msg.timestamp()))
    assert producer.flush(TIMEOUT) == 0
    after = now_ms()
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": "lat", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + TIMEOUT
    while len(seen) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            seen.append(msg.timestamp())
    consumer.close()
    return delivered, seen, before, after


async def test_log_append_time_stamps_batches_with_the_broker_time(gateway):
    delivered, seen, before, after = await asyncio.to_thread(_log_append_time, kafka_bootstrap(gateway), "stamped")
    assert len(seen) == 3 and len(delivered) == 3
    for kind, ts in seen + delivered:
        assert kind == ck.TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after
    log = gateway.services.log
    for entry in (await log.read("stamped", 0, 0)).entries:  # stamped, and the CRC computed again
        h = parse_header(entry.batch, verify_crc=True)
        assert h.attributes & ATTR_TIMESTAMP_LOG_APPEND and before <= h.max_timestamp <= after
    # a CreateTime topic keeps the producer's timestamps, batch bytes untouched
    await log.create_topic("created", 1)
    batch = build_batch([(None, b"x", [])], timestamp=1000)
    await log.append([("created", 0, batch)])
    assert (await log.read("created", 0, 0)).entries[0].batch == batch
