"""KIP-714's client telemetry: client-metrics subscriptions set and read as CLIENT_METRICS config
resources, GetTelemetrySubscriptions and PushTelemetry answered as Kafka 4.4's ClientMetricsManager
answers them (raw frames, for the error cases no well-behaved client provokes), and the metrics real
clients push exported on the Prometheus endpoint with their identity as labels."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import confluent_kafka as ck
import cramjam
import pytest
from kio.schema.errors import ErrorCode as E
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)

from tests.conftest import eventually, kafka_bootstrap
from tests.kafka_jvm import SUITE_SETTINGS, TOOLS, KafkaBroker, java_command
from tests.kafka_wire import call
from tests.test_metrics import samples, scrape
from tests.test_security import login, secure  # noqa: F401  (secure: the fixture)

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]
LONG = 300_000  # the longest interval a client gets: Kafka takes the least of the five-minute default and the matching ones
GET, PUSH, DESCRIBE, ALTER, LIST = 71, 72, 32, 44, 74


async def connect(bootstrap: str) -> Conn:
    """A raw connection that introduced itself as a v3 ApiVersions client does."""
    host, port = bootstrap.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    resp = await call((reader, writer), 18, 3, {"client_software_name": "wire-test",
                                                "client_software_version": "1.0"})
    assert resp.error_code == E.none
    return reader, writer


@pytest.fixture
async def conn(gateway: Any) -> AsyncIterator[Conn]:
    reader, writer = await connect(kafka_bootstrap(gateway))
    yield reader, writer
    writer.close()


@pytest.fixture(scope="module")
def telemetry_broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The suite's Kafka 4.4 node with a client-telemetry exporter (tests/jvm's TelemetryExporter),
    without which Kafka serves neither telemetry API: the reference for their answers."""
    settings = {**SUITE_SETTINGS, "metric.reporters": "gateway.jvm.TelemetryExporter"}
    with KafkaBroker(tmp_path_factory.mktemp("telemetry-broker"), settings=settings) as broker:
        yield broker


async def alter(conn: Conn, name: str, *configs: tuple[str, str | None]) -> Any:
    """One IncrementalAlterConfigs of a client-metrics resource: SET each (DELETE where None)."""
    resp = await call(conn, ALTER, 1, {"resources": [{"resource_type": 16, "resource_name": name, "configs": [
        {"name": k, "config_operation": 1 if v is None else 0, "value": v} for k, v in configs]}],
        "validate_only": False})
    return resp.responses[0]


def metrics_data(value: float, *, counter: int = 0) -> bytes:
    """An OTLP MetricsData as a Java client would push it: one gauge, one delta sum."""
    attrs = [KeyValue(key="node.id", value=AnyValue(string_value="1"))]
    gauge = Metric(name="org.apache.kafka.producer.record.queue.time.avg",
                   gauge=Gauge(data_points=[NumberDataPoint(as_double=value, attributes=attrs)]))
    total = Metric(name="org.apache.kafka.producer.record.send", sum=Sum(
        data_points=[NumberDataPoint(as_int=counter)], is_monotonic=True,
        aggregation_temporality=AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA))
    return MetricsData(resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=[gauge, total])])]) \
        .SerializeToString()


def big_metrics_data() -> bytes:
    """Valid MetricsData over `telemetry.max.bytes` once decompressed, a few KB compressed."""
    name = "org.apache.kafka.producer." + "x" * (1024 * 1024)
    return MetricsData(resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=[
        Metric(name=name, gauge=Gauge(data_points=[NumberDataPoint(as_double=1.0)]))])])]).SerializeToString()


async def test_subscriptions_are_config_resources(gateway, conn):
    """Set, described (own values CLIENT_METRICS_CONFIG, the rest defaults), listed by both
    ListConfigResources versions (v1's every type beside them), validated as ClientMetricsConfigs.validate does, and gone once
    every config is deleted."""
    assert (await alter(conn, "sub-a", ("metrics", "org.apache.kafka.producer."), ("interval.ms", "1000"))
            ).error_code == E.none
    d = (await call(conn, DESCRIBE, 4, {"resources": [{"resource_type": 16, "resource_name": "sub-a",
                                                       "configuration_keys": None}],
                                        "include_synonyms": False, "include_documentation": False})).results[0]
    assert d.error_code == E.none
    assert {c.name: (c.value, c.config_source) for c in d.configs} == {
        "metrics": ("org.apache.kafka.producer.", 7), "interval.ms": ("1000", 7), "match": ("", 5)}
    for version in (0, 1):
        listed = await call(conn, LIST, version, {"resource_types": [16]} if version else {})
        assert [(r.resource_name, getattr(r, "resource_type", 16)) for r in listed.config_resources] == \
            [("sub-a", 16)]
    await call(conn, 19, 7, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                                         "configs": []} for n in ("t-b", "t-a")], "timeout": 10000,
                             "validate_only": False})
    every = await call(conn, LIST, 1, {"resource_types": []})
    node = str(gateway.config.node_id)
    assert [(r.resource_name, r.resource_type) for r in every.config_resources] == \
        [("sub-a", 16), (node, 8), (node, 4), ("t-a", 2), ("t-b", 2)]
    bad = [(("interval.ms", "50"), E.invalid_request), (("match", "nonsense=x"), E.invalid_config),
           (("color", "blue"), E.invalid_request)]
    for config, code in bad:
        assert (await alter(conn, "sub-a", config)).error_code == code, config
    assert (await alter(conn, "sub-a", ("metrics", None), ("interval.ms", None))).error_code == E.none
    assert (await call(conn, LIST, 0)).config_resources == ()


async def test_get_and_push_follow_kafkas_checks(gateway, conn):
    """An id is assigned for the zero one; a second get or push inside the interval is throttled;
    a wrong subscription id, an unknown codec, an undecodable or too large payload each get Kafka's
    error (one too large only once decompressed is INVALID_RECORD, as Kafka 4.4 answers it); the pushed metrics are scraped with the client's labels, and go with its terminating push."""
    assert (await alter(conn, "all", ("metrics", "*"), ("interval.ms", str(LONG)),
                        ("match", "client_software_name=wire-.*"))).error_code == E.none
    got = await call(conn, GET, 0, {"client_instance_id": uuid.UUID(int=0)})
    assert got.error_code == E.none and got.client_instance_id != uuid.UUID(int=0)
    assert (list(got.requested_metrics), int(got.push_interval.total_seconds() * 1000)) == (["*"], LONG)
    assert (list(got.accepted_compression_types), got.telemetry_max_bytes, got.delta_temporality) == \
        ([4, 3, 1, 2], 1024 * 1024, True)
    me = got.client_instance_id
    again = await call(conn, GET, 0, {"client_instance_id": me})
    assert again.error_code == E.throttling_quota_exceeded

    def push(sid: int, payload: bytes, *, compression: int = 0, terminating: bool = False) -> Any:
        return call(conn, PUSH, 0, {"client_instance_id": me, "subscription_id": sid, "terminating": terminating,
                                    "compression_type": compression, "metrics": payload})

    sid = got.subscription_id
    # the push after a get is taken inside the interval (clients jitter it), not the next one
    assert (await push(sid, bytes(cramjam.gzip.compress(metrics_data(2.5, counter=3))), compression=1)
            ).error_code == E.none
    assert (await push(sid, metrics_data(1.0))).error_code == E.throttling_quota_exceeded
    scraped = samples(await scrape(gateway))
    labels = {"client_instance_id": str(me), "client_id": "test", "client_software_name": "wire-test",
              "client_software_version": "1.0"}
    assert scraped[("org_apache_kafka_producer_record_queue_time_avg",
                    frozenset({**labels, "node_id": "1"}.items()))] == 2.5
    assert scraped[("org_apache_kafka_producer_record_send_total", frozenset(labels.items()))] == 3
    # a terminating push is taken inside the interval, its metrics too; then nothing more is
    assert (await push(sid, metrics_data(4.0, counter=2), terminating=True)).error_code == E.none
    assert "org_apache_kafka" not in await scrape(gateway)
    assert (await push(sid, b"")).error_code == E.invalid_request

    me = (await call(conn, GET, 0, {"client_instance_id": uuid.UUID(int=0)})).client_instance_id
    assert (await push(sid + 1, b"")).error_code == E.unknown_subscription_id
    # after UNKNOWN_SUBSCRIPTION_ID a get is answered at once
    assert (await call(conn, GET, 0, {"client_instance_id": me})).error_code == E.none
    for payload, compression, code in [(b"\xff\xff\xff", 0, E.invalid_record), (b"x", 9, E.unsupported_compression_type),
                                       (b"\x00" * (1024 * 1024 + 1), 0, E.telemetry_too_large),
                                       (bytes(cramjam.zstd.compress(big_metrics_data())), 4, E.invalid_record)]:
        other = await call(conn, GET, 0, {"client_instance_id": uuid.UUID(int=0)})
        me = other.client_instance_id
        assert (await push(other.subscription_id, payload, compression=compression)).error_code == code
    assert (await call(conn, PUSH, 0, {"client_instance_id": uuid.UUID(int=0), "subscription_id": 0,
                                       "terminating": False, "compression_type": 0, "metrics": b""})
            ).error_code == E.invalid_request


async def test_a_second_gateway_holds_a_client_to_its_interval(gateway, conn, redis_url):
    """The push state is Redis's: a get answered by one gateway throttles the next get on another."""
    from tests.conftest import running_gateway, test_config

    assert (await alter(conn, "all", ("metrics", "*"), ("interval.ms", str(LONG)))).error_code == E.none
    me = (await call(conn, GET, 0, {"client_instance_id": uuid.UUID(int=0)})).client_instance_id
    async with running_gateway(test_config(redis_url)) as other:
        reader, writer = await asyncio.open_connection("127.0.0.1", other.listeners["kafka"].port)
        try:
            assert (await call((reader, writer), GET, 0, {"client_instance_id": me})).error_code == \
                E.throttling_quota_exceeded
        finally:
            writer.close()


async def client_labels(gateway: Any, prefix: str, client_id: str) -> dict[str, str] | None:
    """The labels of a series of a client's metric family starting with `prefix`, once scraped."""
    for (name, labels), _ in samples(await scrape(gateway)).items():
        if name.startswith(prefix) and dict(labels).get("client_id") == client_id:
            return dict(labels)
    return None


@pytest.mark.kafka
async def test_librdkafka_pushes_its_metrics(gateway, conn):
    """confluent-kafka (librdkafka, `enable.metrics.push` on by default) asks for its subscription,
    pushes, and its metrics are scraped with its instance id and software as labels."""
    assert (await alter(conn, "rdkafka", ("metrics", "org.apache.kafka."), ("interval.ms", "500"))
            ).error_code == E.none
    producer = ck.Producer({"bootstrap.servers": kafka_bootstrap(gateway), "client.id": "telemetry-producer"})
    producer.produce("telemetry-topic", b"x")
    assert await asyncio.to_thread(producer.flush, 10) == 0

    async def pushed() -> dict[str, str] | None:
        await asyncio.to_thread(producer.poll, 0.1)
        return await client_labels(gateway, "org_apache_kafka_producer", "telemetry-producer")

    labels = await eventually(pushed, what="librdkafka's telemetry in the scrape")
    assert isinstance(labels, dict)
    assert labels["client_software_name"] == "confluent-kafka-python"
    uuid.UUID(labels["client_instance_id"])


@pytest.mark.jvm
async def test_the_java_client_pushes_its_metrics(gateway, conn, tmp_path):
    """Kafka's Java producer (kafka-verifiable-producer, `enable.metrics.push` on by default) pushes
    what its subscription asks for, scraped with its labels; killed, its series go."""
    assert (await alter(conn, "java", ("metrics", "org.apache.kafka.producer."), ("interval.ms", "500"),
                        ("match", "client_software_name=apache-kafka-java"))).error_code == E.none
    config = tmp_path / "producer.properties"
    config.write_text("client.id=telemetry-java\n")
    proc = await asyncio.create_subprocess_exec(
        *java_command(TOOLS["kafka-verifiable-producer"], "--bootstrap-server", kafka_bootstrap(gateway),
                      "--topic", "telemetry-java", "--throughput", "10", "--producer.config", str(config)),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        labels = await eventually(lambda: client_labels(gateway, "org_apache_kafka_producer", "telemetry-java"),
                                  timeout=60, what="the Java producer's telemetry in the scrape")
    finally:
        proc.kill()
        await proc.wait()
    assert isinstance(labels, dict) and labels["client_software_name"] == "apache-kafka-java"
    uuid.UUID(labels["client_instance_id"])

    async def gone() -> bool:  # killed, it pushes no more: its series go after twice its interval
        return await client_labels(gateway, "org_apache_kafka", "telemetry-java") is None

    await eventually(gone, what="the killed producer's series dropped")


async def telemetry_session(bootstrap: str) -> list[Any]:
    """A subscription set, then every answer of ClientMetricsManager's checks, with what differs
    between two clusters (instance and subscription ids) left out."""
    conn = await connect(bootstrap)
    try:
        assert (await alter(conn, "reference", ("metrics", "org.apache.kafka.producer."), ("interval.ms", str(LONG)),
                            ("match", "client_software_name=wire-test"))).error_code == E.none

        async def new_client() -> Any:  # a client sending the zero id, once the subscription applies
            got = await call(conn, GET, 0, {"client_instance_id": uuid.UUID(int=0)})
            return got if list(got.requested_metrics) else None

        def push(client: Any, payload: bytes, *, sid: int | None = None, compression: int = 0,
                 terminating: bool = False) -> Any:
            return call(conn, PUSH, 0, {"client_instance_id": client.client_instance_id, "terminating": terminating,
                                        "subscription_id": client.subscription_id if sid is None else sid,
                                        "compression_type": compression, "metrics": payload})

        first = await eventually(new_client, what="the subscription applied")
        out: list[Any] = [(first.error_code, list(first.requested_metrics), first.push_interval,
                           list(first.accepted_compression_types), first.telemetry_max_bytes, first.delta_temporality)]
        valid = bytes(cramjam.gzip.compress(metrics_data(1.0)))
        out += [(await call(conn, GET, 0, {"client_instance_id": first.client_instance_id})).error_code,
                (await push(first, valid, compression=1)).error_code, (await push(first, valid)).error_code,
                (await push(first, metrics_data(2.0), terminating=True)).error_code,
                (await push(first, metrics_data(2.0))).error_code]
        other = await new_client()
        out += [(await push(other, b"", sid=other.subscription_id + 1)).error_code,
                (await call(conn, GET, 0, {"client_instance_id": other.client_instance_id})).error_code]
        for payload, compression in [(b"\xff\xff\xff", 0), (metrics_data(1.0), 9), (b"\x00" * (1024 * 1024 + 1), 0),
                                     (bytes(cramjam.zstd.compress(metrics_data(1.0))), 4),
                                     (bytes(cramjam.zstd.compress(big_metrics_data())), 4)]:
            out.append((await push(await new_client(), payload, compression=compression)).error_code)
        out.append((await call(conn, PUSH, 0, {"client_instance_id": uuid.UUID(int=0), "subscription_id": 0,
                                               "terminating": False, "compression_type": 0, "metrics": b""})
                    ).error_code)
        described = await call(conn, DESCRIBE, 4, {"resources": [{"resource_type": 16, "resource_name": "reference",
                                                                  "configuration_keys": None}],
                                                   "include_synonyms": True, "include_documentation": False})
        out.append([(c.name, c.value, c.config_source, c.config_type, [(y.name, y.value, y.source) for y in c.synonyms])
                    for c in described.results[0].configs])
        out.append([r.resource_name for r in (await call(conn, LIST, 1, {"resource_types": [16]})).config_resources])
        # every type, highest first (node ids differ: the types are compared), and one Kafka does not know
        out.append([r.resource_type for r in (await call(conn, LIST, 1, {"resource_types": []})).config_resources])
        out.append((await call(conn, LIST, 1, {"resource_types": [99]})).error_code)
        assert (await alter(conn, "reference", ("metrics", None), ("interval.ms", None), ("match", None))
                ).error_code == E.none
        return out
    finally:
        conn[1].close()


@pytest.mark.jvm
@pytest.mark.slow
async def test_telemetry_answers_as_on_kafka(gateway, telemetry_broker):
    """The same session against Kafka 4.4 with a telemetry exporter and against the gateway."""
    on_kafka = await telemetry_session(telemetry_broker.bootstrap)
    on_gateway = await telemetry_session(kafka_bootstrap(gateway))
    assert on_gateway == on_kafka


async def test_metrics_named_like_the_gateways_or_unnamed_are_left_out(gateway, conn):
    """A client cannot shadow the gateway's own families, nor break the scrape with names Prometheus
    refuses: those metrics are left out, the others exported."""
    assert (await alter(conn, "all", ("metrics", "*"))).error_code == E.none
    got = await call(conn, GET, 0, {"client_instance_id": uuid.UUID(int=0)})
    odd = [KeyValue(key="__name__", value=AnyValue(string_value="x")),
           KeyValue(key="9th", value=AnyValue(int_value=9))]
    metrics = [Metric(name=n, gauge=Gauge(data_points=[NumberDataPoint(as_double=1.0, attributes=odd)]))
               for n in ("gateway_requests", "9lives", "", "client.ok")]
    payload = MetricsData(resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=metrics)])])
    assert (await call(conn, PUSH, 0, {"client_instance_id": got.client_instance_id, "terminating": False,
                                       "subscription_id": got.subscription_id, "compression_type": 0,
                                       "metrics": payload.SerializeToString()})).error_code == E.none
    exported = {name: dict(labels) for (name, labels), _ in samples(await scrape(gateway)).items()
                if dict(labels).get("client_instance_id") == str(got.client_instance_id)}
    assert list(exported) == ["client_ok"]
    assert (exported["client_ok"]["name__"], exported["client_ok"]["attribute_9th"]) == ("x", "9")


async def test_listing_config_resources_takes_describe_configs_on_the_cluster(secure):  # noqa: F811
    """Alice, with no ACLs, is refused the listing; the super user is not."""
    for user, password, code in [("alice", "alice-secret", E.cluster_authorization_failed),
                                 ("admin", "admin-secret", E.none)]:
        logged, auth = await login(secure, user, password)
        assert auth.error_code == E.none
        try:
            assert (await call(logged, LIST, 1, {"resource_types": [16]})).error_code == code
        finally:
            logged[1].close()
