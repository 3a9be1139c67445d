"""Per-record errors (KIP-467): a batch refused for bad records names them in the Produce response.

Kafka's LogValidator refuses the whole batch when a record is keyless on a compacted topic or has a
timestamp outside `message.timestamp.before.max.ms`/`after.max.ms`, and lists each bad record (its
index in the batch, and why) in `record_errors` from Produce v8; clients fail those records with the
partition's error and the others as refused for another record's sake.
"""

from __future__ import annotations

import asyncio
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.errors import InvalidRecordError, InvalidTimestampError
from kafka.errors import KafkaError as KpError
from kio.schema.errors import ErrorCode as KafkaError

from gateway.clock import now_ms
from gateway.formats.records import BatchBuilder, Compression
from gateway.kafka.dispatch import ApiKey
from gateway.server.gateway import Gateway
from tests.conftest import kafka_bootstrap
from tests.kafka_wire import call

pytestmark = pytest.mark.kafka
TIMEOUT = 20
HOUR = 3_600_000
KEYLESS = "Compacted topic cannot accept message without key in topic partition {}"


def _create(bs: str, topic: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(topic, 1, config=config)]).values():
        f.result(timeout=TIMEOUT)


def _ck_produce(bs: str, topic: str, records: list[tuple[bytes | None, int | None]]) -> list[int]:
    """The error code of each record (0: delivered), produced as one batch (one flush, a long linger).
    confluent-kafka's delivery errors carry librdkafka's text for the code, not the broker's."""
    p = ck.Producer({"bootstrap.servers": bs, "linger.ms": 1000, "retries": 0})
    reports: dict[int, int] = {}
    for i, (key, ts) in enumerate(records):
        def report(err: ck.KafkaError | None, _m: Any, i: int = i) -> None:
            reports[i] = 0 if err is None else err.code()
        p.produce(topic, b"v%d" % i, key=key, timestamp=ts or 0, on_delivery=report)
    assert p.flush(TIMEOUT) == 0
    return [reports[i] for i in range(len(records))]


def _watermarks(bs: str, topic: str) -> tuple[int, int]:
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": "w"})
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=TIMEOUT)
    finally:
        c.close()


def _mixed_keys(bs: str) -> None:
    _create(bs, "table", {"cleanup.policy": "compact"})
    keys = [b"k0", b"k1", None, b"k3", b"k4", None, b"k6"]
    got = _ck_produce(bs, "table", [(k, None) for k in keys])
    different = ck.KafkaError._INVALID_DIFFERENT_RECORD
    assert got == [ck.KafkaError.INVALID_RECORD if k is None else different for k in keys]
    assert _watermarks(bs, "table") == (0, 0)  # nothing of the batch was written


async def test_confluent_fails_only_the_keyless_records_of_a_batch(gateway: Gateway) -> None:
    await asyncio.to_thread(_mixed_keys, kafka_bootstrap(gateway))


def _bad_timestamps(bs: str) -> None:
    _create(bs, "clocked", {"message.timestamp.before.max.ms": str(HOUR)})
    now = now_ms()
    stamps = [now, now + 2 * HOUR, now - 2 * HOUR, now]
    got = _ck_produce(bs, "clocked", [(b"k", ts) for ts in stamps])
    # two bad records: librdkafka names each INVALID_RECORD (the partition's error speaks for one alone)
    assert got == [ck.KafkaError._INVALID_DIFFERENT_RECORD, ck.KafkaError.INVALID_RECORD,
                                         ck.KafkaError.INVALID_RECORD, ck.KafkaError._INVALID_DIFFERENT_RECORD]
    # one bad record: librdkafka gives every record of the batch the partition's error, INVALID_TIMESTAMP
    # (rd_kafka_dr_msgq0 forces it when record_errors holds fewer than two), as it does against Kafka
    got = _ck_produce(bs, "clocked", [(b"k", now), (b"k", now + 2 * HOUR)])
    assert got == [ck.KafkaError.INVALID_TIMESTAMP, ck.KafkaError.INVALID_TIMESTAMP]
    assert _watermarks(bs, "clocked") == (0, 0)
    assert _ck_produce(bs, "clocked", [(b"k", now), (b"k", now + HOUR // 2)]) == [0, 0]


async def test_confluent_fails_only_the_records_with_bad_timestamps(gateway: Gateway) -> None:
    await asyncio.to_thread(_bad_timestamps, kafka_bootstrap(gateway))


def _kafka_python(bs: str) -> None:
    _create(bs, "kp-table", {"cleanup.policy": "compact"})
    p = KafkaProducer(bootstrap_servers=bs, linger_ms=1000, retries=0)
    futures = [p.send("kp-table", b"v", key=k) for k in (b"a", None, b"c")]
    p.flush(TIMEOUT)
    errors = [f.exception for f in futures]
    assert isinstance(errors[1], InvalidRecordError) and KEYLESS.format("kp-table-0") in str(errors[1])
    for e in (errors[0], errors[2]):  # refused for the other record's sake
        assert type(e) is KpError and "part of a batch which had one more more invalid records" in str(e)
    futures = [p.send("kp-table", b"v", key=b"k", timestamp_ms=now_ms() + 2 * HOUR)]
    p.flush(TIMEOUT)
    assert isinstance(futures[0].exception, InvalidTimestampError)
    p.close()


async def test_kafka_python_fails_only_the_bad_records(gateway: Gateway) -> None:
    await asyncio.to_thread(_kafka_python, kafka_bootstrap(gateway))


def _batch(keys: list[bytes | None], timestamps: list[int], codec: Compression = Compression.NONE) -> bytes:
    b = BatchBuilder(codec)
    for key, ts in zip(keys, timestamps, strict=True):
        b.append(b"v", key, [], timestamp=ts)
    return b.build()


@pytest.mark.parametrize("version", [7, 8, 9, 11])
async def test_record_errors_on_the_wire(gateway: Gateway, version: int) -> None:
    await gateway.services.log.create_topic("wire-table", 1, config={"cleanup.policy": "compact"})
    await gateway.services.log.create_topic("wire-clock", 1)
    conn = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
    now = now_ms()
    try:
        resp = await call(conn, ApiKey.PRODUCE, version, {
            "transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
                {"name": "wire-table", "partition_data": [{"index": 0, "records": _batch(
                    [b"a", None, b"c", None, None], [now] * 5, Compression.GZIP)}]},
                {"name": "wire-clock", "partition_data": [{"index": 0, "records": _batch(
                    [b"a", b"b", b"c"], [now, now + 2 * HOUR, now])}]},
            ]})
    finally:
        conn[1].close()
    [table], [clock] = (t.partition_responses for t in resp.responses)
    assert (table.error_code, clock.error_code) == (KafkaError.invalid_record, KafkaError.invalid_timestamp)
    if version < 8:  # no record_errors, no error_message before v8
        return
    keyless = KEYLESS.format("wire-table-0")
    assert [(e.batch_index, e.batch_index_error_message) for e in table.record_errors] == [
        (1, keyless), (3, keyless), (4, keyless)]
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{keyless}')" for i in (1, 3, 4))
    assert table.error_message == ("One or more records have been rejected due to 3 record errors in total, and "
                                   f"only showing the first three errors at most: [{shown}]")
    [(index, message)] = [(e.batch_index, e.batch_index_error_message) for e in clock.record_errors]
    low, high = message.rsplit("[", 1)[1].rstrip("]").split(", ")
    assert index == 1 and message == (f"Timestamp {now + 2 * HOUR} of message with offset 1 is out of range. "
                                      f"The timestamp should be within [{low}, {high}]")
    assert int(high) - int(low) == 2**63 - 1 + HOUR  # before.max.ms is LONG_MAX by default
    assert clock.error_message == "One or more records have been rejected due to invalid timestamp"
    assert await gateway.services.log.bounds("wire-table", 0) == (0, 0)
    assert await gateway.services.log.bounds("wire-clock", 0) == (0, 0)
