"""Watermark markers are control entries Kafka clients skip: aiokafka, kafka-python and
confluent-kafka, read_uncommitted and read_committed, see the records alone and move past every
marker, one at the very end of the partition included."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka as ck
import kafka
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from gateway.client import Client
from tests.conftest import kafka_bootstrap, native_url

pytestmark = pytest.mark.kafka

TIMEOUT = 20.0
T0 = int(time.time() * 1000) - 3_600_000  # record times an hour ago: the retention pass at start keeps them
Read = tuple[list[tuple[int, bytes]], int]  # (offset, value) of each record, and the position after


async def aio_read(bs: str, topic: str, isolation: str, count: int, end: int) -> Read:
    consumer = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, isolation_level=isolation)
    await consumer.start()
    out: list[tuple[int, bytes]] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + TIMEOUT
        while (len(out) < count or await consumer.position(tp) < end) and time.monotonic() < deadline:
            got = await consumer.getmany(tp, timeout_ms=200)
            out += [(r.offset, r.value) for r in got.get(tp, [])]
        return out, await consumer.position(tp)
    finally:
        await consumer.stop()


def kp_read(bs: str, topic: str, isolation: str, count: int, end: int) -> Read:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, isolation_level=isolation)
    out: list[tuple[int, bytes]] = []
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + TIMEOUT
        while (len(out) < count or consumer.position(tp) < end) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                out += [(r.offset, r.value) for r in records]
        return out, consumer.position(tp)
    finally:
        consumer.close()


def ck_read(bs: str, topic: str, isolation: str, count: int, end: int) -> Read:
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": "unused-manual-assignment",
                            "enable.auto.commit": False, "isolation.level": isolation})
    out: list[tuple[int, bytes]] = []

    def position() -> int:
        return int(consumer.position([ck.TopicPartition(topic, 0)])[0].offset)

    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT
        while (len(out) < count or position() < end) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out.append((msg.offset(), msg.value()))
        return out, position()
    finally:
        consumer.close()


READERS = {
    "aiokafka": aio_read,
    "kafka-python": lambda *a: asyncio.to_thread(kp_read, *a),
    "confluent": lambda *a: asyncio.to_thread(ck_read, *a),
}


async def test_kafka_clients_skip_watermark_markers_and_move_past_them(gateway):
    await gateway.services.log.create_topic("wm-kafka", 1)
    async with await Client.connect(native_url(gateway)) as client:
        a = await client.create_producer("wm-kafka", "a", batching=False)
        m0 = await a.send(b"m0", event_time=900)
        await a.send_watermark(1000)
        await a.send(b"m1", event_time=1500)
        async with await client.new_transaction(timeout=30) as committed:
            await a.send(b"m2", txn=committed, event_time=2100)
            await a.send_watermark(2000, txn=committed)
        aborted = await client.new_transaction(timeout=30)
        await a.send(b"aborted", txn=aborted, event_time=50)
        await a.send_watermark(100, txn=aborted)
        await aborted.abort()
        await a.send_watermark(3000)
        (last,) = await a.mark_idle()  # the very last entry of the partition
        end = last + 1
        assert m0.offset == 0 and end == 11
        assert await client.watermark("wm-kafka", {0: last}) == 3000
        assert await client.watermark("wm-kafka", {0: end}) is None

    bs = kafka_bootstrap(gateway)
    expected = {
        "read_uncommitted": [(0, b"m0"), (2, b"m1"), (3, b"m2"), (6, b"aborted")],
        "read_committed": [(0, b"m0"), (2, b"m1"), (3, b"m2")],
    }
    for name, read in READERS.items():
        for isolation, records in expected.items():
            got, position = await read(bs, "wm-kafka", isolation, len(records), end)
            assert (got, position) == (records, end), (name, isolation)


def ck_produce(bs: str, topic: str, timestamps: list[int], transactional_id: str = "") -> None:
    """One record per timestamp (after T0), in one batch, in a transaction when `transactional_id` is
    given (its commit marker follows them)."""
    conf = {"bootstrap.servers": bs, "linger.ms": 100}  # the records share one batch
    if transactional_id:
        conf["transactional.id"] = transactional_id
    p = ck.Producer(conf)
    if transactional_id:
        p.init_transactions(TIMEOUT)
        p.begin_transaction()
    for ts in timestamps:
        p.produce(topic, f"t{ts}".encode(), timestamp=T0 + ts)
    if transactional_id:
        p.commit_transaction(TIMEOUT)
    assert p.flush(TIMEOUT) == 0


def ck_offsets_for_times(bs: str, topic: str, targets: list[int]) -> list[tuple[int, int] | None]:
    """confluent-kafka's answers; it gives offsets only, so the timestamps are the records' own."""
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": "unused-offsets-for-times"})
    try:
        found = [consumer.offsets_for_times([ck.TopicPartition(topic, 0, ts)], timeout=TIMEOUT)[0] for ts in targets]
        assert all(f.error is None for f in found), found
        return [(f.offset, RECORD_TIMES.get(f.offset)) if f.offset >= 0 else None for f in found]
    finally:
        consumer.close()


def kp_offsets_for_times(bs: str, topic: str, targets: list[int]) -> list[tuple[int, int] | None]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False)
    tp = kafka.TopicPartition(topic, 0)
    try:
        found = [consumer.offsets_for_times({tp: ts})[tp] for ts in targets]
        return [None if f is None else (f.offset, f.timestamp) for f in found]
    finally:
        consumer.close()


# offset -> the record's timestamp; the other offsets hold markers
RECORD_TIMES = {o: T0 + t for o, t in {0: 1000, 1: 2000, 4: 3000, 6: 4000, 7: 9000, 8: 100}.items()}


async def test_offsets_for_times_find_records_never_markers(gateway):
    """Transaction and watermark markers carry the time they were written ("now"), far above the
    records' timestamps: offsets_for_times answers with the first record at or after the time asked,
    never a marker, also when the log start sits on a marker or after a later record."""
    t = "wm-times"
    await gateway.services.log.create_topic(t, 1)
    bs = kafka_bootstrap(gateway)
    async with await Client.connect(native_url(gateway)) as client:
        a = await client.create_producer(t, "a", batching=False)
        await asyncio.to_thread(ck_produce, bs, t, [1000, 2000], "times-1")  # 0, 1; commit marker 2
        await a.send_watermark(5000)  # 3
        await asyncio.to_thread(ck_produce, bs, t, [3000])  # 4
        await a.send_watermark(6000)  # 5
        await asyncio.to_thread(ck_produce, bs, t, [4000])  # 6
        await asyncio.to_thread(ck_produce, bs, t, [9000, 100], "times-2")  # 7, 8; commit marker 9
        (last,) = await a.mark_idle()  # 10, the last entry
    assert last == 10

    targets = [T0 + t for t in (0, 1500, 2500, 3500, 4200, 9000, 9001)]
    by_start = {  # log start -> the offset found for each target
        0: [0, 1, 4, 6, 7, 7, None],
        1: [1, 1, 4, 6, 7, 7, None],  # inside the first batch
        2: [4, 4, 4, 6, 7, 7, None],  # the start on a commit marker
        3: [4, 4, 4, 6, 7, 7, None],  # on a watermark marker
        8: [8, None, None, None, None, None, None],  # inside a batch whose 9000 is gone
        9: [None] * len(targets),  # only markers left
    }
    for start, offsets in by_start.items():
        await gateway.services.log.delete_records(t, 0, start)
        expected = [None if o is None else (o, RECORD_TIMES[o]) for o in offsets]
        for find in (ck_offsets_for_times, kp_offsets_for_times):
            assert await asyncio.to_thread(find, bs, t, targets) == expected, (find.__name__, start)
