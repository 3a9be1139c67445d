"""Spark's own Kafka connector (spark-sql-kafka-0-10, tests/spark_kafka) from PySpark, on the gateway
and on Kafka 4.4: a Structured Streaming query reading with format("kafka") and writing back with
Spark's Kafka sink, and batch queries over offset ranges, as Spark's Structured Streaming + Kafka
Integration Guide describes its options; a query ACLs deny, and one logged in with a delegation
token, compared."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.kafka.dispatch import ApiKey
from tests.conftest import GatewayProcess, eventually, in_spark
from tests.kafka_clients import create_topic
from tests.kafka_jvm import SASL_USERS, unique
from tests.kafka_wire import call
from tests.sasl_pair import login, rdkafka_login, sasl_pair, token_login
from tests.test_delegation_tokens import create, scram

pytestmark = [pytest.mark.spark, pytest.mark.jvm, pytest.mark.kafka, pytest.mark.slow, pytest.mark.apps]

BASE_TS = 1_700_000_000_000  # the records' own timestamps: startingOffsetsByTimestamp reads them


async def produce(bs: str, topic: str, values: list[str], partition: int, transactional: str = "",
                  commit: bool = True, headers: list[tuple[str, bytes]] | None = None,
                  client: dict[str, str] | None = None) -> None:
    """`values` into one partition, timestamps BASE_TS + i s; in a transaction that commits or aborts
    when `transactional` names one; `client`: more producer settings (a login). In a thread: the
    gateway may share this loop."""
    await asyncio.to_thread(_produce, bs, topic, values, partition, transactional, commit, headers, client or {})


def _produce(bs: str, topic: str, values: list[str], partition: int, transactional: str, commit: bool,
             headers: list[tuple[str, bytes]] | None, client: dict[str, str]) -> None:
    config = {"bootstrap.servers": bs, **client, **({"transactional.id": transactional} if transactional else {})}
    producer = ck.Producer(config)
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), key=b"k", partition=partition, timestamp=BASE_TS + i * 1000,
                         headers=headers)
    if transactional:
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    assert producer.flush(30) == 0


async def read_all(bs: str, topic: str, count: int,
                   client: dict[str, str] | None = None) -> list[tuple[str, list[tuple[str, bytes]]]]:
    """`count` committed values of the one-partition `topic`, with their headers; `client`: more
    consumer settings (a login)."""
    return await asyncio.to_thread(_read_all, bs, topic, count, client or {})


def _read_all(bs: str, topic: str, count: int, client: dict[str, str]) -> list[tuple[str, list[tuple[str, bytes]]]]:
    consumer = ck.Consumer({"bootstrap.servers": bs, **client, "group.id": unique("check"),
                            "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    out: list[tuple[str, list[tuple[str, bytes]]]] = []
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        while len(out) < count:
            msg = consumer.poll(30)
            assert msg is not None, f"{len(out)} of {count} records of {topic}"
            assert msg.error() is None, msg.error()
            out.append((msg.value().decode(), list(msg.headers() or [])))
    finally:
        consumer.close()
    return out


@pytest.mark.timeout(300)
async def test_a_stream_reads_committed_records_and_writes_them_back(spark: Any, either: str, tmp_path: Path):
    """subscribe, startingOffsets as JSON (partition 1 from offset 1), includeHeaders,
    kafka.isolation.level=read_committed (the aborted transaction is never read), minPartitions (more
    Spark tasks than Kafka partitions), and the Kafka sink writing each row's value and headers."""
    bs, source, sink = either, unique("spark-in"), unique("spark-out")
    await create_topic(bs, source, 2)
    await create_topic(bs, sink, 1)
    await produce(bs, source, ["a0", "a1", "a2"], 0, unique("txn"), headers=[("h", b"1")])
    await produce(bs, source, ["gone0", "gone1"], 0, unique("txn"), commit=False)
    await produce(bs, source, ["b0", "b1", "b2"], 1, headers=[("h", b"2")])

    def run() -> None:
        query = (
            spark.readStream.format("kafka").option("kafka.bootstrap.servers", bs).option("subscribe", source)
            .option("startingOffsets", json.dumps({source: {"0": -2, "1": 1}}))  # -2: earliest
            .option("includeHeaders", "true").option("kafka.isolation.level", "read_committed")
            .option("minPartitions", "4").load()
            .selectExpr("upper(CAST(value AS STRING)) AS value", "headers")
            .writeStream.format("kafka").option("kafka.bootstrap.servers", bs).option("topic", sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
        )
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()

    await in_spark(spark, run)
    written = await read_all(bs, sink, 5)
    assert sorted(written) == sorted([("A0", [("h", b"1")]), ("A1", [("h", b"1")]), ("A2", [("h", b"1")]),
                                      ("B1", [("h", b"2")]), ("B2", [("h", b"2")])])


async def test_batch_queries_over_offset_ranges(spark: Any, either: str):
    """A batch query from startingOffsets to endingOffsets (JSON, end exclusive), one from
    startingOffsetsByTimestamp (the first offset at or after the time), both with subscribePattern."""
    bs, prefix = either, unique("ranges")
    await create_topic(bs, f"{prefix}-a", 1)
    await create_topic(bs, f"{prefix}-b", 1)
    for name in ("a", "b"):
        await produce(bs, f"{prefix}-{name}", [f"{name}{i}" for i in range(6)], 0)

    def values(**options: str) -> list[str]:
        reader = spark.read.format("kafka").option("kafka.bootstrap.servers", bs)
        reader = reader.option("subscribePattern", f"{prefix}-.*")
        for key, value in options.items():
            reader = reader.option(key, value)
        return sorted(r.value.decode() for r in reader.load().select("value").collect())

    ranged = await in_spark(spark, values, startingOffsets=json.dumps({f"{prefix}-a": {"0": 2}, f"{prefix}-b": {"0": 0}}),
                            endingOffsets=json.dumps({f"{prefix}-a": {"0": 4}, f"{prefix}-b": {"0": 1}}))
    assert ranged == ["a2", "a3", "b0"]
    timed = await in_spark(spark, values, startingOffsetsByTimestamp=json.dumps(
        {f"{prefix}-a": {"0": BASE_TS + 4000}, f"{prefix}-b": {"0": BASE_TS + 4500}}))
    assert timed == ["a4", "a5", "b5"]


async def test_a_query_denied_by_acls_fails_as_on_kafka(spark: Any, redis_server: str, sasl_kafka_broker: Any,
                                                        tmp_path: Path):
    """A batch query logged in as `alice`, who has no ACL, on a SASL Kafka 4.4 broker with
    StandardAuthorizer and on a gateway with authentication on: the Kafka exception Spark raises,
    the line a user reads, is the same on both."""
    topic = unique("denied")
    seen = {}

    def query(bs: str) -> str:
        reader = spark.read.format("kafka").option("kafka.bootstrap.servers", bs).option("subscribe", topic)
        for key, value in login("alice").items():
            reader = reader.option(f"kafka.{key}", value)
        with pytest.raises(Exception) as failed:
            reader.load().collect()
        found = re.search(r"org\.apache\.kafka\.common\.errors\.\w+: [^\n]*", str(failed.value))
        assert found, failed.value
        return found.group(0)

    async with sasl_pair(redis_server, tmp_path, broker=sasl_kafka_broker) as bootstraps:
        for name, bs in bootstraps.items():
            seen[name] = await in_spark(spark, query, bs)
    assert "Authorization" in seen["kafka"], seen
    assert seen["gateway"] == seen["kafka"]


async def _token(bs: str) -> tuple[str, str]:
    """A delegation token of `admin`'s, created through admin's SCRAM login and awaited until the
    broker at `bs` knows it (Kafka's broker learns a token from its controller's metadata): its id,
    and its HMAC in base64, the password a client logs in with."""
    conn, error = await scram(int(bs.rsplit(":", 1)[1]), "admin", SASL_USERS["admin"])
    assert error == 0
    try:
        made = await call(conn, ApiKey.CREATE_DELEGATION_TOKEN, 3, create())
        assert made.error_code == 0, made

        async def known() -> bool:
            tokens = (await call(conn, ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"owners": None})).tokens
            return made.token_id in {t.token_id for t in tokens}

        await eventually(known, 30, "the token on the broker")
    finally:
        conn[1].close()
    return made.token_id, base64.b64encode(made.hmac).decode()


def _create_topics(bs: str, client: dict[str, str], *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs, **client})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        f.result(30)


@pytest.mark.timeout(300)
async def test_a_query_logged_in_with_a_delegation_token_reads_and_writes(spark: Any, redis_server: str,
                                                                         token_kafka_broker: Any, tmp_path: Path):
    """A batch query reading one topic and writing another with Spark's Kafka source and sink, logged
    in with a delegation token the broker issued (KIP-48): SCRAM with `tokenauth=true` in
    `kafka.sasl.jaas.config`, the JAAS login Spark's Kafka integration guide gives the first place
    among its ways to log in (its own `spark.kafka.clusters.*` obtains tokens through Kerberos alone).
    On a SASL Kafka 4.4 broker and on a gateway with authentication on, the same rows arrive, and a
    wrong HMAC fails the query with the same exception."""
    source, sink = unique("token-in"), unique("token-out")
    admin = rdkafka_login("admin")
    seen, refused = {}, {}

    def query(bs: str, token: dict[str, str]) -> None:
        options = {f"kafka.{key}": value for key, value in token.items()}
        (spark.read.format("kafka").option("kafka.bootstrap.servers", bs).option("subscribe", source)
         .options(**options).load().selectExpr("upper(CAST(value AS STRING)) AS value")
         .write.format("kafka").option("kafka.bootstrap.servers", bs).option("topic", sink).options(**options).save())

    async with sasl_pair(redis_server, tmp_path, broker=token_kafka_broker) as bootstraps:
        for name, bs in bootstraps.items():
            await asyncio.to_thread(_create_topics, bs, admin, source, sink)
            await produce(bs, source, ["t0", "t1", "t2"], 0, client=admin)
            token_id, token_hmac = await _token(bs)
            await in_spark(spark, query, bs, token_login(token_id, token_hmac))
            seen[name] = sorted(value for value, _ in await read_all(bs, sink, 3, client=admin))
            with pytest.raises(Exception) as failed:  # the HMAC is the token's password: another one fails
                await in_spark(spark, query, bs, token_login(token_id, base64.b64encode(b"not the hmac").decode()))
            found = re.search(r"org\.apache\.kafka\.common\.errors\.\w+: [^\n]*", str(failed.value))
            assert found, failed.value
            refused[name] = found.group(0)
    assert seen["kafka"] == ["T0", "T1", "T2"] and "SaslAuthenticationException" in refused["kafka"], refused
    assert (seen["gateway"], refused["gateway"]) == (seen["kafka"], refused["kafka"])


@pytest.mark.timeout(300)
async def test_a_gateway_killed_under_a_stream_loses_no_row(spark: Any, gateway_process: GatewayProcess, tmp_path: Path):
    """The gateway SIGKILLed and started again on its ports and data under a running query that
    reads one topic and writes another with Spark's Kafka sink, which is at-least-once: every input
    row is in the output at least once, the query carries on through the kill, and, stopped and
    started again from its checkpoint, it goes on from where it was."""
    gateway_process.start()
    bs, source, sink = gateway_process.kafka_bootstrap, unique("spark-in"), unique("spark-out")
    await create_topic(bs, source, 1)
    await create_topic(bs, sink, 1)
    rows = [f"r{i:03d}" for i in range(90)]

    def start(trigger: dict[str, Any]) -> Any:
        return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bs).option("subscribe", source)
                .option("startingOffsets", "earliest").load().selectExpr("value")
                .writeStream.format("kafka").option("kafka.bootstrap.servers", bs).option("topic", sink)
                .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(**trigger).start())

    async def written(count: int) -> set[str]:
        return {value for value, _ in await read_all(bs, sink, count)}

    await produce(bs, source, rows[:30], 0)
    query = await in_spark(spark, start, {"processingTime": "1 second"})
    try:
        assert await written(30) == set(rows[:30])
        gateway_process.kill()
        await asyncio.to_thread(gateway_process.start)
        await produce(bs, source, rows[30:60], 0)
        await eventually(lambda: asyncio.to_thread(_count, bs, sink, rows[:60]), what="the rows after the kill",
                         timeout=120)
        assert query.isActive, query.exception()
    finally:
        await in_spark(spark, query.stop)
    await produce(bs, source, rows[60:], 0)
    resumed = await in_spark(spark, start, {"availableNow": True})
    await in_spark(spark, resumed.awaitTermination, 120)
    assert resumed.exception() is None, resumed.exception()
    assert await asyncio.to_thread(_count, bs, sink, rows)


def _count(bs: str, topic: str, rows: list[str]) -> bool:
    """Whether every one of `rows` is in `topic` (at least once), read to its end."""
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": unique("check"), "auto.offset.reset": "earliest",
                            "enable.partition.eof": True})
    seen: set[str] = set()
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        while (msg := consumer.poll(30)) is not None and msg.error() is None:
            seen.add(msg.value().decode())
        assert msg is not None, f"no end of {topic} in 30 s"
        assert msg.error().code() == ck.KafkaError._PARTITION_EOF, msg.error()
    finally:
        consumer.close()
    return set(rows) <= seen
